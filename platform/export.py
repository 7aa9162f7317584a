"""One layer's trained policy as a file for inference outside hdppo (ONNX or TorchScript), and a
JSON of its input layout.

The exported model is the deterministic policy with everything between the raw input and the
action folded in, so a deployment needs no hdppo and no statistics of its own:

    raw input [B, obs_dim] float32 --(x - mean) / std, clipped to +-clip--> actor MLP
      Box:                    the Gaussian's mean, clipped to the space's bounds     [B, *shape] float32
      Discrete/MultiDiscrete: argmax of each component's log-softmax, illegal
                              actions masked out, plus the space's ``start``          [B] / [B, *shape] int64

That output is exactly what the sampler hands to ``env.step`` (the bottom layer; see
``ActionHead.to_env_array``) or, for a layer above, the command index or clipped goal that the
layer below receives (one-hot encoded there). A layer whose env gives action masks takes them
as a second input, ``action_mask [B, logits]`` (1 legal, 0 illegal). The raw input is assembled
as the sampler assembles it: the env part, then the command of the layer above, then the
agent-id one-hot; the JSON names each field with its offset and size.
"""
# No `from __future__ import annotations`: TorchScript reads DeterministicPolicy's annotations
# as objects, and postponed ones are strings it cannot resolve.
import copy
import importlib.util
import json
import logging
import warnings
from pathlib import Path
from typing import Any, List, Optional

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from ..envs.vector import policy_space
from ..hierarchies.spec import LayerSpec, probe_env
from ..policies.networks import MASKED_LOGIT, ActorCritic
from ..policies.normalizers import RunningStats
from .config import Config
from .errors import ExportError

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}
# torch.onnx.export(dynamo=True), the exporter torch recommends since 2.9 (the TorchScript-based
# one is deprecated), translates through onnxscript and writes with onnx.
ONNX_MODULES = ("onnx", "onnxscript")
INSTALL = "pip install 'hdppo[export]'"


class DeterministicPolicy(nn.Module):
    """Raw policy input ``[B, obs_dim]`` (and ``action_mask [B, logits]`` for a masked layer) ->
    the action the env (or the layer below) receives. See the module docstring."""

    nvec: List[int]       # typed for TorchScript (an empty list has no element type to infer)
    out_shape: List[int]

    def __init__(self, policy: ActorCritic, mean: np.ndarray, std: np.ndarray, clip: float, normalize: bool):
        super().__init__()
        head = policy.head
        self.actor = copy.deepcopy(policy.actor).float().eval()
        self.normalize = bool(normalize)
        self.clip = float(clip)
        self.masked_logit = float(MASKED_LOGIT)  # an attribute: TorchScript does not read module globals
        self.register_buffer("mean", torch.as_tensor(np.asarray(mean, np.float32)))
        self.register_buffer("std", torch.as_tensor(np.asarray(std, np.float32)))
        self.box = head.kind == "box"
        self.single = head.kind == "discrete"
        self.nvec: list[int] = list(head.nvec)
        self.out_shape: list[int] = [int(s) for s in head.shape]
        box = self.box
        self.register_buffer("low", torch.as_tensor(head.low if box else np.zeros(0, np.float32)))
        self.register_buffer("high", torch.as_tensor(head.high if box else np.zeros(0, np.float32)))
        self.register_buffer("start", torch.as_tensor(np.zeros(0, np.int64) if box else head.start.astype(np.int64)))

    def forward(self, obs: torch.Tensor, action_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = obs
        if self.normalize:
            # The worker's ObservationNormalizer: float32 (x - mean) / std, then min/max to +-clip.
            x = torch.clamp((x - self.mean) / self.std, -self.clip, self.clip)
        out = self.actor(x)
        if self.box:
            return torch.minimum(torch.maximum(out, self.low), self.high).reshape([-1] + self.out_shape)
        if action_mask is not None:
            out = torch.where(action_mask > 0, out, torch.full_like(out, self.masked_logit))  # as ActorCritic: zero probability
        # The argmax of the log-softmax, as ActorCritic.act picks it (ties broken the same way).
        picks = [torch.log_softmax(chunk, dim=-1).argmax(-1) for chunk in torch.split(out, self.nvec, dim=-1)]
        a = torch.stack(picks, dim=-1) + self.start
        return a[:, 0] if self.single else a.reshape([-1] + self.out_shape)


def check_format(fmt: str) -> None:
    """Refuse a format whose packages are missing, before any work."""
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}; choose one of {', '.join(FORMATS)}.")
    if fmt == "onnx":
        missing = [m for m in ONNX_MODULES if importlib.util.find_spec(m) is None]
        if missing:
            raise ExportError(f"--format onnx needs the package(s) {', '.join(missing)}, which are not installed. "
                              f"Install the export extra: {INSTALL} (onnx, onnxscript, onnxruntime), or use "
                              "--format torchscript, which needs only torch.")


