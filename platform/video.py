"""Videos of deterministic episodes: ``hdppo eval RUN_DIR --video out.mp4`` and ``train.video_every``.

The env is made once more, one copy, with ``render_mode="rgb_array"`` among its kwargs
(Gymnasium's ``gym.make(id, render_mode=...)``, a PettingZoo or ``module:factory`` env's own
argument). That copy is wrapped in a :class:`_FrameGrabber`, which renders after the copy's
``reset`` and after each of its ``step`` calls, so that an episode's last frame is kept even
though the vector env resets the copy within the same step. The policies step it through the
evaluation sampler (deterministic actions, frozen observation statistics); training's sampling
path is not touched.

For a hierarchy each frame gets a band above it with the step of the episode and every upper
layer's current command (a discrete index, or the first values of a goal vector), per lane for
squads; ``-`` on the first frame of an episode, before any command.

Headless by default: ``MUJOCO_GL`` is set to ``egl`` unless it is set already (MuJoCo renders
offscreen through EGL, or through OSMesa with ``MUJOCO_GL=osmesa``); PyBullet's TinyRenderer
and pygame-drawn envs need no display either.

Files: ``.mp4`` (H.264) through imageio and imageio-ffmpeg, whose wheel carries an ffmpeg binary;
``.gif`` through Pillow. TensorBoard: the animated GIF image summary that
``SummaryWriter.add_video`` writes (see :meth:`hdppo.platform.metrics.MetricsWriter.video`);
TensorBoard shows it in its Images tab.
"""
from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ..envs.errors import ConfigError, EnvError

FORMATS = {".mp4": "H.264 through imageio-ffmpeg", ".gif": "animated GIF through Pillow"}
DEFAULT_FPS = 30.0
# GIF frame delays are in 1/100 s and browsers slow delays under 0.02 s down to 0.1 s: faster
# envs (MuJoCo's 125 fps) keep every k-th frame in a GIF so that it plays at its real speed.
GIF_MAX_FPS = 25.0
TINY_SIDE, MIN_SIDE = 64, 160  # frames under 64 px a side (MinAtar's 10x10) are scaled up by a whole factor to 160+
MAX_FRAMES = 100_000          # hdppo eval --video: a safety cap for envs that never end
TENSORBOARD_MAX_SIDE = 256    # TensorBoard clips are scaled down to this many pixels on their long side
_RENDER_FIX = ("Record an env that renders frames: a Gymnasium or PettingZoo env that lists 'rgb_array' in "
               "metadata['render_modes'] and, made with render_mode='rgb_array', returns an [H, W, 3] uint8 "
               "array from render(); a 'module:factory' env must accept render_mode and pass it on. Or leave "
               "out --video (and train.video_every).")


def headless() -> None:
    """MuJoCo's offscreen backend unless the user chose one (read when a renderer is made); SDL without display or sound."""
    os.environ.setdefault("MUJOCO_GL", "egl")
    # pygame-drawn envs (Gymnasium's classic control, PettingZoo's butterfly, highway-env): no display,
    # no sound device to look for (SDL would print XDG_RUNTIME_DIR and ALSA errors). SDL's "offscreen"
    # video driver rather than "dummy": highway-env draws nothing at all under "dummy" (its EnvViewer
    # turns itself off), and every frame would be black.
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
    os.environ.setdefault("SDL_AUDIODRIVER", "dummy")


def check_output(path: str | Path) -> Path:
    """The video file to write: a known extension whose writer is installed (fails before any work)."""
    path = Path(path)
    ext = path.suffix.lower()
    if ext not in FORMATS:
        raise ConfigError(f"--video {path}: cannot write {ext or 'a file without extension'!r}; name a file ending in "
                          + " or ".join(f"{k} ({v})" for k, v in FORMATS.items()) + ".")
    try:
        if ext == ".mp4":
            import imageio  # noqa: F401
            import imageio_ffmpeg  # noqa: F401
        else:
            import PIL  # noqa: F401
    except ImportError as exc:
        package = {"imageio": "imageio", "imageio_ffmpeg": "imageio-ffmpeg", "PIL": "pillow"}.get(exc.name or "", exc.name)
        raise ConfigError(f"--video {path}: writing {ext} needs {package}, which is not installed here ({exc}). "
                          f"Install it (pip install {package}, or reinstall hdppo, which depends on it), or write a "
                          f"{'.gif' if ext == '.mp4' else '.mp4'} instead.") from None
    return path


