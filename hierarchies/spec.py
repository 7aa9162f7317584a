"""The runtime shape of a hierarchy: for each layer its lanes (the agents it acts for), their
members among the env's agents, who commands whom, and the sizes of observations and actions.

Built once from the config and a probe env; everything here is plain data, so the workers and
the learners agree on sizes without talking to each other.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from ..envs.errors import user_code
from ..envs.loading import check_signature
from ..envs.teachers import is_vectorized_teacher
from ..envs.vector import (VecObs, VectorMultiAgentEnv, check_action_space, flat_dims, policy_space,
                           policy_values)
from ..platform.config import Config, LayerConfig, SquadsSpec
from ..platform.errors import ConfigError, EnvError

@dataclass
class LayerSpec:
    name: str
    index: int
    cfg: LayerConfig
    every: int                       # acts every `every` env steps (product of periods at and below)
    lanes: list[str] | None          # fixed lanes of an upper layer; None for the bottom layer
    members: dict[str, list[str] | None] = field(default_factory=dict)  # lane -> env agents (None: all live)
    obs_dim: int = 0                 # policy input width (env part + command + agent id)
    critic_dim: int | None = None
    action_space: gym.Space | None = None
    mask_dim: int = 0
    command_in: int = 0              # width of the command received from above
    agent_ids: list[str] = field(default_factory=list)
    obs_fn: Callable[..., np.ndarray] | None = None
    teacher_fn: Callable[..., Any] | None = None  # teacher.policy, resolved (kickstarting labels)
    encoder: dict[str, Any] | None = None  # ActorCritic's encoder argument (None: MLP); see encoder_spec

    @property
    def bottom(self) -> bool:
        return self.lanes is None


def command_space(layer: LayerConfig) -> gym.Space:
    a = layer.action
    if a.type == "discrete":
        return gym.spaces.Discrete(int(a.n))  # type: ignore[arg-type]
    if a.type == "multidiscrete":
        return gym.spaces.MultiDiscrete(a.nvec)
    return gym.spaces.Box(np.asarray(a.low, np.float32), np.asarray(a.high, np.float32))


def command_vector(layer: LayerConfig, action: np.ndarray) -> np.ndarray:
    """A layer's action as the layer below receives it: one-hot(s), or the clipped goal."""
    a = layer.action
    if a.type == "box":
        return np.clip(action, a.low, a.high).astype(np.float32)
    nvec = [a.n] if a.type == "discrete" else a.nvec
    out = np.zeros(sum(nvec), np.float32)  # type: ignore[arg-type]
    offset = 0
    for k, n in enumerate(nvec):  # type: ignore[union-attr]
        out[offset + int(action[k])] = 1.0
        offset += n
    return out


