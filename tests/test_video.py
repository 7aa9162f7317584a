"""Videos: ``hdppo eval RUN_DIR --video`` (mp4 and gif, the command overlay of a hierarchy),
``train.video_every`` (a clip in TensorBoard), and the errors for what cannot be recorded."""
import json
import os
import shutil

import numpy as np
import pytest

from conftest import tiny_config
from hdppo.platform import metrics as M
from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
from hdppo.platform.cli import main
from hdppo.platform.config import load_config, validate
from hdppo.platform.errors import EnvError
from hdppo.platform.trainer import Trainer

CORRIDOR = {"type": "pettingzoo", "entry_point": "hdppo.envs.builtin.corridor:parallel_env",
            "kwargs": {"num_agents": 2, "length": 7, "max_steps": 12}}


def corridor_config(**train) -> dict:
    """Two layers over two walkers, as configs/default.yaml, small enough for a unit test."""
    small = {"ppo": {"minibatch_size": 32, "num_epochs": 1}}
    return {"name": "corridor", "env": CORRIDOR,
            "layers": [{"name": "strategy", "period": 2, "agents": "all", "observation": {"source": "state"},
                        "action": {"type": "discrete", "n": 2}, **small,
                        "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 32}},
                       {"name": "control", "observation": {"source": "env", "command": True},
                        "reward": {"intrinsic": 0.1, "intrinsic_fn": "corridor_follow"}, **small,
                        "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 64}}],
            "train": {"total_env_steps": 192, "checkpoint_every": 1, "eval_episodes": 0, "seed": 1, **train},
            "ray": {"backend": "local"}}


def trained(data: dict, run_dir):
    Trainer(validate(data), run_dir, quiet=True).train()
    return run_dir


@pytest.fixture(scope="module")
def cartpole_run(tmp_path_factory):
    return trained(tiny_config(train={"eval_episodes": 0}), tmp_path_factory.mktemp("video") / "cartpole")


@pytest.fixture(scope="module")
def corridor_run(tmp_path_factory):
    return trained(corridor_config(), tmp_path_factory.mktemp("video") / "corridor")


def read_mp4(path):
    import imageio.v2 as imageio

    with imageio.get_reader(str(path)) as reader:
        return np.stack(list(reader.iter_data()))


def eval_json(capsys, *args) -> dict:
    assert main(["eval", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_video_of_a_flat_gymnasium_run(cartpole_run, tmp_path, capsys):
    out = tmp_path / "clips" / "cartpole.mp4"
    result = eval_json(capsys, cartpole_run, "--video", out, "--episodes", 2)
    frames = read_mp4(out)
    # Each episode: its first frame and one after each step (the last one before the reset included).
    assert len(frames) == result["frames"] == sum(result["lengths"]) + 2
    assert result["lengths"] == [int(r) for r in result["returns"]]  # CartPole: reward 1 a step
    assert frames.shape[1:] == (400, 600, 3) and result["size"] == [600, 400] and result["fps"] == 50
    assert not list(out.parent.glob(".*partial*"))


def test_eval_video_of_a_hierarchy_shows_the_commands(corridor_run, tmp_path, capsys):
    from hdppo.envs.builtin.corridor import CorridorEnv
    from hdppo.platform.video import record_video

    out = tmp_path / "corridor.mp4"
    result = eval_json(capsys, corridor_run, "--video", out, "--episodes", 2)
    frames = read_mp4(out)
    assert len(frames) == result["frames"] == sum(result["lengths"]) + 2
    env_h, env_w = 2 * CorridorEnv.CELL, 7 * CorridorEnv.CELL
    band = frames.shape[1] - env_h
    assert frames.shape[2] == env_w and result["size"] == [env_w, frames.shape[1]] and band >= 20
    top = frames[:, :band].astype(int)
    assert top.mean() < 80 and (top > 200).any()  # dark band, white text
    assert frames[:, band:].mean() > 150          # the corridor's light cells below it

    # The lines of the overlay: the step of the episode and the strategy's current command.
    cfg = load_config(corridor_run / "config.yaml")
    states = learner_states(load_checkpoint(latest_checkpoint(corridor_run)))
    rec = record_video(cfg, states, tmp_path / "corridor.gif", 1)
    assert rec.labels[0] == ["step 0", "strategy: -"]
    assert [lines[0] for lines in rec.labels] == [f"step {t}" for t in range(rec.lengths[0] + 1)]
    assert all(lines[1] in ("strategy: 0", "strategy: 1") for lines in rec.labels[1:])
    from PIL import Image

    with Image.open(tmp_path / "corridor.gif") as gif:  # 4 fps: every frame kept
        assert gif.n_frames == rec.frames and gif.size == rec.size


def test_env_without_rgb_array_exits_2_naming_the_fix(tmp_path, capsys):
    data = tiny_config(env={"entry_point": "scripted_envs:countdown", "kwargs": {"terminate_at": 5}},
                       train={"eval_episodes": 0, "total_env_steps": 256})
    run = trained(data, tmp_path / "countdown")
    assert main(["eval", str(run), "--video", str(tmp_path / "v.mp4")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "render_mode='rgb_array'" in err and "metadata['render_modes']" in err and "Traceback" not in err
    assert not (tmp_path / "v.mp4").exists()
    # train.video_every on such an env fails at the start, before the run writes anything.
    with pytest.raises(EnvError, match="render_mode"):
        Trainer(validate({**data, "train": {**data["train"], "video_every": 1}}), tmp_path / "again", quiet=True).train()
    assert not (tmp_path / "again" / "metrics.jsonl").exists()


def test_batched_env_without_render_copy_is_refused_naming_the_method(tmp_path):
    from hdppo.platform.video import check_renders

    cfg = validate(tiny_config(env={"type": "vector", "entry_point": "scripted_envs:batched_countdown"}))
    with pytest.raises(EnvError, match=r"render_copy\(i\)"):
        check_renders(cfg)


def test_run_dir_without_checkpoints_exits_2(cartpole_run, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(cartpole_run / "config.yaml", empty / "config.yaml")
    assert main(["eval", str(empty), "--video", str(tmp_path / "v.mp4")]) == 2
    assert "holds no checkpoint" in capsys.readouterr().err


@pytest.mark.parametrize("name,blocked,match", [
    ("v.avi", None, "name a file ending in .mp4"),
    ("v.mp4", "imageio_ffmpeg", "pip install imageio-ffmpeg"),
])
def test_a_format_that_cannot_be_written_exits_2(cartpole_run, tmp_path, capsys, monkeypatch, name, blocked, match):
    if blocked:
        monkeypatch.setitem(__import__("sys").modules, blocked, None)  # as if not installed
    assert main(["eval", str(cartpole_run), "--video", str(tmp_path / name)]) == 2
    assert match in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / name).exists()


def test_train_video_every_puts_a_clip_in_tensorboard(tmp_path):
    from PIL import Image
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run = trained(tiny_config(train={"eval_episodes": 0, "video_every": 1, "video_max_steps": 10}), tmp_path / "run")
    acc = EventAccumulator(str(run / "tb" / "control"), size_guidance={"images": 0})
    acc.Reload()
    assert M.VIDEO_EPISODE in acc.Tags()["images"]
    clips = acc.Images(M.VIDEO_EPISODE)
    assert len(clips) == 2  # two updates
    gif = clips[-1].encoded_image_string
    assert gif.startswith(b"GIF89a")
    with Image.open(__import__("io").BytesIO(gif)) as im:
        # CartPole's 50 fps becomes every 2nd frame at 25 fps; 10 steps -> frames 0, 2, ..., 10.
        assert im.n_frames == 6 and im.size == (clips[-1].width, clips[-1].height) == (256, 172)  # 600x400 scaled to 256 wide, padded to even


def _mujoco_renders() -> str | None:
    """Why MuJoCo cannot render offscreen here, or None when it can."""
    import gymnasium as gym

    os.environ.setdefault("MUJOCO_GL", "egl")
    try:
        env = gym.make("Hopper-v5", render_mode="rgb_array", width=64, height=64)
        env.reset(seed=0)
        frame = env.render()
        env.close()
        return None if frame is not None and frame.shape == (64, 64, 3) else f"render() gave {type(frame)}"
    except Exception as exc:  # noqa: BLE001
        return (f"MuJoCo cannot render offscreen with MUJOCO_GL={os.environ['MUJOCO_GL']} ({type(exc).__name__}: "
                f"{exc}); install EGL (apt-get install libegl1 libegl-mesa0 libgl1-mesa-dri) or OSMesa "
                "(apt-get install libosmesa6, MUJOCO_GL=osmesa)")


def test_mujoco_hopper_video_offscreen(tmp_path, capsys):
    """Short episodes: Mesa's software EGL takes a few tenths of a second a frame on this 2-core VM."""
    reason = _mujoco_renders()
    if reason:
        pytest.skip(reason)
    data = tiny_config(env={"id": "Hopper-v5", "max_episode_steps": 8, "kwargs": {"width": 96, "height": 64}},
                       layers=[{"ppo": {"minibatch_size": 64, "num_epochs": 1},
                               "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 64}}],
                       train={"eval_episodes": 0, "total_env_steps": 64})
    run = trained(data, tmp_path / "hopper")
    result = eval_json(capsys, run, "--video", tmp_path / "hopper.mp4", "--episodes", 1)
    frames = read_mp4(tmp_path / "hopper.mp4")
    assert len(frames) == result["lengths"][0] + 1 and frames.shape[1:] == (64, 96, 3)
    assert frames.std() > 5  # a picture, not a blank buffer


def test_eval_refuses_bad_counts_and_never_replaces_a_users_file(cartpole_run, tmp_path, capsys):
    for argv in (["--episodes", "0"], ["--episodes", "-3"], ["--video", str(tmp_path / "v.gif"), "--fps", "-5"],
                 ["--video", str(tmp_path / "v.gif"), "--fps", "0"]):
        with pytest.raises(SystemExit) as exc:   # argparse's usage error
            main(["eval", str(cartpole_run), *argv])
        assert exc.value.code == 2 and "must be above 0" in capsys.readouterr().err
    assert not (tmp_path / "v.gif").exists()
    mine = tmp_path / "mine.mp4"
    mine.write_text("the user's own film")
    assert main(["eval", str(cartpole_run), "--episodes", "1", "--video", str(mine)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the file exists" in err and "--overwrite" in err and mine.read_text() == "the user's own film"
    (tmp_path / "d.mp4").mkdir()
    assert main(["eval", str(cartpole_run), "--episodes", "1", "--video", str(tmp_path / "d.mp4")]) == 2
    assert "that is a folder" in " ".join(capsys.readouterr().err.split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d.mp4", "mine.mp4"]   # no partial file left
    assert main(["eval", str(cartpole_run), "--episodes", "1", "--video", str(mine), "--overwrite"]) == 0
    assert mine.stat().st_size > 100


def test_record_video_leaves_no_partial_file_when_the_name_cannot_be_taken(cartpole_run, tmp_path):
    """record_video called directly (no CLI check first) on a name that is a folder: a clear
    error, and the partial file it wrote is gone."""
    from hdppo.platform.checkpoint import latest_checkpoint, learner_states, load_checkpoint
    from hdppo.platform.config import load_config
    from hdppo.platform.errors import ConfigError
    from hdppo.platform.video import record_video

    (tmp_path / "v.gif").mkdir()
    cfg = load_config(cartpole_run / "config.yaml")
    states = learner_states(load_checkpoint(latest_checkpoint(cartpole_run)))
    with pytest.raises(ConfigError, match="could not be moved there"):
        record_video(cfg, states, tmp_path / "v.gif", 1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v.gif"] and not list((tmp_path / "v.gif").iterdir())


def test_a_tiny_screen_is_scaled_up_and_the_summary_says_what_the_file_holds(tmp_path, capsys):
    """A 10x10 screen (MinAtar's size) came out as a 10x10 video; a GIF keeps every other frame
    of a 30 fps episode, and the summary counted the frames made, not those written; the env's
    episode metrics were left out of an eval with --video."""
    from PIL import Image

    from hdppo.platform.video import Recorder

    rec = Recorder.__new__(Recorder)
    rec.max_side, rec._font = None, None
    assert rec._compose(np.zeros((10, 10, 3), np.uint8), None).shape == (160, 160, 3)
    assert rec._compose(np.zeros((64, 96, 3), np.uint8), None).shape == (64, 96, 3)
    data = tiny_config(env={"entry_point": "scripted_envs:scored_countdown", "kwargs": {"render_mode": "rgb_array"}},
                       train={"eval_episodes": 0, "total_env_steps": 64},
                       layers=[{"ppo": {"minibatch_size": 32, "num_epochs": 1},
                                "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 32}}])
    run = trained(data, tmp_path / "run")
    result = eval_json(capsys, run, "--video", tmp_path / "v.gif", "--episodes", 2, "--fps", 30)
    gif = Image.open(tmp_path / "v.gif")
    assert result["frames"] == gif.n_frames < sum(result["lengths"]) and result["fps"] == 15
    assert "score" in result["episode_metrics"]


def test_eval_json_keeps_stdout_for_the_json_alone(tmp_path, capsys):
    """An env that prints to stdout while it is made (PyBullet's argv[0]= lines) made `eval
    --json | jq` fail: its output now goes to stderr, and stdout holds the one JSON object."""
    data = tiny_config(env={"entry_point": "scripted_envs:chatty_countdown"},
                       train={"eval_episodes": 0, "total_env_steps": 64},
                       layers=[{"ppo": {"minibatch_size": 32, "num_epochs": 1},
                                "dppo": {"num_workers": 1, "num_envs_per_worker": 2, "train_batch_size": 32}}])
    run = trained(data, tmp_path / "run")
    capsys.readouterr()
    assert main(["eval", str(run), "--episodes", "2", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["episodes"] == 2 and "argv[0]=" not in out and "argv[0]=" in err