# -- frames --------------------------------------------------------------------------------------
def _as_frame(frame: Any, name: str) -> np.ndarray:
    if frame is None:
        raise EnvError(f"env {name!r}: render() returned None although it was made with render_mode='rgb_array'. "
                       + _RENDER_FIX)
    a = np.asarray(frame)
    if a.ndim != 3 or a.shape[-1] not in (3, 4) or a.size == 0:
        raise EnvError(f"env {name!r}: render() returned {type(frame).__name__} of shape {a.shape}, not an "
                       "[H, W, 3] image. " + _RENDER_FIX)
    if a.dtype != np.uint8:
        a = np.clip(a * (255.0 if np.issubdtype(a.dtype, np.floating) and a.max() <= 1.0 else 1.0), 0, 255)
        a = a.astype(np.uint8)
    return np.array(a[..., :3])  # a copy: it is handed on one frame late, and an env may reuse its buffer


_GL_WORDS = ("opengl", "egl", "osmesa", "glfw", "mujoco", "display", "gl context", "glget")


def _render_failed(name: str, exc: Exception) -> EnvError:
    text = f"{type(exc).__name__}: {exc}"
    module = type(exc).__module__.lower()
    if module.startswith(("opengl", "mujoco")) or any(k in text.lower() for k in _GL_WORDS):
        gl = os.environ.get("MUJOCO_GL", "")
        return EnvError(f"env {name!r} could not render offscreen (MUJOCO_GL={gl}): {text}. MuJoCo needs an "
                        "OpenGL backend that works without a display: EGL (an NVIDIA driver, or Mesa's: apt-get install "
                        "libegl1 libegl-mesa0 libgl1-mesa-dri; MUJOCO_GL=egl, the default here) or OSMesa (apt-get install "
                        "libosmesa6, then MUJOCO_GL=osmesa).")
    return EnvError(f"env {name!r}: render() failed with render_mode='rgb_array': {text}. " + _RENDER_FIX)


