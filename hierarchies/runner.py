"""Steps every layer of a hierarchy over ``num_envs`` copies of one env.

Each env step, top layer first: every lane that is due (the bottom layer's lanes every step, a
layer above every ``every`` env steps of its episode) builds its observation (its env view plus
its parent lane's command), and one batched forward pass per layer picks actions. The bottom
layer's actions go to the env; the others become the commands of the lanes below. Rewards flow
back into each recorded layer's open transitions, and the end of an agent or of an episode
closes them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from hdppo.envs.adapters import MultiAgentAdapter
from hdppo.hierarchies.intrinsic import IntrinsicFn, resolve
from hdppo.hierarchies.recorder import LayerRecorder
from hdppo.hierarchies.spec import LayerSpec, command_vector, env_part_dim, parent_lane, split_obs
from hdppo.platform.errors import EnvError
from hdppo.policies.networks import ActorCritic
from hdppo.policies.normalizers import ObservationNormalizer


@dataclass
class _Copy:
    env: MultiAgentAdapter
    obs: dict[str, Any]
    t: int = 0
    ep_return: float = 0.0
    commands: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)  # layer -> lane -> command vector
    actions: dict[str, np.ndarray] = field(default_factory=dict)              # bottom agent -> last action
    truncated: dict[str, bool] = field(default_factory=dict)                  # ended agents: cut short?


class HierarchyRunner:
    def __init__(self, specs: list[LayerSpec], make_env: Callable[[], MultiAgentAdapter], num_envs: int, seed: int,
                 policies: dict[str, ActorCritic], obs_norms: dict[str, ObservationNormalizer],
                 recorders: dict[str, LayerRecorder] | None = None, deterministic: bool = False,
                 bonus: Callable[[str, np.ndarray], np.ndarray] | None = None):
        self.specs = specs
        self.policies = policies
        self.obs_norms = obs_norms
        self.recorders = recorders or {}
        self.deterministic = deterministic
        self.bonus = bonus
        self.intrinsic: dict[str, IntrinsicFn | None] = {
            s.name: resolve(s.cfg.reward.intrinsic_fn) if s.cfg.reward.intrinsic_fn else None for s in specs}
        self._seed = seed
        self.copies: list[_Copy] = []
        for i in range(num_envs):
            env = make_env()
            self.copies.append(_Copy(env, env.reset(seed=seed + i)))
        self.command_counts: dict[str, np.ndarray] = {
            s.name: np.zeros(s.action_space.n if hasattr(s.action_space, "n") else 0, np.int64)  # type: ignore[union-attr]
            for s in specs if not s.bottom}
        self.env_steps = 0

    # -- observations --------------------------------------------------------------------------
    def _parent_command(self, spec: LayerSpec, c: _Copy, members: list[str] | None) -> np.ndarray:
        if spec.command_in == 0:
            return np.zeros(0, np.float32)
        upper = self.specs[spec.index - 1]
        cmd = c.commands.get(upper.name, {}).get(parent_lane(upper, members))
        return cmd if cmd is not None else np.zeros(spec.command_in, np.float32)

    def _members(self, spec: LayerSpec, c: _Copy, lane: str) -> list[str]:
        if spec.bottom:
            return [lane]
        fixed = spec.members[lane]
        return fixed if fixed is not None else (c.env.possible_agents or list(c.obs))

    def observe(self, spec: LayerSpec, c: _Copy, lane: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(policy input, action mask or [], critic input or []) of one lane."""
        src = spec.cfg.observation.source
        members = self._members(spec, c, lane)
        mask = np.zeros(0, np.float32)
        if src == "state":
            env_part = c.env.state()
        elif src == "env":
            views = []
            for m in members:
                if m in c.obs:
                    flat, m_mask = split_obs(c.env.observation_space(m), c.obs[m])
                    if spec.bottom and m_mask is not None:
                        mask = m_mask
                else:  # a member that is gone: zeros of its size
                    flat = np.zeros(env_part_dim(c.env.observation_space(m))[0], np.float32)
                views.append(flat)
            env_part = np.concatenate(views) if len(views) > 1 else views[0]
        else:
            env_part = np.asarray(spec.obs_fn(c.obs, members, c.env), np.float32).reshape(-1)  # type: ignore[misc]
        cmd = self._parent_command(spec, c, None if not spec.bottom and spec.members[lane] is None else members)
        parts = [env_part.astype(np.float32, copy=False), cmd]
        if spec.agent_ids:
            one_hot = np.zeros(len(spec.agent_ids), np.float32)
            one_hot[spec.agent_ids.index(lane)] = 1.0
            parts.append(one_hot)
        obs = np.concatenate(parts)
        if obs.shape[0] != spec.obs_dim:
            raise EnvError(f"layer {spec.name!r}: lane {lane!r} observation has {obs.shape[0]} values, expected "
                           f"{spec.obs_dim} (the size seen when the env was first reset). The env's observation "
                           "size must not change during training.")
        if spec.bottom and spec.mask_dim and mask.shape[0] == 0:
            mask = np.ones(spec.mask_dim, np.float32)
        critic = np.concatenate([c.env.state(), cmd]) if spec.critic_dim is not None else np.zeros(0, np.float32)
        return obs, mask, critic

    def _due_lanes(self, spec: LayerSpec, c: _Copy) -> list[str]:
        if spec.bottom:
            return [a for a in c.env.acting if not spec.members or a in spec.members]
        if c.t % spec.every:
            return []
        live = set(c.env.agents)
        return [lane for lane in spec.lanes if spec.members[lane] is None or live & set(spec.members[lane])]  # type: ignore[union-attr, arg-type]

    # -- one env step --------------------------------------------------------------------------
    def step(self) -> list[tuple[float, int, int]]:
        """Advance every copy by one env step; returns (return, length, copy) of episodes that ended."""
        env_actions: list[dict[str, Any]] = [{} for _ in self.copies]
        for spec in self.specs:
            rows = [(ci, lane, *self.observe(spec, c, lane)) for ci, c in enumerate(self.copies)
                    for lane in self._due_lanes(spec, c)]
            if not rows:
                continue
            raw = np.stack([r[2] for r in rows])
            norm = self.obs_norms[spec.name]
            rec = self.recorders.get(spec.name)
            if rec is not None:
                norm.observe(raw)
            obs = norm(raw)
            masks = np.stack([r[3] for r in rows]) if spec.mask_dim else None
            critic = np.stack([r[4] for r in rows]) if spec.critic_dim is not None else None
            policy = self.policies[spec.name]
            actions, logp, values = policy.act(
                torch.from_numpy(obs), self.deterministic,
                torch.from_numpy(masks) if masks is not None else None,
                torch.from_numpy(critic) if critic is not None else None)
            bonus = self.bonus(spec.name, obs) if (self.bonus is not None and rec is not None) else None
            env_vals = policy.head.to_env(actions) if spec.bottom else None
            for k, (ci, lane, _, mask, crit) in enumerate(rows):
                c = self.copies[ci]
                if spec.bottom:
                    env_actions[ci][lane] = env_vals[k]  # type: ignore[index]
                    c.actions[lane] = actions[k]
                else:
                    c.commands.setdefault(spec.name, {})[lane] = command_vector(spec.cfg, actions[k])
                    if spec.cfg.action.type == "discrete":
                        self.command_counts[spec.name][int(actions[k][0])] += 1
                if rec is not None:
                    rec.open((ci, lane), obs[k], crit, mask, actions[k], logp[k], values[k],
                             float(bonus[k]) if bonus is not None else 0.0)
        finished = []
        for ci, c in enumerate(self.copies):
            result = self._step_copy(ci, c, env_actions[ci])
            if result is not None:
                finished.append(result)
        self.env_steps += len(self.copies)
        return finished

    def _step_copy(self, ci: int, c: _Copy, actions: dict[str, Any]) -> tuple[float, int, int] | None:
        before = c.obs
        obs, rew, term, trunc, info = c.env.step(actions)
        for r in rew.values():
            if not np.isfinite(r):
                raise EnvError(f"env {c.env.name!r} returned a non-finite reward ({r}); fix the env's reward.")
        c.obs = {**before, **obs}
        c.ep_return += float(sum(rew.values()))
        for spec in self.specs:
            rec = self.recorders.get(spec.name)
            if rec is None:
                continue
            w_env, w_int = spec.cfg.reward.env, spec.cfg.reward.intrinsic
            fn = self.intrinsic[spec.name]
            if spec.bottom:
                # Every open transition of this copy ages by one step, rewarded or not (a waiting
                # agent in a turn-based env gets no reward entry but its discount still runs).
                for a in [lane for (cj, lane) in rec.pending if cj == ci and lane not in rew]:
                    rec.reward((ci, a), 0.0, 0.0, w_env, w_int)
                for a, r in rew.items():
                    r_int = 0.0
                    if fn is not None:
                        r_int = float(fn(command=self._parent_command(spec, c, [a]), obs=before.get(a),
                                         next_obs=obs.get(a), action=c.actions.get(a), info=info.get(a, {})))
                    rec.reward((ci, a), r, r_int, w_env, w_int)
            else:
                for lane in spec.lanes:  # type: ignore[union-attr]
                    members = self._members(spec, c, lane)
                    rec.reward((ci, lane), float(sum(rew.get(m, 0.0) for m in members)), 0.0, w_env, w_int)
        bottom = self.specs[-1]
        done_agents = [a for a in set(term) | set(trunc) if term.get(a) or trunc.get(a)]
        rec = self.recorders.get(bottom.name)
        if rec is not None:
            for a in done_agents:
                final = None if term.get(a) else self._final(bottom, c, a)
                rec.end((ci, a), terminated=bool(term.get(a)), final=final)
        for a in done_agents:
            c.obs.pop(a, None)
        for a in done_agents:
            c.truncated[a] = bool(trunc.get(a)) and not term.get(a)
        if c.env.agents:
            c.t += 1
            live = set(c.env.agents)
            for spec in self.specs[:-1]:  # a squad whose members are all gone ends
                rec = self.recorders.get(spec.name)
                for lane in spec.lanes:  # type: ignore[union-attr]
                    members = spec.members[lane]
                    if rec is not None and members is not None and (ci, lane) in rec.pending and not live & set(members):
                        truncated = self._lane_truncated(c, members)
                        rec.end((ci, lane), terminated=not truncated,
                                final=self._final(spec, c, lane) if truncated else None)
            return None
        # The episode is over: close every layer's open transition, then reset. A lane counts as
        # truncated when none of its agents terminated and at least one was cut short.
        c.obs = {**before, **obs}
        for spec in self.specs:
            rec = self.recorders.get(spec.name)
            if rec is None:
                continue
            for (cj, lane) in [k for k in rec.pending if k[0] == ci]:
                truncated = self._lane_truncated(c, self._members(spec, c, lane))
                rec.end((cj, lane), terminated=not truncated, final=self._final(spec, c, lane) if truncated else None)
        result = (c.ep_return, c.t + 1, ci)
        self._seed += len(self.copies)
        c.obs, c.t, c.ep_return, c.commands, c.actions, c.truncated = c.env.reset(), 0, 0.0, {}, {}, {}
        return result

    @staticmethod
    def _lane_truncated(c: _Copy, members: list[str]) -> bool:
        ends = [c.truncated[m] for m in members if m in c.truncated]
        return bool(ends) and all(ends)

    def _final(self, spec: LayerSpec, c: _Copy, lane: str) -> tuple[np.ndarray, np.ndarray]:
        obs, _, critic = self.observe(spec, c, lane)
        return self.obs_norms[spec.name](obs[None])[0], critic

    def close(self) -> None:
        for c in self.copies:
            c.env.close()