def split_obs(space: gym.Space, obs: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """Flat observation, and the action mask when the observation is {observation, action_mask}."""
    if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
        return policy_values(space, obs), np.asarray(obs["action_mask"], np.float32).reshape(-1)
    return gym.spaces.flatten(space, obs).astype(np.float32, copy=False), None


env_part_dim = flat_dims


def _layer_error(layer: LayerSpec | LayerConfig, field_: str, msg: str) -> ConfigError:
    name = layer.name
    return ConfigError(f"layer {name!r}, {field_}: {msg}")


def build_spec(cfg: Config, probe: VectorMultiAgentEnv, first: VecObs) -> list[LayerSpec]:
    """Lanes, members and sizes of every layer, checked against a vector env just reset to ``first``."""
    known = list(probe.agents)
    specs: list[LayerSpec] = []
    every = 1
    periods = [layer.period for layer in cfg.layers]
    for i in range(len(cfg.layers) - 1, -1, -1):
        if i < len(cfg.layers) - 1:
            every *= periods[i]
        specs.insert(0, LayerSpec(cfg.layers[i].name, i, cfg.layers[i], every if i < len(cfg.layers) - 1 else 1, None))
    for spec in specs[:-1]:
        agents = spec.cfg.agents
        if isinstance(agents, SquadsSpec):
            spec.lanes = list(agents.squads)
            spec.members = {k: list(v) for k, v in agents.squads.items()}
        elif agents == "all":
            spec.lanes = ["all"]
            spec.members = {"all": None}
        else:
            spec.lanes = ["group"]
            spec.members = {"group": list(agents)}
        for lane, members in spec.members.items():
            for agent in members or []:
                if agent not in known:
                    raise _layer_error(spec, "agents", f"{agent!r} is not an agent of env {probe.name!r}; "
                                       f"its agents are {', '.join(known)}")
    bottom = specs[-1]
    if bottom.cfg.agents != "all":
        controlled = bottom.cfg.agents if isinstance(bottom.cfg.agents, list) else \
            [a for m in bottom.cfg.agents.squads.values() for a in m]  # type: ignore[union-attr]
        unknown = [a for a in controlled if a not in known]
        if unknown:
            raise _layer_error(bottom, "agents", f"{', '.join(map(repr, unknown))} "
                               f"{'is not an agent' if len(unknown) == 1 else 'are not agents'} of env "
                               f"{probe.name!r}; its agents are {', '.join(known)}")
        # An env agent no layer controls would play action 0 (the sampler's empty entry) all run.
        idle = [a for a in known if a not in controlled]
        if idle:
            raise _layer_error(bottom, "agents", f"{', '.join(map(repr, idle))} of env {probe.name!r} "
                               f"{'is' if len(idle) == 1 else 'are'} in no lane of the bottom layer, so nothing would "
                               "choose its actions (it would play action 0 every step). List every agent the env "
                               "steps (or agents: all); to have an env's agents played by a script or a frozen "
                               "policy, give them to env.opponents, which takes them out of the env's agents")
        bottom.members = {a: [a] for a in controlled}
    # Nesting: every lane of a layer must sit inside one lane of the layer above, and every env
    # agent of the bottom layer inside one lane of the layer just above it.
    for upper, lower in zip(specs[:-1], specs[1:-1]):
        for lane, members in lower.members.items():
            parent_lane(upper, members)
    if len(specs) > 1 and (bottom.cfg.observation.command or bottom.cfg.reward.intrinsic_fn):  # a commander each
        for agent in (list(bottom.members) or known):
            parent_lane(specs[-2], [agent])
    for spec in specs:
        _sizes(spec, specs, probe, known, first)
        # A duck-typed vector env (no takes_commands) takes commands if it has the method.
        takes = getattr(probe, "takes_commands", None)
        if takes is None:
            takes = callable(getattr(probe, "apply_command", None))
        if spec.cfg.action.to_env and not takes:
            raise _layer_error(spec, "action.to_env", f"env {probe.name!r} takes no decisions from an upper layer: it "
                               "has no apply_command method (a natively vectorised env: apply_command(layer, copies, "
                               "lanes, actions); a Gymnasium, PettingZoo or RLlib env: apply_command(layer, lane, "
                               "action) on the env itself; see hdppo.envs.vector). Set action.to_env: false, or give "
                               "the env that method (swarm's goal assignment has one).")
    return specs


def parent_lane(upper: LayerSpec, members: list[str] | None) -> str:
    """The lane of ``upper`` whose members include ``members`` (an env agent or a squad)."""
    for lane, up_members in upper.members.items():
        if up_members is None or (members is not None and set(members) <= set(up_members)):
            return lane
    lanes = ", ".join(f"{lane}: {m if m is not None else 'all'}" for lane, m in upper.members.items())
    raise _layer_error(upper, "agents", f"no lane of layers[{upper.index}] ({upper.name}) holds {members} "
                       f"(its lanes: {lanes}). Every agent, and every squad of the layer below, must lie inside "
                       "one lane of each layer above, which commands it: add the missing agents to a lane "
                       f"(layers[{upper.index}].agents, a list or squads), or use agents: all.")


def _state_dim(spec: LayerSpec, probe: VectorMultiAgentEnv) -> int:
    if probe.state_dim is None:
        raise EnvError(f"env {probe.name!r} has no state(); layer {spec.name!r} needs it (observation.source 'state' "
                       "or policy.central_critic). Use observation.source 'env' or a 'module:function' view.")
    return int(probe.state_dim)


def _sizes(spec: LayerSpec, specs: list[LayerSpec], probe: VectorMultiAgentEnv, known: list[str], first: VecObs) -> None:
    layer = spec.cfg
    above = specs[spec.index - 1] if spec.index > 0 else None
    spec.command_in = above.cfg.action.command_dim() if (above is not None and layer.observation.command) else 0
    src = layer.observation.source
    if spec.bottom:
        dims = {env_part_dim(probe.observation_space(a)) for a in known}
        if len(dims) > 1:
            raise _layer_error(spec, "agents", f"the env's agents have different observation sizes {sorted(dims)}; "
                               "parameter sharing needs one size. Give them separate hierarchies or pad them.")
        env_dim, spec.mask_dim = dims.pop()
        # Discrete actions of different sizes are padded to the largest, with masks (envs.vector).
        spec.mask_dim = max(spec.mask_dim, int(getattr(probe, "mask_dim", 0) or 0))
        spaces = {repr(probe.action_space(a)) for a in known}
        if len(spaces) > 1:
            raise _layer_error(spec, "agents", f"the env's agents have different action spaces ({', '.join(spaces)}); "
                               "parameter sharing needs one (Discrete spaces of different sizes are padded to the "
                               "largest with action masks; other kinds must match).")
        spec.action_space = probe.action_space(known[0])
        check_action_space(spec.action_space, probe.name, known[0])
        if src == "state":
            env_dim = _state_dim(spec, probe)
    else:
        spec.action_space = command_space(layer)
        if src == "env":
            members = [m for lane in spec.lanes for m in (spec.members[lane] or known)]  # type: ignore[union-attr]
            sizes = [len(spec.members[lane] or known) for lane in spec.lanes]  # type: ignore[union-attr]
            if len(set(sizes)) > 1:
                raise _layer_error(spec, "observation.source", f"squads of different sizes {sizes} give observations "
                                   "of different sizes; use equal squads, 'state' or a 'module:function' view.")
            # Agents sit in slots of the widest agent's size (see hdppo.envs.vector).
            env_dim = len(members) * probe.obs_dim // len(spec.lanes)  # type: ignore[arg-type]
        elif src == "state":
            env_dim = _state_dim(spec, probe)
    if src not in ("env", "state"):
        from ..envs.loading import load_object

        if ":" not in src:
            raise _layer_error(spec, "observation.source", f"{src!r} is not 'env', 'state' or 'module:function'.")
        spec.obs_fn = load_object(src, f"layer {spec.name!r}, observation.source: view", ConfigError)
        check_signature(spec.obs_fn, f"layers[{spec.index}] ({spec.name}).observation.source {src!r}",
                        "fn(env_obs, members, env)", None, None, None)
        lane = known[0] if spec.bottom else spec.lanes[0]  # type: ignore[index]
        members = [lane] if spec.bottom else (spec.members[lane] or known)
        with user_code(f"layers[{spec.index}] ({spec.name}).observation.source", src,
                       " It is called as view(raw_obs, members, env), here on the first reset to size the input."):
            env_dim = int(np.asarray(spec.obs_fn(probe.raw_obs(0), members, probe.copy_env(0))).size)
    if layer.observation.agent_id:
        spec.agent_ids = list(known) if spec.bottom else list(spec.lanes)  # type: ignore[arg-type]
    spec.obs_dim = int(env_dim) + spec.command_in + len(spec.agent_ids)
    if layer.policy.central_critic:
        own = spec.obs_dim if layer.policy.critic_input == "state_and_obs" else spec.command_in
        spec.critic_dim = _state_dim(spec, probe) + own
    spec.encoder = encoder_spec(spec, probe, known)
    if layer.teacher is not None:
        from ..envs.loading import load_object

        src = layer.teacher.policy
        if ":" not in src:
            raise _layer_error(spec, "teacher.policy", f"{src!r} is not 'package.module:function'.")
        spec.teacher_fn = load_object(src, f"layer {spec.name!r}, teacher.policy: teacher", ConfigError)
        field, kw = f"layers[{spec.index}] ({spec.name}).teacher.policy {src!r}", dict(layer.teacher.kwargs)
        if is_vectorized_teacher(spec.teacher_fn):
            check_signature(spec.teacher_fn, field, "fn(env=, copies=, members=, command=, **teacher.kwargs)",
                            env=None, copies=None, members=None, command=None, **kw)
        else:
            check_signature(spec.teacher_fn, field, "fn(raw_obs, members, env, **teacher.kwargs)", None, None, None, **kw)
    if layer.reward.intrinsic_fn:
        # Resolved here, in the driver's probe, so that a broken reward module fails before any actor starts.
        from ..envs.rewards import check_reward_fits
        from .intrinsic import resolve, reward_field

        field = reward_field(spec.index, spec.name)
        above = specs[spec.index - 1] if spec.index > 0 else None
        check_reward_fits(resolve(layer.reward.intrinsic_fn, field), field, spec.name, spec.bottom,
                          above.cfg.action.command_dim() if above is not None else 0,
                          above.cfg.action.type if above is not None else "discrete")


def encoder_spec(spec: LayerSpec, probe: VectorMultiAgentEnv, known: list[str]) -> dict[str, Any] | None:
    """The layer's ``ActorCritic(encoder=...)``: None for an MLP; for a CNN the image's
    ``(C, H, W)`` and layout, from ``policy.image_shape`` or the bottom layer's rank-3 Box."""
    p = spec.cfg.policy
    if p.encoder == "mlp":
        return None
    if p.encoder == "gru":
        return {"kind": "gru", "gru_hidden": int(p.gru_hidden), "seq_len": int(p.seq_len), "cnn": None}
    if p.encoder == "set":
        # The env's declared item width describes its own observation: the bottom layer's, read as is.
        raw = spec.bottom and spec.cfg.observation.source == "env"
        return set_encoder_spec(spec, int(p.set_features), probe.set_features if raw else None)
    shape = p.image_shape
    space = probe.observation_space(known[0])
    if isinstance(space, gym.spaces.Dict) and "action_mask" in space.spaces:
        space = policy_space(space)
    elif isinstance(space, gym.spaces.Dict) and list(space.spaces) == ["observation"]:
        space = space.spaces["observation"]
    offset = 0
    raw = spec.bottom and spec.cfg.observation.source == "env"
    if raw and isinstance(space, gym.spaces.Dict):
        # The policy's input is the Dict flattened in its key order: the image is the one rank-3
        # Box among the keys, wherever it sorts (an 'agent_pos' before an 'image' shifted it).
        keys = list(space.spaces)
        images = [k for k in keys if isinstance(space.spaces[k], gym.spaces.Box) and len(space.spaces[k].shape) == 3]
        if len(images) > 1:
            raise _layer_error(spec, "policy.encoder", f"encoder {p.encoder!r} reads one image, and this env's "
                               f"observation holds {len(images)} ({', '.join(images)}); stack them into one "
                               "rank-3 Box (channels side by side).")
        if images:
            offset = sum(int(gym.spaces.flatdim(space.spaces[k])) for k in keys[: keys.index(images[0])])
            space = space.spaces[images[0]]
    env_image = raw and isinstance(space, gym.spaces.Box) and len(space.shape) == 3
    if shape is not None and env_image and list(shape) != list(space.shape):
        # Any other shape would cut the env's image into rows that are not its rows.
        raise _layer_error(spec, "policy.image_shape", f"{list(shape)} is not the shape of this env's image "
                           f"observation {list(space.shape)}; leave policy.image_shape out (it is read from the "
                           f"env) or set it to {list(space.shape)}.")
    if shape is None:
        if not env_image:
            raise _layer_error(spec, "policy.image_shape", "encoder 'cnn' needs the image's shape: set "
                               "policy.image_shape ([H, W, C] or [C, H, W]); it is inferred only for the bottom "
                               "layer of an env whose observation is a rank-3 Box"
                               + (f" (this env's is {space})" if spec.bottom else "") + ".")
        shape = list(space.shape)
    from ..policies.networks import image_layout

    chw, last = image_layout(shape, p.image_layout)
    env_dim = spec.obs_dim - spec.command_in - len(spec.agent_ids)
    if offset + int(np.prod(chw)) > env_dim:
        raise _layer_error(spec, "policy.image_shape", f"the image {list(shape)} has {int(np.prod(chw))} values, "
                           f"more than the layer's env observation ({env_dim}).")
    cnn = {"kind": "cnn", "chw": chw, "channels_last": last, "channels": list(p.cnn_channels),
           "features": int(p.cnn_features), "offset": offset}
    if p.encoder == "cnn_gru":
        return {"kind": "gru", "gru_hidden": int(p.gru_hidden), "seq_len": int(p.seq_len), "cnn": cnn}
    return cnn


def set_encoder_spec(spec: LayerSpec, features: int, declared: int | None = None) -> dict[str, Any]:
    """encoder 'set': the items are the layer's Discrete(n) choices, ``features`` values each
    (``declared``: the width the env says its items have, if it says)."""
    space = spec.action_space
    if not isinstance(space, gym.spaces.Discrete):
        raise _layer_error(spec, "policy.encoder", f"encoder 'set' scores one item per action, so it needs a "
                           f"Discrete(n) action space; this layer's is {space}. Use encoder 'mlp'.")
    items = int(space.n)
    if items * features > spec.obs_dim:
        raise _layer_error(spec, "policy.set_features", f"{items} items (the Discrete({items}) action) of "
                           f"{features} values need {items * features} observation values, but the layer's "
                           f"observation has {spec.obs_dim}. Give the env's per-item width (job shop: "
                           f"observation: items, 14 per job; items_lookahead, 20).")
    if declared == 0:
        raise _layer_error(spec, "policy.encoder", "is 'set', but the env declares that its observation is not a "
                           "list of items (metadata['set_features'] is 0): a set policy would read misaligned rows. "
                           "Choose the env's item observation (job shop: env.kwargs.observation: items, or "
                           "items_lookahead) or encoder 'mlp'.")
    if declared is not None and declared != features:
        raise _layer_error(spec, "policy.set_features", f"is {features}, but the env's items have {declared} "
                           f"values each (its metadata['set_features']); with another width the policy would read "
                           f"the rows misaligned. Set policy.set_features: {declared}.")
    return {"kind": "set", "items": items, "features": int(features),
            "attention": int(spec.cfg.policy.set_attention), "heads": int(spec.cfg.policy.set_heads)}


def needs_state(cfg: Config) -> bool:
    """Whether any layer reads the env's global state (observation or central critic)."""
    return any(layer.observation.source == "state" or layer.policy.central_critic for layer in cfg.layers)


def make_env(cfg: Config, num_envs: int, seed: int | None = None) -> VectorMultiAgentEnv:
    from ..envs.vector import make_vector_env

    e = cfg.env
    venv = make_vector_env(e.type, e.id, e.entry_point, e.kwargs, e.max_episode_steps, num_envs, seed,
                           opponents=e.opponents.model_dump() if e.opponents is not None else None)
    venv.want_state = needs_state(cfg)
    return venv


def reset_env(venv: VectorMultiAgentEnv, seed: int | None) -> VecObs:
    from ..envs.errors import HdppoError

    try:
        return venv.reset(seed=seed)
    except HdppoError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure of the user's reset is reported the same way
        raise EnvError(f"env {venv.name!r}: reset() failed: {type(exc).__name__}: {exc}") from None


def probe_env(cfg: Config, seed: int, num_envs: int = 1) -> tuple[VectorMultiAgentEnv, VecObs, list[LayerSpec]]:
    """Make and reset the env (``num_envs`` copies) and work out every layer's sizes; the caller closes it."""
    venv = make_env(cfg, num_envs, seed)
    first = reset_env(venv, seed)
    return venv, first, build_spec(cfg, venv, first)