class _FrameGrabber:
    """Stands in for one env copy (a ``gymnasium.Env`` or an :mod:`hdppo.envs.adapters` adapter):
    everything passes through, and ``reset``/``step`` also render a frame."""

    def __init__(self, inner: Any, name: str, grab: Callable[[np.ndarray, bool], None]):
        self._inner, self._name, self._grab = inner, name, grab

    def __getattr__(self, key: str) -> Any:
        return getattr(self._inner, key)

    def _render(self) -> Any:
        return self._inner.render()

    def _frame(self, reset: bool) -> None:
        try:
            frame = self._render()
        except Exception as exc:  # noqa: BLE001 - any failure to render is reported with its fix
            raise _render_failed(self._name, exc) from None
        self._grab(_as_frame(frame, self._name), reset)

    def reset(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner.reset(*args, **kwargs)
        self._frame(True)
        return out

    def step(self, *args: Any, **kwargs: Any) -> Any:
        out = self._inner.step(*args, **kwargs)
        self._frame(False)
        return out


def _render_config(cfg: Any) -> Any:
    """``cfg`` with ``render_mode='rgb_array'`` in the env kwargs (and a per-copy env type)."""
    env = cfg.env
    update: dict[str, Any] = {"kwargs": {**env.kwargs, "render_mode": "rgb_array"}}
    if env.type == "gymnasium_vector" and env.id is not None:
        update["type"] = "gymnasium"  # the same env, one copy made by gym.make
    elif env.type == "vector":
        return cfg  # one copy of the batched env, drawn by its render_copy(0) (see _VectorFrames)
    elif env.type == "gymnasium_vector":
        raise EnvError(f"env {env.name!r} is natively vectorised (env.type {env.type!r}): a video is recorded from "
                       "one env copy stepped by itself, which such a factory does not give. Record with an env.type "
                       "that makes single copies (gymnasium, pettingzoo, rllib) of the same env.")
    return cfg.model_copy(update={"env": env.model_copy(update=update)})


class _VectorFrames(_FrameGrabber):
    """Stands in for a one-copy natively vectorised env (``env.type: vector``) that can draw its
    copies (``render_copy(i) -> [H, W, 3]``): as :class:`_FrameGrabber`, with frames of copy 0.
    Such an env resets a copy inside the step that ends its episode, so an episode's last frame
    is the next one's first (the final position is not shown)."""

    def _render(self) -> Any:
        return self._inner.render_copy(0)

    def step(self, actions: np.ndarray) -> Any:
        out = self._inner.step(actions)
        self._frame(bool(np.asarray(out.episode_end)[0]))
        return out


def _make_render_env(cfg: Any, seed: int | None, grab: Callable[[np.ndarray, bool], None]):
    """(a one-copy vector env whose copy renders into ``grab``, its first observation, the layer specs,
    the env's frame rate)."""
    from ..envs.vector import AdapterCopies, GymnasiumCopies
    from ..hierarchies.spec import make_env

    headless()
    rcfg = _render_config(cfg)
    name = cfg.env.name
    try:
        venv = make_env(rcfg, 1, seed)
    except EnvError as exc:
        # The config's kwargs are fine (training made the env from them): render_mode is what was refused.
        why = str(exc).split(". Check env.kwargs", 1)[0].rstrip(".")
        raise EnvError(f"env {name!r} could not be made with render_mode='rgb_array': {why}. " + _RENDER_FIX) from None
    if cfg.env.type == "vector":
        if not callable(getattr(venv, "render_copy", None)):
            venv.close()
            raise EnvError(f"env {name!r} (env.type 'vector'): {type(venv).__name__} has no render_copy(i) method, "
                           "so no frame can be drawn. Give the batched env a render_copy(i) that returns copy i as "
                           "an [H, W, 3] uint8 image (see hdppo.envs.vector.VectorMultiAgentEnv), or record with an "
                           "env.type that makes single copies of the same env.")
        venv = _VectorFrames(venv, name, grab)
        first, specs = _reset_and_spec(cfg, venv, seed)
        meta = getattr(venv, "metadata", None) or {}
        return venv, first, specs, float(meta.get("render_fps") or DEFAULT_FPS)
    if isinstance(venv, GymnasiumCopies):
        copies = venv.envs
    elif isinstance(venv, AdapterCopies):
        copies = venv.copies
    else:
        venv.close()
        raise EnvError(f"env {name!r}: {type(venv).__name__} gives no single env copy to render. " + _RENDER_FIX)
    inner = copies[0]
    mode = getattr(inner, "render_mode", getattr(getattr(inner, "env", None), "render_mode", "rgb_array"))
    if mode != "rgb_array":  # a factory that took the argument and dropped it
        venv.close()
        raise EnvError(f"env {name!r} was made with render_mode='rgb_array' but reports render_mode {mode!r}. "
                       + _RENDER_FIX)
    copies[0] = _FrameGrabber(inner, name, grab)
    first, specs = _reset_and_spec(cfg, venv, seed)
    meta = getattr(inner, "metadata", None) or getattr(getattr(inner, "env", None), "metadata", None) or {}
    return venv, first, specs, float(meta.get("render_fps") or DEFAULT_FPS)


def _reset_and_spec(cfg: Any, venv: Any, seed: int | None) -> tuple[Any, Any]:
    """The first observation and the layer specs of a render env just made; closed if either fails."""
    from ..hierarchies.spec import build_spec, reset_env

    try:
        first = reset_env(venv, seed)
        return first, build_spec(cfg, venv, first)
    except BaseException:
        venv.close()
        raise


def check_renders(cfg: Any, seed: int | None = None) -> None:
    """Raise :class:`EnvError` with the fix unless the configured env renders ``rgb_array`` frames."""
    venv, *_ = _make_render_env(cfg, seed, lambda frame, reset: None)
    venv.close()


# -- the overlay ---------------------------------------------------------------------------------
def _font():
    from PIL import ImageFont

    return ImageFont.load_default(size=12)


def _line_height(font) -> int:
    box = font.getbbox("Ag|")
    return int(box[3] - min(box[1], 0)) + 3


def _format(values: np.ndarray, discrete: bool) -> str:
    if discrete:
        return ",".join(str(int(v)) for v in values)
    shown = " ".join(f"{v:+.2f}" for v in values[:4])
    return f"[{shown}{' ...' if len(values) > 4 else ''}]"


@dataclass
class Recording:
    """What was recorded: the episodes' returns and lengths, the frames written and their size."""

    returns: list[float] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    frames: int = 0
    size: tuple[int, int] | None = None      # (width, height) of the frames written
    fps: float = DEFAULT_FPS
    labels: list[list[str]] = field(default_factory=list)  # the overlay's lines of each frame (hierarchies)
    metrics: dict[str, float] = field(default_factory=dict)  # the env's episode metrics, means over the episodes


class Recorder:
    """One env copy with the policies of ``states``; :meth:`run` hands each frame to a sink."""

    def __init__(self, cfg: Any, states: dict[str, dict[str, Any]], seed: int | None = None,
                 overlay: bool = True, max_side: int | None = None, scripted: Sequence[str] = ()):
        from .evaluation import EVAL_SEED_OFFSET, eval_sampler

        seed = cfg.train.seed + EVAL_SEED_OFFSET if seed is None else seed
        self._pending: tuple[np.ndarray, dict[str, np.ndarray] | None, int] | None = None
        self._ep_step = 0
        self._sink: Callable[[np.ndarray], None] | None = None
        self.sampler = None
        self.venv, first, specs, self.fps = _make_render_env(cfg, seed, self._grab)
        try:
            self.sampler = eval_sampler(cfg, states, self.venv, first, specs, scripted)
        except BaseException:
            self.venv.close()
            raise
        self.overlay = overlay and len(specs) > 1
        self.max_side = max_side
        self.recording = Recording(fps=self.fps)
        self._font = _font() if self.overlay else None

    def _grab(self, frame: np.ndarray, reset: bool) -> None:
        """Frames are handed on one grab late: the last one, the reset of an episode that is not
        recorded, is then dropped."""
        self._ep_step = 0 if reset else self._ep_step + 1
        commands = None
        if self.sampler is not None and not reset:
            commands = {p.name: self.sampler.last_action[p.name][0].copy() for p in self.sampler.plans if not p.bottom}
        if self._pending is not None:
            self._emit(*self._pending)
        self._pending = (frame, commands, self._ep_step)

    def _lines(self, commands: dict[str, np.ndarray] | None, step: int) -> list[str]:
        lines = [f"step {step}"]
        for p in self.sampler.plans:  # type: ignore[union-attr]
            if p.bottom:
                continue
            discrete = p.spec.cfg.action.type in ("discrete", "multidiscrete")
            vals = ["-" if commands is None else _format(commands[p.name][k], discrete) for k in range(p.L)]
            one = len(p.lanes) == 1
            lines.append(f"{p.name}: " + "  ".join(v if one else f"{lane}={v}" for lane, v in zip(p.lanes, vals)))
        return lines

    def _compose(self, frame: np.ndarray, lines: list[str] | None) -> np.ndarray:
        from PIL import Image, ImageDraw

        img = Image.fromarray(frame)
        if max(img.size) < TINY_SIDE:  # a 10x10 MinAtar screen: whole pixels, large enough to see and to label
            k = math.ceil(MIN_SIDE / max(img.size))
            img = img.resize((img.width * k, img.height * k), Image.NEAREST)
        if self.max_side and max(img.size) > self.max_side:
            scale = self.max_side / max(img.size)
            img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.BILINEAR)
        if lines:
            lh = _line_height(self._font)
            band = Image.new("RGB", (img.width, lh * len(lines) + 4), (25, 25, 25))
            draw = ImageDraw.Draw(band)
            for k, line in enumerate(lines):
                draw.text((4, 2 + k * lh), line, fill=(255, 255, 255), font=self._font)
            both = Image.new("RGB", (img.width, band.height + img.height))
            both.paste(band, (0, 0))
            both.paste(img, (0, band.height))
            img = both
        # H.264 in yuv420p wants even sides: pad with black rather than let the writer rescale.
        w, h = img.width + img.width % 2, img.height + img.height % 2
        out = np.zeros((h, w, 3), np.uint8)
        out[: img.height, : img.width] = np.asarray(img)
        return out

    def _emit(self, frame: np.ndarray, commands: dict[str, np.ndarray] | None, step: int) -> None:
        if self._sink is None:
            raise RuntimeError("Recorder: a frame arrived outside run()")
        lines = self._lines(commands, step) if self.overlay else None
        out = self._compose(frame, lines)
        self.recording.frames += 1
        self.recording.size = (out.shape[1], out.shape[0])
        if lines is not None:
            self.recording.labels.append(lines)
        self._sink(out)

    def run(self, episodes: int, sink: Callable[[np.ndarray], None], max_frames: int = MAX_FRAMES) -> Recording:
        """Step until ``episodes`` episodes have ended (or ``max_frames`` frames were made)."""
        self._sink = sink
        rec = self.recording
        while len(rec.returns) < episodes and rec.frames < max_frames:
            for ret, length, _ in self.sampler.step():  # type: ignore[union-attr]
                rec.returns.append(float(ret))
                rec.lengths.append(int(length))
        self._pending = None
        # As hdppo eval prints them without a video: each declared metric's mean over the episodes.
        rec.metrics = {k: float(np.mean(v)) for k, v in self.sampler.episode_infos.items() if v}  # type: ignore[union-attr]
        return rec

    def close(self) -> None:
        self.venv.close()