def check_layer(cfg: Config, layer: str | None) -> str:
    """The layer to export: the one named, or the only one."""
    names = [x.name for x in cfg.layers]
    if layer is None:
        if len(names) == 1:
            return names[0]
        raise ExportError(f"this run has {len(names)} layers ({', '.join(names)}); name one with --layer.")
    if layer not in names:
        raise ExportError(f"the run has no layer {layer!r}; its layers are {', '.join(names)}. Pass one of "
                          "them to --layer.")
    return layer


def export_layer(cfg: Config, state: dict[str, Any], layer: str, fmt: str, out: Path,
                 source: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write ``layer``'s deterministic policy (from its learner ``state``, as in a checkpoint) to
    ``out`` in ``fmt``, and its input layout beside it (``out`` + ``.json``). ``source`` is
    recorded in the JSON (run dir, checkpoint). Returns (model path, JSON path)."""
    check_format(fmt)
    venv, _, specs = probe_env(cfg, cfg.train.seed)
    try:
        spec = next(s for s in specs if s.name == layer)
        slot, agents = int(venv.obs_dim), list(venv.agents)
        obs_space = venv.observation_space(agents[0]) if agents else None
        state_is_obs = bool(getattr(venv, "state_is_obs", False))
    finally:
        venv.close()
    p = spec.cfg.policy
    if spec.encoder and spec.encoder.get("kind") == "gru":
        raise ExportError(f"layer {layer!r} has a recurrent policy (policy.encoder {p.encoder!r}): export of a GRU "
                          "layer (its hidden state as an extra input and output) is not supported yet.")
    policy = ActorCritic(spec.obs_dim, spec.action_space, p.hidden, p.activation, p.init_log_std, spec.critic_dim,
                         spec.encoder)
    policy.load_state_dict(state["policy"])
    n = spec.cfg.normalization
    stats = RunningStats.from_state(state["obs_stats"])
    # The statistics as a worker normalises with them (ObservationNormalizer: float32 mean, std(eps=1e-8)).
    mean, std = stats.mean.astype(np.float32), stats.std().astype(np.float32)
    model = DeterministicPolicy(policy, mean, std, n.clip, n.observation).eval()
    # An inference model: no autograd on each call of a control loop, and outputs that .numpy()
    # takes as they are (a Box policy's mean required grad).
    model.requires_grad_(False)
    masked = spec.bottom and spec.mask_dim > 0
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    example = (torch.zeros(2, spec.obs_dim),) + ((torch.ones(2, policy.head.logits_dim),) if masked else ())
    if fmt == "onnx":
        _onnx(model, example, out)
    else:
        torch.jit.save(torch.jit.script(model), str(out))
    doc = layout(cfg, spec, specs, slot, agents, policy, mean, std, masked, obs_space, state_is_obs)
    doc = {"format": fmt, "file": out.name, **(source or {}), "version": state.get("version"),
           "env_steps": state.get("env_steps"),
           "env_steps_counted": "by this layer's DPPO group (groups share train.total_env_steps)", **doc}
    meta = out.with_name(out.name + ".json")
    meta.write_text(json.dumps(doc, indent=2) + "\n")
    return out, meta


def _onnx(model: nn.Module, example: tuple[torch.Tensor, ...], out: Path) -> None:
    batch = torch.export.Dim("batch")
    names = ["obs", "action_mask"][: len(example)]
    # The exporter logs a warning per torchvision operator it cannot register and prints its stages.
    quiet = logging.getLogger("torch.onnx")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, example, str(out), dynamo=True, external_data=False, verbose=False,
                              input_names=names, output_names=["action"],
                              dynamic_shapes=tuple({0: batch} for _ in example))
    finally:
        quiet.setLevel(level)


# ----------------------------------------------------------------------------- the input layout

def _bounds(values: np.ndarray) -> list[float | None]:
    """Box bounds for JSON: an infinite bound is null (JSON has no infinity)."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, np.float64).reshape(-1)]


def _space(space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {"type": "Box", "shape": list(space.shape), "low": _bounds(space.low), "high": _bounds(space.high)}
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": np.asarray(space.nvec).reshape(-1).tolist(),
                "start": np.asarray(space.start).reshape(-1).tolist(), "shape": list(space.shape)}
    return {"type": type(space).__name__, "repr": repr(space)}


def _dict_parts(space: gym.Space | None) -> list[dict[str, Any]] | None:
    """Where each key of a Dict observation lands in the flat policy input (Gymnasium flattens a
    Dict in its sorted key order, not the order the env declared), so that code outside hdppo
    builds the same vector; None for any other space."""
    if not isinstance(space, gym.spaces.Dict):
        return None
    inner = policy_space(space) if "action_mask" in space.spaces else space
    if not isinstance(inner, gym.spaces.Dict):
        return None
    parts, offset = [], 0
    for key, sub in inner.spaces.items():
        size = int(gym.spaces.flatdim(sub))
        parts.append({"key": key, "offset": offset, "size": size, "space": _space(sub)})
        offset += size
    return parts


def _env_field(cfg: Config, spec: LayerSpec, slot: int, obs_space: gym.Space | None = None,
               state_is_obs: bool = False) -> dict[str, Any]:
    src = spec.cfg.observation.source
    width = spec.obs_dim - spec.command_in - len(spec.agent_ids)
    out: dict[str, Any] = {"name": "env", "offset": 0, "size": width, "source": src}
    if src == "state" and state_is_obs:
        out["description"] = ("the env's observation flattened with gymnasium.spaces.flatten (float32): the env "
                              "has no state(), and a single-agent env's state is its observation")
    elif src == "state":
        out["description"] = "the env's global state() flattened (float32)"
    elif src != "env":
        out["description"] = f"{src}(env_obs, members, env): the view this function returns, flattened"
    elif spec.bottom:
        out["description"] = ("the acting agent's own observation, flattened with gymnasium.spaces.flatten "
                              "(for a Dict observation with action_mask: its 'observation' entry, or every key "
                              "but the mask when there are others)")
        parts = _dict_parts(obs_space)
        if parts:
            out["parts"] = parts
    else:
        members = {lane: m or "all agents" for lane, m in spec.members.items()}
        out["description"] = (f"the lane's member agents' flat observations side by side, each in a slot of {slot} "
                              "values (the widest agent's flat observation, zero-padded)")
        out["members"] = members
    return out


def _command_field(cfg: Config, spec: LayerSpec, offset: int) -> dict[str, Any]:
    above = cfg.layers[spec.index - 1]
    a = above.action
    out: dict[str, Any] = {"name": "command", "offset": offset, "size": spec.command_in, "from_layer": above.name}
    if a.type == "box":
        out["description"] = "the layer above's goal vector, clipped to its bounds"
        out["low"], out["high"] = list(a.low), list(a.high)  # type: ignore[arg-type]
    else:
        nvec = [a.n] if a.type == "discrete" else list(a.nvec)  # type: ignore[list-item]
        out["description"] = ("one-hot of the layer above's command" if a.type == "discrete" else
                              "one one-hot per component of the layer above's command, side by side")
        out["nvec"] = nvec
    return out


def layout(cfg: Config, spec: LayerSpec, specs: list[LayerSpec], slot: int, agents: list[str],
           policy: ActorCritic, mean: np.ndarray, std: np.ndarray, masked: bool,
           obs_space: gym.Space | None = None, state_is_obs: bool = False) -> dict[str, Any]:
    """What the exported model takes and returns, field by field (the JSON written beside it)."""
    fields = [_env_field(cfg, spec, slot, obs_space, state_is_obs)]
    offset = fields[0]["size"]
    if spec.command_in:
        fields.append(_command_field(cfg, spec, offset))
        offset += spec.command_in
    if spec.agent_ids:
        fields.append({"name": "agent_id", "offset": offset, "size": len(spec.agent_ids), "order": spec.agent_ids,
                       "description": "one-hot of the acting " + ("agent" if spec.bottom else "lane") +
                       " in this order (parameter sharing with ids)"})
    n = spec.cfg.normalization
    inputs: list[dict[str, Any]] = [{"name": "obs", "dtype": "float32", "shape": ["batch", spec.obs_dim],
                                     "description": "the raw (unnormalised) policy input, the fields below in order",
                                     "fields": fields}]
    if masked:
        inputs.append({"name": "action_mask", "dtype": "float32", "shape": ["batch", policy.head.logits_dim],
                       "description": "the env's legal-action mask, 1 legal and 0 illegal (all ones if the env "
                       "gives none this step)"})
    head = policy.head
    space = spec.action_space
    if head.kind == "box":
        rule = "the Gaussian policy's mean, clipped to the bounds (as the sampler clips before env.step)"
        dtype, shape = "float32", ["batch", *head.shape]
    else:
        rule = ("per component, the argmax of the log-softmax of the logits" + (", illegal actions masked out" if masked else "")
                + ", plus the space's start")
        dtype, shape = "int64", ["batch"] if head.kind == "discrete" else ["batch", *head.shape]
    receives = "env.step" if spec.bottom else f"the layer below ({specs[spec.index + 1].name}) as its command"
    output = {"name": "action", "dtype": dtype, "shape": shape, "space": _space(space),  # type: ignore[arg-type]
              "deterministic": rule, "description": f"what {receives} receives, one row per acting "
              + ("agent" if spec.bottom else "lane")}
    acting = ({"agents": list(spec.members) if spec.members else agents} if spec.bottom
              else {"lanes": {lane: m or "all agents" for lane, m in spec.members.items()}})
    return {
        "layer": spec.name, "layer_index": spec.index, "layers": [s.name for s in specs],
        "env": {"type": cfg.env.type, "name": cfg.env.name, "kwargs": cfg.env.kwargs,
                "max_episode_steps": cfg.env.max_episode_steps},
        "period": spec.cfg.period, "acts_every_env_steps": spec.every, **acting,
        "inputs": inputs, "outputs": [output],
        "normalization": ({"folded_in": True, "formula": "clip((obs - mean) / std, -clip, clip), float32",
                           "clip": n.clip, "mean": mean.tolist(), "std": std.tolist(),
                           "std_is": "sqrt(var + 1e-8) of the observation statistics at the checkpoint"}
                          if n.observation else
                          {"folded_in": False, "formula": "none: the layer trained without observation "
                           "normalization, the raw input goes straight to the network"}),
        "network": {"hidden": list(spec.cfg.policy.hidden), "activation": spec.cfg.policy.activation},
    }