# -- writers -------------------------------------------------------------------------------------
def _stride(fps: float, limit: float) -> int:
    return max(1, math.ceil(fps / limit - 1e-9))


def gif_bytes(frames: np.ndarray | list[np.ndarray], fps: float) -> bytes:
    """An endlessly looping animated GIF of ``frames`` (each ``[H, W, 3]`` uint8), ``fps`` frames a second."""
    from PIL import Image

    images = [Image.fromarray(np.asarray(f)) for f in frames]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], loop=0,
                   duration=max(20, round(1000 / fps)))
    return buf.getvalue()


class _Mp4:
    def __init__(self, path: Path, fps: float):
        import imageio.v2 as imageio

        self._w = imageio.get_writer(str(path), format="FFMPEG", mode="I", fps=fps, codec="libx264",
                                     pixelformat="yuv420p", macro_block_size=2, ffmpeg_log_level="error")

    def __call__(self, frame: np.ndarray) -> None:
        self._w.append_data(frame)

    def close(self) -> None:
        self._w.close()


class _Gif:
    def __init__(self, path: Path, fps: float):
        self.path, self.stride = path, _stride(fps, GIF_MAX_FPS)
        self.fps = fps / self.stride
        self.frames: list[np.ndarray] = []
        self._seen = 0

    def __call__(self, frame: np.ndarray) -> None:
        if self._seen % self.stride == 0:
            self.frames.append(frame)
        self._seen += 1

    def close(self) -> None:
        if self.frames:
            self.path.write_bytes(gif_bytes(self.frames, self.fps))


def record_video(cfg: Any, states: dict[str, dict[str, Any]], path: str | Path, episodes: int,
                 seed: int | None = None, fps: float | None = None, scripted: Sequence[str] = ()) -> Recording:
    """Record ``episodes`` deterministic episodes into ``path`` (.mp4 or .gif); the file is written
    only when every frame could be made. ``scripted`` layers act by their teacher."""
    path = check_output(path)
    if episodes < 1:
        raise ConfigError(f"--video {path}: record at least one episode (--episodes {episodes}).")
    recorder = Recorder(cfg, states, seed, scripted=scripted)
    try:
        rate = float(fps or recorder.fps)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.stem}.partial{path.suffix}")
        writer = _Mp4(tmp, rate) if path.suffix.lower() == ".mp4" else _Gif(tmp, rate)
        try:
            rec = recorder.run(episodes, writer)
            writer.close()
        except BaseException:
            writer.close()
            tmp.unlink(missing_ok=True)  # failed part-way: no half a video under the name asked for
            raise
        try:
            tmp.replace(path)
        except OSError as exc:  # e.g. the name is a folder now: keep nothing half-done
            tmp.unlink(missing_ok=True)
            raise ConfigError(f"--video {path}: the finished video could not be moved there ({exc.strerror or exc}). "
                              "Name a file in a folder you can write to.") from None
        # What the file holds: a GIF keeps every stride-th frame (GIF_MAX_FPS).
        rec.frames, rec.fps = (len(writer.frames), writer.fps) if isinstance(writer, _Gif) else (rec.frames, rate)
        return rec
    finally:
        recorder.close()


def tensorboard_clip(cfg: Any, states: dict[str, dict[str, Any]], max_steps: int,
                     seed: int | None = None) -> tuple[np.ndarray, float]:
    """One deterministic episode (at most ``max_steps`` env steps) as ``[T, H, W, 3]`` uint8 frames
    for TensorBoard, scaled down to ``TENSORBOARD_MAX_SIDE`` pixels, and its frame rate."""
    recorder = Recorder(cfg, states, seed, max_side=TENSORBOARD_MAX_SIDE)
    try:
        stride = _stride(recorder.fps, GIF_MAX_FPS)
        frames: list[np.ndarray] = []
        seen = [0]

        def keep(frame: np.ndarray) -> None:
            if seen[0] % stride == 0:
                frames.append(frame)
            seen[0] += 1

        recorder.run(1, keep, max_frames=max_steps + 1)
        return np.stack(frames[: max_steps // stride + 1]), recorder.fps / stride
    finally:
        recorder.close()
