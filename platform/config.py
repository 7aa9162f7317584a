"""Typed configuration, validated in one place.

A YAML file is loaded, ``--set`` overrides are applied, and the result is validated into
:class:`Config`. Unknown keys are rejected; every error names the file, the YAML path
(``layers[0].ppo.clip``) and what would fix it.
"""
from __future__ import annotations

import difflib
import json
import math
import re
from pathlib import Path
from typing import Any, Literal, Optional, Union, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from .errors import ConfigError
from .presets import resolve_config_path
from .sync_modes import sync_mode_class


def _numbers_only(annotation: Any) -> bool:
    """A field that takes numbers and no boolean (pydantic's lax mode reads true as 1)."""
    args = set(get_args(annotation)) or {annotation}
    return bool(args & {int, float}) and bool not in args


class _Strict(BaseModel):
    # allow_inf_nan=False: an infinite lr, bound or timeout passed every range check (lr: .inf
    # trained NaN weights and exited 0).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, data: Any) -> Any:
        # `num_workers: true` trained with 1 worker, `max_lag: false` with 0.
        if isinstance(data, dict):
            for name, f in cls.model_fields.items():
                if isinstance(data.get(name), bool) and _numbers_only(f.annotation):
                    raise ValueError(f"{name}: {str(data[name]).lower()} is a boolean, and {name} takes a number")
        return data


class OpponentsSpec(_Strict):
    """Agents of the env played inside it by a fixed policy; the layers see only the others
    (see hdppo.envs.opponents)."""

    agents: Union[str, list[str]] = Field(
        ..., description="The agents the policy plays: a name prefix ('blue': every agent whose name starts with it) "
        "or a list of agent names. At least one agent must be left to learn.")
    policy: str = Field(
        "random", description="'random' (uniform over each opponent's action space, legal actions only where its "
        "observation has an action_mask) or 'package.module:function', called each env step as "
        "fn(observations, env, rng) -> {agent: action} for the opponents acting then.",
        json_schema_extra={"examples": ["random", "hdppo.envs.builtin.magent:attack_nearest"]})
    alive: Optional[str] = Field(
        None, description="'package.module:function', fn(env) -> the names of the agents still standing after a step, "
        "for the learners_alive/opponents_alive infos; default: the agents not terminated this episode (for games "
        "that terminate every agent when the game ends, as MAgent2 does, give the game's own count).")

    @field_validator("agents")
    @classmethod
    def _some(cls, v: Union[str, list[str]]) -> Union[str, list[str]]:
        if (isinstance(v, str) and not v) or (isinstance(v, list) and (not v or any(not a for a in v))):
            raise ValueError("agents must be a non-empty name prefix (e.g. 'blue') or a list of agent names")
        return v

    @field_validator("policy")
    @classmethod
    def _importable(cls, v: str) -> str:
        from ..envs.opponents import resolve_policy

        try:
            resolve_policy(v)  # a wrong 'module:function' fails now, not on a worker
        except ConfigError as exc:
            raise ValueError(str(exc).removeprefix(f"env.opponents.policy {v!r}: ")) from None
        return v

    @field_validator("alive")
    @classmethod
    def _alive_importable(cls, v: Optional[str]) -> Optional[str]:
        from ..envs.opponents import resolve_alive

        if v is not None:
            try:
                resolve_alive(v)
            except ConfigError as exc:
                raise ValueError(str(exc).removeprefix(f"env.opponents.alive {v!r}: ")) from None
        return v


class EnvConfig(_Strict):
    """Which environment to train on."""

    type: Literal["gymnasium", "pettingzoo", "rllib", "gymnasium_vector", "vector"] = Field(
        "gymnasium", description="Env API: a Gymnasium env, a PettingZoo ParallelEnv or AECEnv, an RLlib MultiAgentEnv; "
        "or natively vectorised: 'gymnasium_vector' (a gymnasium.vector.VectorEnv made by gym.make_vec(id) or by "
        "entry_point(num_envs=, **kwargs), reset in the same step) or 'vector' (entry_point(num_envs=, seed=, **kwargs) "
        "returning an hdppo.envs.vector.VectorMultiAgentEnv; see that module).")
    id: Optional[str] = Field(
        None, description="A registered Gymnasium id ('Hopper-v5'), or for PettingZoo a module path "
        "('pettingzoo.classic.tictactoe_v3', whose parallel_env() or env() is called).")
    entry_point: Optional[str] = Field(
        None, description="'package.module:factory', a callable returning the env; used instead of id.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the env or factory.")
    max_episode_steps: Optional[int] = Field(None, ge=1, description="Truncate episodes at this length.")
    opponents: Optional[OpponentsSpec] = Field(
        None, description="Some agents played inside the env by 'random' or a 'module:function' script, "
        "e.g. {agents: blue, policy: random}; only dict-keyed envs (type pettingzoo or rllib).")
    episode_metrics: Optional[list[str]] = Field(
        None, description="Info keys logged per episode as 'episode/<key>' (mean over the agents whose last-step "
        "info has it), e.g. [crashed] for highway-env. Default: the env's metadata['episode_metrics'] "
        "(skirmish: win, draw, kills, losses); [] logs none.")

    @property
    def name(self) -> str:
        """How errors and logs name this env."""
        return self.id or self.entry_point or "env"

    @model_validator(mode="after")
    def _one_source(self) -> "EnvConfig":
        if (self.id is None) == (self.entry_point is None):
            raise ValueError("give exactly one of 'id' (a registered env id) or 'entry_point' ('module:factory')")
        if self.entry_point is not None and ":" not in self.entry_point:
            raise ValueError(f"entry_point {self.entry_point!r} must look like 'package.module:factory'")
        if self.opponents is not None and self.type not in ("pettingzoo", "rllib"):
            raise ValueError(f"opponents needs a dict-keyed multi-agent env (type pettingzoo or rllib), not type "
                             f"{self.type!r}; a natively vectorised env plays its opponents itself, through its kwargs")
        return self


class PolicyConfig(_Strict):
    """The layer's actor-critic network."""

    hidden: list[int] = Field(default_factory=lambda: [64, 64], description="Hidden layer sizes of actor and critic.")
    activation: Literal["tanh", "relu", "elu"] = Field("tanh", description="Hidden activation.")
    init_log_std: float = Field(0.0, description="Initial log-std of a Gaussian (Box) policy.")
    log_std_range: Optional[list[float]] = Field(
        None, description="[min, max] of a Gaussian (Box) policy's log-std, enforced after every optimizer step "
        "(a projection). The env receives actions clipped to its bounds, so a wider Gaussian costs the policy "
        "nothing there and PPO can let the std grow until the actions are bang-bang at the bounds; a maximum "
        "stops that. None: unbounded.")
    central_critic: bool = Field(False, description="MAPPO-style: the critic reads the env's global state().")
    critic_input: Literal["state_and_obs", "state"] = Field(
        "state_and_obs", description="With central_critic, what the critic reads. 'state_and_obs': state() "
        "followed by the lane's own policy input (observation, command, id): MAPPO's agent-specific global "
        "state (Yu et al. 2022), which lets one shared critic tell its agents apart when each has its own "
        "reward. 'state': state() and the command only, the same for every agent of a copy.")
    encoder: Literal["mlp", "cnn", "gru", "cnn_gru", "set"] = Field(
        "mlp", description="'mlp': the flat input goes straight to the hidden layers. 'cnn': the first "
        "prod(image_shape) input values are an image, read by a small conv stack (3x3 convs, stride 1, for "
        "images up to 32 pixels a side; Nature-DQN 8/4/3 strides above), flattened to cnn_features and "
        "joined with the rest of the input (command one-hot, agent id) before the hidden layers. Actor and "
        "critic each get their own conv stack (a central critic reads state() through an MLP). 'gru': a GRU "
        "cell (gru_hidden) ahead of the hidden layers, its state carried across the layer's decisions, reset "
        "where an episode (or the lane's agent) ends, stored with each step and replayed by the learner in "
        "chunks of seq_len decisions (in mode dppo each worker replays whole chunks of its own batch). "
        "'cnn_gru': the conv stack, then the GRU. A recurrent layer cannot be exported yet. 'set': the "
        "observation starts with n items of set_features values each, n being the layer's Discrete(n) action; "
        "one shared MLP (width hidden[0]) embeds each item, the actor scores each item from its embedding and "
        "the mean and max over items (plus the values after the items), the critic reads that pooled context; "
        "the weights do not depend on n (a dispatcher that picks one of n jobs; job shop's observation: items).")
    set_features: Optional[int] = Field(
        None, ge=1, description="encoder 'set': values per item at the start of the observation (required).")
    set_attention: int = Field(
        0, ge=0, description="encoder 'set': self-attention blocks over the item embeddings before the pooling "
        "(pre-norm Transformer blocks, Vaswani et al. 2017; each item then sees the others, e.g. the jobs that "
        "queue for the same machine). 0: Deep Sets (each item embedded alone, the mean and max its only "
        "context). Like the rest of the set encoder, no weight depends on the number of items.")
    set_heads: int = Field(4, ge=1, description="encoder 'set' with set_attention: attention heads per block; "
                           "hidden[0] must be a multiple of it.")
    gru_hidden: int = Field(64, ge=1, description="encoder 'gru'/'cnn_gru': width of the GRU state (actor and "
                            "critic each have one).")
    seq_len: int = Field(16, ge=1, description="encoder 'gru'/'cnn_gru': decisions per chunk the learner "
                         "replays through the GRU from the stored state at the chunk's start (backpropagation "
                         "through time over at most this many steps).")
    image_shape: Optional[list[int]] = Field(
        None, description="encoder 'cnn': the image's shape as the env gives it, [H, W, C] or [C, H, W]; "
        "null infers it from the bottom layer's rank-3 Box observation space.")
    image_layout: Literal["auto", "hwc", "chw"] = Field(
        "auto", description="encoder 'cnn': channel position. 'auto': a square image by its square sides "
        "(10x10x4 and 8x8x12 HWC, 3x84x84 CHW); otherwise channels last (HWC) when the last dimension is no "
        "larger than the first (210x160x3), else channels first (3x210x160). Set it where neither fits.")
    cnn_channels: list[int] = Field(default_factory=lambda: [16, 32, 32],
                                    description="encoder 'cnn': output channels of each conv layer.")
    cnn_features: int = Field(128, ge=1, description="encoder 'cnn': width of the linear layer after the convs.")

    @field_validator("image_shape")
    @classmethod
    def _image_shape(cls, v: Optional[list[int]]) -> Optional[list[int]]:
        if v is not None and (len(v) != 3 or any(d < 1 for d in v)):
            raise ValueError("image_shape must be three positive sizes, [H, W, C] or [C, H, W], e.g. [10, 10, 4]")
        return v

    @field_validator("log_std_range")
    @classmethod
    def _log_std_range(cls, v: Optional[list[float]]) -> Optional[list[float]]:
        if v is not None and (len(v) != 2 or not v[0] < v[1]):
            raise ValueError(f"log_std_range must be two numbers [min, max] with min < max, e.g. [-3.0, -0.5]; got {v}")
        return v

    @field_validator("cnn_channels")
    @classmethod
    def _channels(cls, v: list[int]) -> list[int]:
        if not v or any(c < 1 for c in v):
            raise ValueError("cnn_channels must list at least one positive channel count, e.g. [16, 32, 32]")
        return v

    @field_validator("hidden")
    @classmethod
    def _positive(cls, v: list[int]) -> list[int]:
        if any(h < 1 for h in v):
            raise ValueError("hidden must list positive layer sizes, e.g. [64, 64]")
        return v

    @model_validator(mode="after")
    def _some_hidden(self) -> "PolicyConfig":
        # With a CNN the conv stack's linear layer (cnn_features) is already a hidden layer, so
        # `hidden: []` gives the MinAtar paper's network: conv, one dense layer, the heads.
        if self.encoder == "set" and self.set_features is None:
            raise ValueError("encoder 'set' needs set_features: how many values describe each item at the start "
                             "of the observation (e.g. 14 for job shop with observation: items)")
        if self.encoder == "set" and self.set_attention and self.hidden and self.hidden[0] % self.set_heads:
            raise ValueError(f"encoder 'set' with set_attention: the item width hidden[0] = {self.hidden[0]} must be "
                             f"a multiple of set_heads = {self.set_heads}; change one of them (e.g. hidden: [64, 64], "
                             "set_heads: 4)")
        if self.encoder != "set" and self.set_attention:
            raise ValueError(f"set_attention applies to encoder 'set' only; this policy's encoder is "
                             f"{self.encoder!r}. Remove set_attention or use encoder: set.")
        if not self.hidden and self.encoder != "cnn":
            raise ValueError(f"hidden must list at least one positive layer size, e.g. [64, 64] (only encoder "
                             f"'cnn' may have none, its cnn_features layer being one; this one is {self.encoder!r})")
        return self


class PPOConfig(_Strict):
    """PPO hyperparameters (defaults from the seed articles)."""

    gamma: float = Field(0.99, ge=0.0, le=1.0, description="Discount factor.")
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0, description="GAE lambda.")
    clip: float = Field(0.2, gt=0.0, lt=1.0, description="Policy ratio clip.")
    value_clip: Optional[float] = Field(0.2, gt=0.0, description="Value clip around the rollout values; null turns it off.")
    vf_coeff: float = Field(0.5, ge=0.0, description="Value loss coefficient.")
    entropy_coeff: float = Field(0.01, ge=0.0, description="Entropy coefficient at the start.")
    entropy_coeff_final: float = Field(0.001, ge=0.0, description="Entropy coefficient at the end (linear decay).")
    lr: float = Field(3e-4, gt=0.0, description="Adam learning rate at the start.")
    lr_schedule: Literal["constant", "linear"] = Field("constant", description="'linear' anneals the lr to 0.")
    max_grad_norm: Optional[float] = Field(0.5, gt=0.0, description="Global gradient-norm clip; null turns it off.")
    num_epochs: int = Field(5, ge=1, description="SGD passes over each train batch.")
    minibatch_size: int = Field(512, ge=1, description="Samples per SGD step.")
    target_kl: Optional[float] = Field(None, gt=0.0, description="Stop the epochs early when approx KL exceeds this.")
    normalize_advantages: bool = Field(True, description="Standardise advantages over the train batch.")
    decoupled: bool = Field(
        False, description="Decoupled PPO (Hilton et al. 2022): samples collected by older weights (pipeline, soft, "
        "async) are clipped around the learner's policy at the update's start, not the policy that acted, and "
        "each one's surrogate is weighted by the ratio of the two. Fresh samples are unaffected.")
    bounds_loss_coeff: float = Field(
        0.0, ge=0.0, description="Box actions: coeff times the squared distance by which the Gaussian's mean "
        "lies outside the action bounds (in units of the half-range), as rl_games' bounds loss. The env gets "
        "clipped actions, so a mean beyond a bound gives the same action whatever its value or the noise: "
        "exploration and the gradient die there. 0 turns it off; 0.01-0.1 keeps the mean inside.")


class ElasticConfig(_Strict):
    """Grow the pool while the machine has idle CPUs, shrink it while it is oversubscribed."""

    min_workers: int = Field(1, ge=1, description="Never fewer workers.")
    max_workers: int = Field(8, ge=1, description="Never more workers (nor more than Ray has CPUs free for).")
    low_util: float = Field(0.6, ge=0.0, le=1.0, description="Add a worker when CPU utilization is below this (fraction).")
    high_util: float = Field(0.95, ge=0.0, le=1.0, description="Remove a worker when CPU utilization is above this.")
    every: int = Field(5, ge=1, description="Updates between decisions (utilization is averaged over them).")

    @model_validator(mode="after")
    def _order(self) -> "ElasticConfig":
        if self.min_workers > self.max_workers:
            raise ValueError(f"min_workers ({self.min_workers}) must be <= max_workers ({self.max_workers})")
        if self.low_util >= self.high_util:
            raise ValueError(f"low_util ({self.low_util}) must be < high_util ({self.high_util})")
        return self


class DPPOConfig(_Strict):
    """The layer's DPPO group: its worker pool and how updates are computed."""

    mode: Literal["central", "dppo"] = Field(
        "central", description="'central': workers ship batches, the learner runs the epochs. "
        "'dppo': workers compute gradients on their own shard, the learner averages them (Heess et al. 2017).")
    num_workers: int = Field(8, ge=1, description="Rollout workers; capped at the CPUs Ray reports.")
    num_envs_per_worker: int = Field(4, ge=1, description="Env copies each worker steps together.")
    train_batch_size: int = Field(4000, ge=1, description="Env steps per update, over all workers.")
    worker_cpus: Optional[float] = Field(None, gt=0.0, description="CPUs each worker declares to Ray; default shares the machine.")
    pipeline: bool = Field(
        False, description="The older spelling of sync: pipeline (true means that; it contradicts any other "
        "sync but 'sync'). Group-level.")
    max_lag: int = Field(3, ge=0, description="Rollouts from weights more than max_lag versions old are dropped.")
    compression: Literal["none", "sign1", "q2", "q8"] = Field(
        "none", description="Mode dppo: gradients sent as 1-bit signs, 2-bit or 8-bit codes, with error feedback.")
    sync: str = Field(
        "sync", description="How the group collects an update's rollouts (a registered sync mode, see "
        "hdppo.platform.sync_modes). Group-level. 'sync': a barrier each update, every worker one equal rollout. "
        "'pipeline': the same, but each worker starts its next rollout as soon as its current one arrives, so the "
        "next batch is collected while the learner updates (one version behind; mode central). 'soft': no "
        "barrier; workers stream rollout chunks and refresh weights every refresh_every steps, the learner "
        "updates as soon as train_batch_size samples have arrived from any workers (faster workers contribute "
        "more: dynamic batching). 'async': the learner updates on whatever chunks have arrived, as they arrive. "
        "Pipeline, soft and async keep workers collecting while the learner updates; samples more than max_lag "
        "versions old are never used.",
        json_schema_extra={"examples": ["sync", "pipeline", "soft", "async"]})
    refresh_every: int = Field(64, ge=1, description="Sync 'soft': env steps (per env) between weight refreshes inside a rollout.")
    chunks_per_worker: int = Field(
        4, ge=1, description="Sync 'soft'/'async': a worker's share of a batch is cut into this many chunks, "
        "so a batch can be filled by whichever workers are fastest.")
    chunks_in_flight: Optional[int] = Field(
        None, ge=1, description="Sync 'soft'/'async': chunks each worker has queued at once (on Ray), so that it "
        "goes on collecting while the driver waits on an update; default chunks_per_worker (a whole rollout, as "
        "pipeline queues). With 1 a worker idles from its chunk's end to the update's end (MinAtar, one worker of "
        "8 copies: 5.4k env steps/s against 7.6k with 4). Fewer keeps samples fresher. Group-level.")
    stale: Literal["drop", "downweight"] = Field(
        "drop", description="Samples older than max_lag versions are always dropped; 'downweight' also scales "
        "the loss of each sample within the bound by stale_decay ** lag.")
    stale_decay: float = Field(0.5, gt=0.0, le=1.0, description="stale 'downweight': loss weight factor per version of lag.")
    aggregate: Literal["samples", "quality"] = Field(
        "samples", description="Mode dppo: average workers' gradients weighted by sample count, or by count times "
        "trajectory quality, w_i ∝ n_i·exp(quality_beta·z_i), z_i the standardised mean return target of worker i.")
    quality_beta: float = Field(1.0, ge=0.0, description="aggregate 'quality': temperature; 0 is plain sample weighting.")
    elastic: Optional[ElasticConfig] = Field(
        None, description="Resize the worker pool while training from CPU utilization (and `hdppo scale` at any time).")

    @field_validator("sync")
    @classmethod
    def _registered(cls, v: str) -> str:
        sync_mode_class(v)  # a ValueError listing the registered modes
        return v

    @model_validator(mode="after")
    def _pipeline_alias(self) -> "DPPOConfig":
        if self.pipeline and self.sync not in ("sync", "pipeline"):
            raise ValueError(f"pipeline: true is the older spelling of sync: pipeline and contradicts sync: {self.sync}; "
                             "drop pipeline (or set it to false) to keep that sync mode, or set sync: pipeline")
        if self.pipeline:
            object.__setattr__(self, "sync", "pipeline")  # not setattr: that would validate again, recursively
        # Settings of the other mode would be ignored in silence (a run with compression: q8 in mode
        # central logged no compressed bytes and said nothing).
        other = ({"compression": "none", "aggregate": "samples"} if self.mode == "central" else {"stale": "drop"})
        ignored = [f"{k}: {getattr(self, k)}" for k, default in other.items() if getattr(self, k) != default]
        if ignored:
            need = "dppo" if self.mode == "central" else "central"
            raise ValueError(f"{', '.join(ignored)} applies in mode {need} only, and this group's mode is {self.mode!r}: "
                             f"set mode: {need}, or remove {'it' if len(ignored) == 1 else 'them'}")
        return self

    @property
    def streaming(self) -> bool:
        """Workers stream chunks without a barrier (sync soft or async)."""
        return sync_mode_class(self.sync).streaming

    @property
    def refresh_in_rollout(self) -> int:
        """Env steps between weight refreshes inside a rollout; 0 when the sync mode has none."""
        return self.refresh_every if sync_mode_class(self.sync).refresh_in_rollout else 0


def _check_dppo_settings(d: "DPPOConfig", where: str) -> None:
    """Checks across one layer's dppo fields, once its group's settings are in it (a group's
    section is validated field by field, with the defaults of the rest, so they cannot run there)."""
    # A sync mode's own settings set under another mode would be ignored in silence (only values
    # other than the default: a run's saved config.yaml states every field).
    mode = sync_mode_class(d.sync)
    owned = {"chunks_per_worker": mode.streaming, "chunks_in_flight": mode.streaming,
             "refresh_every": mode.refresh_in_rollout}
    unused = sorted(k for k, applies in owned.items()
                    if not applies and getattr(d, k) != type(d).model_fields[k].default)
    if unused:
        under = "sync: soft" if unused == ["refresh_every"] else "sync: soft or async"
        raise ValueError(f"{where}.{unused[0]} applies only under {under}, and this group's sync is {d.sync!r}: "
                         f"change sync, or remove {', '.join(unused)}")
    e = d.elastic
    if e is not None and not e.min_workers <= d.num_workers <= e.max_workers:
        # It started outside its bounds, and the first decision moved it in, blamed on CPU use.
        raise ValueError(f"{where}.num_workers {d.num_workers} is outside elastic's bounds [{e.min_workers}, "
                         f"{e.max_workers}]: start inside them (num_workers is the pool's starting size)")
    if mode.streaming:
        # A chunk is whole env steps of the worker's copies: a quota below one step would make every
        # chunk num_envs_per_worker samples, and an update several times train_batch_size.
        quota = math.ceil(d.train_batch_size / (d.num_workers * d.chunks_per_worker))
        if quota < d.num_envs_per_worker:
            fit = max(1, d.train_batch_size // (d.num_workers * d.num_envs_per_worker))
            raise ValueError(
                f"{where}.chunks_per_worker: {d.chunks_per_worker} cuts a worker's share of train_batch_size "
                f"{d.train_batch_size} into chunks of {quota} samples, less than one step of its "
                f"{d.num_envs_per_worker} env copies; each chunk would be {d.num_envs_per_worker} samples and an "
                f"update about {d.num_workers * d.chunks_per_worker * d.num_envs_per_worker}. Set "
                f"chunks_per_worker to at most {fit}, or raise train_batch_size")


# The dppo fields that hold for a whole group (its one pool of workers and the way the group
# collects and updates); the rest (train_batch_size, max_lag, stale, aggregate, compression, ...)
# are read per layer, by that layer's learner and recorder.
GROUP_DPPO_FIELDS = ("mode", "sync", "pipeline", "num_workers", "num_envs_per_worker", "worker_cpus",
                     "refresh_every", "chunks_per_worker", "chunks_in_flight", "elastic")


class LearnerConfig(_Strict):
    """Where the layer's learner runs (see hdppo.platform.devices). Rollout workers always act on CPU."""

    device: Literal["auto", "cpu", "cuda"] = Field(
        "cpu", description="'cpu'; 'cuda': the learner's weights, optimizer and minibatches on a GPU (an error if "
        "none is visible: Ray's cluster resources on Ray, torch.cuda in-process with ray.backend local); 'auto': "
        "CUDA when there is a GPU, else CPU. Workers and checkpoints always get CPU weights.")
    num_gpus: float = Field(1.0, gt=0.0, le=1.0, description="On Ray, the share of one GPU a CUDA learner "
                            "asks for (0.5: two learners share a GPU).")
    num_threads: int | Literal["auto"] = Field(
        1, description="torch threads of a CPU learner. 'auto': every core of the learner's machine (at most 8) "
        "when it is the run's only learner and its sync mode stops the workers during the update (sync 'sync': "
        "the cores are otherwise idle), else 1. Not the default: where anything else keeps a core busy (another "
        "run, a loaded host), a two-thread minibatch was measured 6-17x slower than one thread, each thread waiting "
        "for the other's core.")

    precision: Literal["fp32", "bf16"] = Field(
        "fp32", description="The arithmetic of the update's forward passes. 'bf16': mixed precision, as AMP on a GPU: "
        "the hidden layers (convs and dense) run in bfloat16 under torch.autocast, the weights, the optimizer, the "
        "output layers and the loss stay float32. On a CPU with AMX or AVX-512 BF16 the update is cheaper for convs "
        "and wide layers (a MinAtar CNN update 1.4x) and dearer for small MLPs (64x64: 0.8x); without bfloat16 units "
        "it is emulated and slower; not yet measured on a GPU. Also used by the workers' gradients in mode dppo. "
        "Not with a GRU encoder.")

    critic_thread: bool = Field(
        False, description="Compute each minibatch's critic forward and backward on a second thread while the "
        "actor's run on the first (policies with separate actor and critic networks, not recurrent, and not taking the "
        "written-out MLP gradient, see autograd; others ignore it). The same gradient; on two free cores a MinAtar CNN minibatch took 0.65x the time. Pays where a core "
        "is free during the update (sync 'sync': MinAtar 1.10-1.15x env steps/s); beside a pipelined worker that "
        "keeps the other core busy it gained nothing.")

    autograd: bool = Field(
        False, description="Take every minibatch's gradient with torch.autograd. By default a layer whose actor and "
        "critic are plain MLPs (Linear with tanh or relu, fp32, no teacher or bounds loss, not recurrent) gets its PPO "
        "gradient written out (hdppo/policies/mlp_gradients.py): the same numbers to float32 rounding in about a "
        "third of the operator calls (a 512-sample step of a 64x64 MLP: 0.8 against 1.4 ms). For checking the two "
        "against each other; autograd is used anyway where the written-out gradient does not apply.")

    @field_validator("num_threads")
    @classmethod
    def _threads_positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError(f"learner.num_threads must be 'auto' or at least 1, got {v}")
        return v


class NormalizationConfig(_Strict):
    observation: bool = Field(True, description="Running mean/std observation normalization.")
    reward: bool = Field(True, description="Scale rewards by the std of the discounted return.")
    reward_scope: Literal["worker", "global"] = Field(
        "worker", description="'worker': each worker keeps its own return statistics, never merged. "
        "'global': merged across the pool like observation statistics.")
    clip: float = Field(10.0, gt=0.0, description="Clip normalised observations and rewards to +-clip.")


class SquadsSpec(_Strict):
    squads: dict[str, list[str]] = Field(..., description="Squad name -> the env agents it commands.")


class ObservationSpec(_Strict):
    """What a layer's policy sees, before the command from above is appended."""

    source: str = Field("env", description="'env': its agents' env observations (concatenated for a squad); "
                        "'state': the env's global state() (a single-agent Gymnasium env without one: its flattened "
                        "observation); or 'module:function' called as fn(env_obs, members, env).")
    command: bool = Field(True, description="Append the command from the layer above (one-hot, or the Box goal).")
    agent_id: bool = Field(False, description="Append a one-hot of the agent's index (parameter sharing with ids).")


class ActionSpec(_Strict):
    """'env' for the bottom layer; a command space for the layers above."""

    type: Literal["env", "discrete", "multidiscrete", "box"] = Field("env", description="Action or command space.")
    n: Optional[int] = Field(None, ge=2, description="discrete: number of commands.")
    nvec: Optional[list[int]] = Field(None, description="multidiscrete: choices per component.")
    low: Optional[list[float]] = Field(None, description="box: lower bounds of the goal vector.")
    high: Optional[list[float]] = Field(None, description="box: upper bounds of the goal vector.")
    to_env: bool = Field(False, description="Also hand each decision to the env before the layers below act: a "
                         "decision that changes the task itself, such as assigning goals (swarm). Upper layers only. "
                         "The env defines apply_command: a natively vectorised one apply_command(layer, copies, lanes, "
                         "actions), a Gymnasium, PettingZoo or RLlib env apply_command(layer, lane, action) returning "
                         "the observations it changed (hdppo.envs.vector).")

    @model_validator(mode="after")
    def _complete(self) -> "ActionSpec":
        owner = {"n": "discrete", "nvec": "multidiscrete", "low": "box", "high": "box"}
        stray = [f for f, kind in owner.items() if getattr(self, f) is not None and kind != self.type]
        if stray:  # set for another type, it would be ignored in silence
            what = ("the env's own action space, which the env sets" if self.type == "env"
                    else f"a {self.type} command")
            raise ValueError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} for type "
                             f"{' / '.join(sorted({owner[f] for f in stray}))}, and this action is type {self.type!r} "
                             f"({what}): remove {'it' if len(stray) == 1 else 'them'}, or set the type it is for")
        if self.to_env and self.type == "env":
            raise ValueError("to_env is for an upper layer's command (type discrete, multidiscrete or box); the "
                             "bottom layer's actions (type env) go to the env already")
        if self.type == "discrete" and self.n is None:
            raise ValueError("a discrete command needs n (the number of commands), e.g. {type: discrete, n: 4}")
        # A component of 1 is a choice with one option (a squad's target when the enemy has one squad),
        # kept so that a command's layout stays the same across scenarios.
        if self.type == "multidiscrete" and (not self.nvec or any(k < 1 for k in self.nvec) or max(self.nvec) < 2):
            raise ValueError("a multidiscrete command needs nvec, each >= 1 and one of them >= 2, e.g. "
                             "{type: multidiscrete, nvec: [3, 2]}")
        if self.type == "box":
            if not self.low or not self.high or len(self.low) != len(self.high):
                raise ValueError("a box command needs low and high lists of the same length")
            if any(not (math.isfinite(lo) and math.isfinite(hi) and lo < hi) for lo, hi in zip(self.low, self.high)):
                raise ValueError("a box command needs finite bounds with low < high")
        return self

    def command_dim(self) -> int:
        """Width of the command as the layer below receives it."""
        if self.type == "discrete":
            return int(self.n)  # type: ignore[arg-type]
        if self.type == "multidiscrete":
            return int(sum(self.nvec))  # type: ignore[arg-type]
        if self.type == "box":
            return len(self.low)  # type: ignore[arg-type]
        return 0


class RewardSpec(_Strict):
    """reward = env * (env reward of its agents, summed over the period) + intrinsic * intrinsic_fn.

    Any layer may have an intrinsic reward for following the command of the layer above (see
    hdppo.envs.rewards for what the function receives on the bottom layer and on an upper one)."""

    env: float = Field(1.0, description="Weight of the env reward.")
    intrinsic: float = Field(0.0, description="Weight of the intrinsic reward.")
    intrinsic_fn: Optional[str] = Field(
        None, description="A command-following reward registered by an env module (corridor_follow, "
        "ant_velocity_tracking, ant_heading_frame_direction; see hdppo.envs.rewards) or 'package.module:function', "
        "called as fn(command=, obs=, next_obs=, action=, info=) each env step for each of the layer's lanes "
        "(agents or squads): command from the layer above; the lane's raw env observation before and after; "
        "its action (an upper layer's: its command to the layer below); its info (an upper layer's: a dict of "
        "its member agents' infos by agent name). Allowed on any layer.")
    discount: Literal["smdp", "decision"] = Field(
        "smdp", description="'smdp': sum of gamma^k r_k over the period and gamma^period between decisions "
        "(the exact return). 'decision': plain sum over the period and gamma per decision.")

    @model_validator(mode="after")
    def _fn(self) -> "RewardSpec":
        if self.intrinsic != 0.0 and not self.intrinsic_fn:
            raise ValueError("an intrinsic weight needs intrinsic_fn (a name or 'module:function')")
        if self.intrinsic_fn:
            from ..envs.rewards import is_known_reward, registered_rewards

            if not is_known_reward(self.intrinsic_fn):
                raise ValueError(f"intrinsic_fn {self.intrinsic_fn!r} is not a registered reward; registered: "
                                 f"{', '.join(registered_rewards())} (or 'package.module:function' for your own)")
        return self


class StartAfter(_Strict):
    layer: str = Field(..., description="The layer whose progress gates this one.")
    env_steps: Optional[int] = Field(None, ge=0, description="Start once that layer's group has sampled this many env steps.")
    mean_return: Optional[float] = Field(None, description="Start once that layer's mean episodic return reaches this.")

    @model_validator(mode="after")
    def _one(self) -> "StartAfter":
        if self.env_steps is None and self.mean_return is None:
            raise ValueError("start_after needs env_steps or mean_return")
        return self


class ScheduleSpec(_Strict):
    mode: Literal["train", "frozen", "scripted"] = Field(
        "train", description="'frozen' acts with fixed weights and never updates; 'scripted' acts by the layer's "
        "teacher.policy (its weights unused) and never updates: the layers above learn over a scripted skill.")
    checkpoint: Optional[str] = Field(
        None, description="Load this layer's weights and normalizer from a run dir or checkpoint file at start.")
    start_after: Optional[StartAfter] = Field(None, description="Staged start; omitted: trains from the start.")


class TeacherSpec(_Strict):
    """Kickstarting (Schmitt et al. 2018, arXiv:1803.03835): a scripted teacher labels every
    decision the layer takes, and the loss adds ``coeff * -log pi(teacher's action | s)``,
    annealed to ``coeff_final`` over the first ``anneal`` of the run. The layer still acts with
    its own policy and learns by PPO; the teacher only pulls it toward the script early on."""

    policy: str = Field(
        ..., description="'package.module:function' called as f(raw_obs, members, env, **kwargs) for each decision "
        "of the layer: the copy's raw observations (agent -> observation), the lane's agents and the copy's env, "
        "the same arguments as an observation.source function; returns the action in the layer's action space. A "
        "function marked @hdppo.envs.teachers.vectorized_teacher is called once per step for all lanes instead "
        "(f(env=, copies=, members=, command=, **kwargs)), which natively vectorised envs need.",
        json_schema_extra={"examples": ["hdppo.envs.builtin.fab:rule_teacher"]})
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the teacher function.")
    coeff: float = Field(1.0, ge=0.0, description="Weight of the teacher's negative log-likelihood at the start.")
    coeff_final: float = Field(0.0, ge=0.0, description="Its weight once `anneal` of the run is done.")
    anneal: float = Field(0.5, gt=0.0, le=1.0, description="Share of the run's env steps over which coeff falls "
                          "linearly to coeff_final.")
    replay: int = Field(0, ge=0, description="Keep the last `replay` labelled decisions in the learner (DAgger's "
                        "aggregated data set) and add the teacher's term on as many of them as each minibatch has; 0: "
                        "fresh samples only. For a skill whose hard states are rare (see hdppo.policies.teacher_replay); "
                        "memory: replay x (observation + action + mask) float32 values.")


class ExplorationSpec(_Strict):
    """An exploration bonus added to the layer's reward (see hdppo.policies.bonuses)."""

    type: str = Field(
        "none", description="'none'; a registered bonus: 'count' (SimHash counts per worker) or 'rnd' (random "
        "network distillation; the layer's learner trains the predictor; mode central); or your own "
        "'package.module:Class' (a subclass of hdppo.policies.bonuses.Bonus).",
        json_schema_extra={"examples": ["none", "count", "rnd", "my_pkg.bonuses:Novelty"]})
    coeff: float = Field(0.01, ge=0.0, description="Bonus coefficient at the start.")
    coeff_final: float = Field(0.0, ge=0.0, description="Bonus coefficient at the end (linear decay).")
    hash_bits: int = Field(16, ge=4, le=64, description="count: SimHash bits per state.")
    rnd_hidden: list[int] = Field(default_factory=lambda: [64, 64], description="rnd: hidden sizes of target and predictor.")
    rnd_out: int = Field(32, ge=1, description="rnd: embedding size.")
    rnd_lr: float = Field(1e-4, gt=0.0, description="rnd: predictor learning rate.")
    params: dict[str, Any] = Field(default_factory=dict, description="Settings of a plug-in bonus (it reads spec.params).")

    @field_validator("type")
    @classmethod
    def _registered(cls, value: str) -> str:
        if value == "none":
            return value
        from ..policies.bonuses import bonus_class

        try:
            bonus_class(value)  # a 'module:Class' is imported here, so a wrong path fails now, not on a worker
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        return value

    @property
    def learned(self) -> bool:
        """True if the bonus has a learner side, which needs the samples on the learner."""
        if self.type == "none":
            return False
        from ..policies.bonuses import bonus_class

        return bonus_class(self.type).learned


class LayerConfig(_Strict):
    """One layer of the hierarchy, trained as its own DPPO group."""

    name: str = Field("control", pattern=r"^[A-Za-z0-9_\-]+$", description="Layer name; also its TensorBoard run.")
    period: int = Field(1, ge=1, description="Acts every `period` steps of the layer below; the bottom layer's is 1.")
    agents: Union[Literal["all"], list[str], SquadsSpec] = Field(
        "all", description="'all', a list of env agents (one agent of this layer commands them), or {squads: {...}}. "
        "The bottom layer controls each of its env agents separately, with shared parameters.")
    observation: ObservationSpec = Field(default_factory=ObservationSpec)
    action: ActionSpec = Field(default_factory=ActionSpec)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    exploration: ExplorationSpec = Field(default_factory=ExplorationSpec)
    schedule: ScheduleSpec = Field(default_factory=ScheduleSpec)
    teacher: Optional[TeacherSpec] = Field(None, description="A scripted teacher this layer imitates early on "
                                           "(kickstarting); omitted: none.")
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    ppo: PPOConfig = Field(default_factory=PPOConfig)
    dppo: DPPOConfig = Field(default_factory=DPPOConfig)
    normalization: NormalizationConfig = Field(default_factory=NormalizationConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)

    @property
    def learns(self) -> bool:
        """Whether the layer is trained (not ``frozen`` or ``scripted``), and so has a DPPO group."""
        return self.schedule.mode == "train"

    @model_validator(mode="after")
    def _sizes(self) -> "LayerConfig":
        if self.schedule.mode == "scripted" and self.teacher is None:
            raise ValueError("schedule.mode 'scripted' acts by the layer's teacher, and the layer has none: add "
                             "teacher: {policy: 'package.module:function'} (its coeff is unused), or use mode "
                             "'train' or 'frozen'")
        sync = sync_mode_class(self.dppo.sync)
        if self.dppo.max_lag < sync.min_lag:
            raise ValueError(f"dppo.sync {self.dppo.sync} needs dppo.max_lag >= {sync.min_lag}: its samples are "
                             f"collected while the learner updates, at least {sync.min_lag} version(s) old, and with "
                             f"max_lag {self.dppo.max_lag} all would be dropped")
        if not sync.barrier and self.dppo.mode != "central":
            raise ValueError(f"dppo.sync {self.dppo.sync} needs dppo.mode 'central': mode 'dppo' takes every "
                             "worker's gradient on one weights version each step, which is a barrier; use sync 'sync'")
        if self.exploration.learned and self.dppo.mode == "dppo":
            raise ValueError(f"exploration.type {self.exploration.type!r} needs dppo.mode 'central': the learner "
                             "trains the bonus on the samples, which mode 'dppo' keeps on the workers")
        if self.teacher is not None and self.dppo.mode != "central":
            raise ValueError("teacher needs dppo.mode 'central': the learner adds the teacher's term to the loss, "
                             "and mode 'dppo' computes the loss on the workers")
        if self.ppo.bounds_loss_coeff > 0 and self.policy.encoder in ("gru", "cnn_gru"):
            raise ValueError(f"ppo.bounds_loss_coeff needs a feed-forward policy; policy.encoder "
                             f"{self.policy.encoder!r} replays sequences, which the bounds loss does not cover yet. "
                             "Set ppo.bounds_loss_coeff: 0, or policy.log_std_range alone")
        if self.teacher is not None and self.policy.encoder in ("gru", "cnn_gru"):
            raise ValueError(f"teacher is not supported with policy.encoder {self.policy.encoder!r} yet (the "
                             "learner replays recurrent chunks without the teacher's labels); use 'mlp' or 'cnn'")
        if self.ppo.minibatch_size > self.dppo.train_batch_size:
            default = "minibatch_size" not in self.ppo.model_fields_set
            raise ValueError(f"ppo.minibatch_size ({self.ppo.minibatch_size}{', the default' if default else ''}) must "
                             f"be <= dppo.train_batch_size ({self.dppo.train_batch_size}); set ppo.minibatch_size to "
                             "a divisor of the batch, or a larger dppo.train_batch_size")
        return self


class TrainConfig(_Strict):
    total_env_steps: int = Field(100_000, ge=1, description="Stop after this many env steps.")
    seed: int = Field(0, description="Seeds torch, numpy and the envs.")
    checkpoint_every: int = Field(10, ge=1, description="Write a checkpoint every N updates (and at the end).")
    eval_episodes: int = Field(10, ge=0, description="Deterministic episodes for the final evaluation; 0 skips it.")
    log_every_s: float = Field(10.0, gt=0.0, description="Seconds between plain progress lines without a TTY.")
    stop_timeout_s: float = Field(5.0, gt=0.0, description="On SIGINT or SIGTERM: seconds the update in flight has "
                                  "to finish before it is dropped (on Ray; in-process it always finishes); then a "
                                  "checkpoint of the last finished update, and exit. Keep it inside your scheduler's "
                                  "grace period (docker stop: 10s, Kubernetes and Slurm: 30s).")
    video_every: int = Field(0, ge=0, description="Every N updates, record one deterministic episode with the "
                             "current weights into the top layer's TensorBoard run (tag videos/episode, Images tab; "
                             "the env must render rgb_array); 0 turns it off.")
    video_max_steps: int = Field(200, ge=1, description="Env steps at most in each train.video_every clip.")
    eval_every: int = Field(0, ge=0, description="Every N updates, run train.eval_episodes deterministic episodes "
                            "(the same env seeds each time, away from the training seeds and from those hdppo eval "
                            "plays by default) and keep the weights that scored best as checkpoints/best.pt, their "
                            "score in checkpoints/best.json (hdppo eval/export --checkpoint best); logged as eval/*. "
                            "0 turns it off. Picking the best of many noisy checkpoints flatters their score: report "
                            "it on other episodes.")
    best_by: str = Field("return", min_length=1, description="What train.eval_every ranks by: 'return' (the env "
                         "return summed over agents) or an episode metric the env reports (env.episode_metrics, "
                         "e.g. win or makespan_over_lb).")
    best_mode: Literal["max", "min"] = Field("max", description="Whether a higher (max) or lower (min) "
                                             "train.best_by is better.")

    @field_validator("best_by")
    @classmethod
    def _best_by_as_charted(cls, v: str) -> str:
        # Written as its chart is named (episode/win, eval/episode/win): the metric is the info key.
        for prefix in ("eval/episode/", "episode/"):
            if v.startswith(prefix) and len(v) > len(prefix):
                return v[len(prefix):]
        return v

    @model_validator(mode="after")
    def _eval_every_needs_episodes(self) -> "TrainConfig":
        if self.eval_every and not self.eval_episodes:
            raise ValueError("train.eval_every needs train.eval_episodes > 0 (the episodes each evaluation runs); "
                             "set eval_episodes, or eval_every: 0")
        return self


class DiagnosticsConfig(_Strict):
    """The debugging views (see hdppo.platform.diagnostics). Per-worker observation and action
    divergence is logged every update; the costlier views every ``every`` updates."""

    every: int = Field(10, ge=0, description="Updates between state-coverage images (and, in mode central, "
                       "gradient-agreement measurements); 0 turns them off.")
    coverage_points: int = Field(128, ge=2, description="States each worker sends for the coverage image.")
    accounting: bool = Field(False, description="Keep, per layer, the id of every sample trained or dropped (stale, "
                             "or its rollout failed) in the driver, for tests and debugging (DPPOGroup.accounting); "
                             "32 bytes a sample. Samples carry their ids either way.")


class RayConfig(_Strict):
    address: Optional[str] = Field(None, description="null or 'local' starts an embedded Ray; 'auto' or host:port joins a cluster.")
    num_cpus: Optional[int] = Field(None, ge=1, description="CPUs of the embedded Ray; default all.")
    backend: Literal["ray", "local"] = Field(
        "ray", description="'local' runs workers and learner in this process (debugging, tests).")
    working_dir: Optional[str] = Field(
        None, description="The folder holding your env and reward modules ('my_envs:make'): shipped to every node "
        "of a cluster through Ray's runtime_env (run dirs, venvs, .git, checkpoints and files over 16 MiB left out), "
        "and put on the driver's sys.path. Relative to the current folder; stored absolute. CLI: --working-dir.")
    cpu_affinity: bool = Field(
        False, description="Pin each learner to a core of its own and the rollout workers to the other cores "
        "(hdppo/platform/affinity.py; Linux, the embedded Ray on one machine; nothing is pinned where the learners cannot "
        "each have a core and leave one to the workers). Pays where the update is the "
        "iteration and workers sample beside it (pipeline, soft, async): battle_v4 on 2 cores trained 1.10x faster; "
        "where the workers are the iteration (plain sync, Hopper) it costs (0.69x).")

    @model_validator(mode="after")
    def _affinity_on_one_machine(self) -> "RayConfig":
        if self.cpu_affinity and self.backend == "local":
            raise ValueError("cpu_affinity pins Ray actors to cores, and backend 'local' runs everything in this "
                             "process: set backend: ray, or leave cpu_affinity false")
        if self.cpu_affinity and self.address not in (None, "local"):
            raise ValueError(f"cpu_affinity plans the cores of one machine, and address {self.address!r} joins a "
                             "cluster, whose nodes it cannot see: leave cpu_affinity false there")
        return self

    @field_validator("working_dir")
    @classmethod
    def _working_dir(cls, v: Optional[str]) -> Optional[str]:
        if v is None:
            return v
        path = Path(v).expanduser()
        if not path.is_dir():
            raise ValueError(f"{'no such folder' if not path.exists() else 'not a folder'} (a relative path starts "
                             f"at {Path.cwd()}); give the folder that holds your env and reward modules, e.g. '.'")
        return str(path.resolve())


def _group_fields(dppo: dict, where: str) -> dict[str, Any]:
    """The group-level fields of a dppo section, validated (as DPPOConfig validates them)."""
    per_layer = sorted(set(dppo) & (set(DPPOConfig.model_fields) - set(GROUP_DPPO_FIELDS)))
    if per_layer:
        raise ValueError(f"{where}.{per_layer[0]} is a per-layer setting; set it in layers[].dppo. A group's dppo "
                         f"section takes only the group-level fields: {', '.join(GROUP_DPPO_FIELDS)}")
    try:
        valid = DPPOConfig.model_validate(dppo)
    except ValidationError as exc:
        e = exc.errors()[0]
        raise ValueError(f"{where}.{_loc_str(tuple(e['loc'])) if e['loc'] else ''}: "
                         f"{e['msg'].removeprefix('Value error, ')}") from None
    return {key: getattr(valid, key) for key in dppo}


def _members(group: "GroupSpec | list[str]") -> list[str]:
    return list(group.layers) if isinstance(group, GroupSpec) else list(group)


class GroupSpec(_Strict):
    """Layers trained as one DPPO group, with the group's own dppo settings."""

    layers: list[str] = Field(..., min_length=1, description="The layers of the group (they share workers and rollouts).")
    dppo: dict[str, Any] = Field(
        default_factory=dict, description="The group-level dppo settings, stated once for all its layers: "
        f"{', '.join(GROUP_DPPO_FIELDS)}. Per-layer ones (train_batch_size, max_lag, ...) stay in layers[].dppo.")

    learner: Optional[LearnerConfig] = Field(
        None, description="Where the group's learners run (one per layer), stated once for all its layers; "
        "omitted: each layer's own layers[].learner.")

    @field_validator("dppo")
    @classmethod
    def _group_level(cls, v: dict[str, Any]) -> dict[str, Any]:
        _group_fields(v, "dppo")
        return v


class Config(_Strict):
    """A training run: one env, a hierarchy of layers (top first), and how to train them."""

    name: str = Field(..., pattern=r"^[A-Za-z0-9_.\-]+$", description="Run name; the run dir is runs/<name>.")
    description: str = Field("", description="One line on what this config trains (`hdppo presets` prints it).")
    env: EnvConfig
    layers: list[LayerConfig] = Field(default_factory=lambda: [LayerConfig()], description="Layers, top first.")
    train: TrainConfig = Field(default_factory=TrainConfig)
    ray: RayConfig = Field(default_factory=RayConfig)
    diagnostics: DiagnosticsConfig = Field(default_factory=DiagnosticsConfig)

    groups: Optional[list[Union[GroupSpec, list[str]]]] = Field(
        None, description="Layers that share one DPPO group (workers and rollouts); by default each layer is its own. "
        "Each entry is {layers: [a, b], dppo: {...}} (the group's dppo settings, stated once) or a plain list "
        f"[a, b] (then the layers must agree on the group-level dppo fields: {', '.join(GROUP_DPPO_FIELDS)}).")

    @model_validator(mode="before")
    @classmethod
    def _group_dppo_into_layers(cls, data: Any) -> Any:
        """A group's ``dppo`` section holds for each of its layers: it is copied into their ``dppo``
        before they are validated (so each layer's checks see it). A layer that states one of those
        fields itself, differently, is an error: the setting belongs to the group."""
        if not isinstance(data, dict) or not any(isinstance(g, dict) and g.get("dppo") for g in data.get("groups") or []):
            return data
        data = dict(data)
        layers = [layer.model_dump(exclude_unset=True) if isinstance(layer, BaseModel) else dict(layer)
                  for layer in data.get("layers", [{}])]
        for g, group in enumerate(data["groups"]):
            if not isinstance(group, dict) or not isinstance(group.get("dppo"), dict) or not isinstance(group.get("layers"), list):
                continue  # the field's own validation reports what is wrong with it
            stated = _group_fields(group["dppo"], f"groups[{g}].dppo")
            for i, layer in enumerate(layers):
                name = layer.get("name", LayerConfig.model_fields["name"].default)
                if name not in group["layers"] or not isinstance(layer.get("dppo", {}), dict):
                    continue
                own = dict(layer.get("dppo") or {})
                for key, value in stated.items():
                    if key in own and _group_fields({key: own[key]}, f"layers[{i}].dppo").get(key) != value:
                        raise ValueError(
                            f"layers[{i}] ({name}).dppo.{key} ({json.dumps(own[key], default=str)}) disagrees with "
                            f"groups[{g}].dppo.{key} ({json.dumps(group['dppo'][key], default=str)}); a group's "
                            f"dppo settings are stated once, in the group: drop {key} from the layer")
                    own[key] = group["dppo"][key]
                layers[i] = {**layer, "dppo": own}
        data["layers"] = layers
        return data

    @model_validator(mode="after")
    def _hierarchy(self) -> "Config":
        names = [layer.name for layer in self.layers]
        if not names:
            raise ValueError("layers: give at least one layer")
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"layers: names must be unique; repeated: {', '.join(sorted(dup))}")
        bottom = self.layers[-1]
        if bottom.period != 1:
            raise ValueError(f"layers[{len(names) - 1}] ({bottom.name}).period: the bottom layer acts every env step; "
                             f"its period must be 1, got {bottom.period}")
        if bottom.action.type != "env":
            raise ValueError(f"layers[{len(names) - 1}] ({bottom.name}).action: the bottom layer takes env actions; "
                             f"set action.type to 'env', not {bottom.action.type!r}")
        for i, layer in enumerate(self.layers[:-1]):
            where = f"layers[{i}] ({layer.name})"
            if layer.action.type == "env":
                raise ValueError(f"{where}.action: only the bottom layer takes env actions; give this layer a "
                                 "command space, e.g. {type: discrete, n: 4}. (Layers are levels of one hierarchy, "
                                 "not roles side by side: agents of different roles share the bottom layer's "
                                 "weights, told apart by observation.agent_id: true.)")
            below = self.layers[i + 1]
            # A command handed to the env (to_env) reaches the layers below through the env.
            # Rewarded for following: a function with a weight (at weight 0 it is only charted).
            follows = bool(below.reward.intrinsic_fn) and below.reward.intrinsic != 0.0
            if not below.observation.command and not follows and not layer.action.to_env:
                raise ValueError(f"{where}.action: the layer below ({below.name}) neither observes the command "
                                 "(observation.command: false) nor is rewarded for following it (reward.intrinsic_fn "
                                 "with a reward.intrinsic weight other than 0); it cannot take this command. Set "
                                 "observation.command: true on that layer")
        for i, layer in enumerate(self.layers):
            if isinstance(layer.agents, SquadsSpec):
                seen: dict[str, str] = {}
                for squad, members in layer.agents.squads.items():
                    if not members:
                        raise ValueError(f"layers[{i}] ({layer.name}).agents.squads.{squad}: a squad needs at least one agent")
                    for agent in members:
                        if agent in seen:
                            raise ValueError(f"layers[{i}] ({layer.name}).agents.squads: agent {agent!r} is in two "
                                             f"squads ({seen[agent]} and {squad}); each agent belongs to one squad")
                        seen[agent] = squad
            start = layer.schedule.start_after
            if start is not None and (start.layer not in names or start.layer == layer.name):
                raise ValueError(f"layers[{i}] ({layer.name}).schedule.start_after.layer: {start.layer!r} is not "
                                 f"another layer; choose one of {', '.join(n for n in names if n != layer.name)}")
        if self.groups is not None:
            placed: dict[str, int] = {}
            for g, group in enumerate(self.groups):
                members = _members(group)
                for name in members:
                    if name not in names:
                        raise ValueError(f"groups[{g}]: unknown layer {name!r}; layers are {', '.join(names)}")
                    if name in placed:
                        raise ValueError(f"groups[{g}]: layer {name!r} is listed twice; list it once" if placed[name] == g
                                         else f"groups: layer {name!r} is in groups {placed[name]} and {g}; one group each")
                    placed[name] = g
                self._agree(g, members)
        self._check_gates()
        return self

    def _check_gates(self) -> None:
        """A ``start_after`` gate that could never open, or gates nothing, is refused here: it
        was accepted, and the run ended with the layer untrained and a wrong diagnosis."""
        group_of = {n: k for k, g in enumerate(self.layer_groups()) for n in g}
        for i, layer in enumerate(self.layers):
            start = layer.schedule.start_after
            field = f"layers[{i}] ({layer.name}).schedule"
            if layer.schedule.mode == "scripted" and layer.schedule.checkpoint:
                raise ValueError(f"{field}.checkpoint: a scripted layer acts by its teacher.policy, so weights loaded "
                                 "into it are never used. Drop checkpoint, or use mode frozen to act with them.")
            if start is None:
                continue
            if not layer.learns:
                raise ValueError(f"{field}.start_after: layer {layer.name!r} is {layer.schedule.mode} (it never trains), "
                                 "so there is nothing to start. Drop start_after, or set mode: train.")
            other = self.layer(start.layer)
            if not other.learns:
                raise ValueError(f"{field}.start_after.layer: {start.layer!r} is {other.schedule.mode}: it samples no "
                                 "env steps and logs no training return of its own, so the gate would never open. Gate "
                                 "on a layer that trains.")
            if group_of.get(start.layer) == group_of.get(layer.name):
                raise ValueError(f"{field}.start_after.layer: {start.layer!r} is in the same DPPO group (groups), and a "
                                 "gate holds back its whole group, so it would wait on itself. Put the two layers in "
                                 "different groups, or drop start_after.")

    def _agree(self, g: int, members: list[str]) -> None:
        """The trained layers of one group agree on every group-level dppo field."""
        trained = [n for n in members if self.layer(n).learns]
        for name in trained[1:]:
            a, b = self.layer(trained[0]).dppo, self.layer(name).dppo
            for key in GROUP_DPPO_FIELDS:
                va, vb = getattr(a, key), getattr(b, key)
                if va != vb:
                    show = (lambda v: json.dumps(v.model_dump() if isinstance(v, BaseModel) else v))
                    raise ValueError(
                        f"groups[{g}]: layers {trained[0]!r} and {name!r} disagree on dppo.{key} ({show(va)} vs "
                        f"{show(vb)}); one group has one pool of workers, so this setting is per group. State it "
                        f"once, as groups: [{{layers: [{', '.join(members)}], dppo: {{{key}: ...}}}}], or give "
                        "both layers the same value")

    @model_validator(mode="after")
    def _dppo_settings(self) -> "Config":
        for i, layer in enumerate(self.layers):
            if layer.learns:
                _check_dppo_settings(layer.dppo, f"layers[{i}] ({layer.name}).dppo")
        return self

    @model_validator(mode="after")
    def _learner_once(self) -> "Config":
        """A group's ``learner`` section and one of its layers' own may not both be stated, differently."""
        for g, group in enumerate(self.groups or []):
            if not isinstance(group, GroupSpec) or group.learner is None:
                continue
            for i, layer in enumerate(self.layers):
                if layer.name in group.layers and "learner" in layer.model_fields_set and layer.learner != group.learner:
                    raise ValueError(f"layers[{i}] ({layer.name}).learner ({json.dumps(layer.learner.model_dump())}) "
                                     f"disagrees with groups[{g}].learner ({json.dumps(group.learner.model_dump())}); "
                                     "state it once, in the group, or drop the group's")
        for i, layer in enumerate(self.layers):
            if self.learner_of(layer.name).precision == "bf16" and layer.policy.encoder in ("gru", "cnn_gru"):
                raise ValueError(f"layers[{i}] ({layer.name}): learner.precision 'bf16' is not supported with "
                                 f"policy.encoder {layer.policy.encoder!r} (the GRU's state would be carried in "
                                 "bfloat16 through each replayed chunk); use precision 'fp32', or encoder 'mlp' or 'cnn'")
        return self

    def learner_of(self, layer: str) -> LearnerConfig:
        """The ``learner`` settings of ``layer``: its group's section if that states one, else its own."""
        for group in self.groups or []:
            if isinstance(group, GroupSpec) and group.learner is not None and layer in group.layers:
                return group.learner
        return self.layer(layer).learner

    def group_dppo(self, layers: list[str]) -> DPPOConfig:
        """The dppo settings of the group of ``layers``. Its group-level fields (GROUP_DPPO_FIELDS)
        are the same in every layer of the group (validated); per-layer fields (train_batch_size,
        max_lag, aggregate, ...) are read from each layer's own ``dppo``."""
        trained = [n for n in layers if self.layer(n).learns] or list(layers)
        return self.layer(trained[0]).dppo

    def layer_groups(self) -> list[list[str]]:
        """The DPPO groups: the configured ones, then every remaining trainable layer alone."""
        listed = [_members(g) for g in (self.groups or [])]
        placed = {n for g in listed for n in g}
        fixed = {layer.name for layer in self.layers if not layer.learns}
        groups = [[n for n in g if n not in fixed] for g in listed]
        groups += [[layer.name] for layer in self.layers if layer.name not in placed and layer.name not in fixed]
        return [g for g in groups if g]

    def scripted_layers(self) -> list[str]:
        """The layers that act by their teacher (``schedule.mode: scripted``), in training and evaluation."""
        return [layer.name for layer in self.layers if layer.schedule.mode == "scripted"]

    def layer(self, name: str) -> "LayerConfig":
        return next(layer for layer in self.layers if layer.name == name)


# ----------------------------------------------------------------------------- loading

def _loc_str(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The model class that owns the field at ``loc`` (for listing the allowed keys)."""
    model: Any = Config
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        field = model.model_fields.get(part) if isinstance(model, type) and issubclass(model, BaseModel) else None
        if field is None:
            return None
        ann = field.annotation
        args = getattr(ann, "__args__", ())
        model = next((a for a in (ann, *args) if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if model is None:
            return None
    return model


def _flags_named(msg: str, given: dict[tuple, str]) -> list[str]:
    """The flags of ``given`` that set a field a check across fields names in ``msg`` (by the
    field's own name, e.g. 'period' for --set layers.b.period=2): only those can be its cause."""
    out = []
    for path, flag in given.items():
        keys = [k for k in path if isinstance(k, str)]
        if keys and re.search(rf"\b{re.escape(keys[-1])}\b", msg):
            out.append(flag)
    return out


def _explain(err: dict, given: dict[tuple, str] | None = None) -> str:
    loc = tuple(err["loc"])
    if not loc:  # a check across fields: its message names the fields; name the flags that set one
        msg = err["msg"].removeprefix("Value error, ").rstrip(".")
        flags = _flags_named(msg, given or {})
        return msg + (f" (the command line set {', '.join(flags)})." if flags else ".")
    where = _loc_str(loc)
    flag = _given_at(loc, given or {})
    note = ""
    if flag:
        where += f" (from {flag})"
    elif err["type"] not in ("extra_forbidden", "missing"):
        # A check on a layer that a group's setting reached (groups[i].dppo is written into its
        # layers): the flags that set a field the message names.
        flags = _flags_named(err["msg"], given or {})
        note = f" (the command line set {', '.join(flags)})" if flags else ""
    if err["type"] == "extra_forbidden":
        model = _model_at(loc)
        allowed = sorted(model.model_fields) if model else []
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return f"{where}: unknown key.{hint} Allowed keys here: {', '.join(allowed)}."
    if err["type"] == "missing":
        return f"{where}: required field is missing."
    msg = err["msg"].removeprefix("Value error, ")
    got = err.get("input")
    shown = "" if isinstance(got, dict) or got is None else f" (got {json.dumps(got, default=str)})"
    return f"{where}: {msg.rstrip('.')}{shown}{note}."


def _merge_same(lines: list[str]) -> list[str]:
    """One line for errors that say the same of several places (the layers of one group, checked
    each): 'layers[0], layers[1]: ...' rather than the message twice."""
    out: list[str] = []
    places: dict[str, list[str]] = {}
    for line in lines:
        where, sep, rest = line.partition(": ")
        if not sep or " " in where.split(" (")[0]:   # a message without a place of its own
            out.append(line)
            continue
        if rest not in places:
            places[rest] = []
            out.append(rest)  # a placeholder, filled below in first-seen order
        places[rest].append(where)
    return [f"{', '.join(places[x])}: {x}" if x in places else x for x in out]


def set_path(data: dict, dotted: str, value: Any, source: str = "--set") -> tuple:
    """Set ``a.b.c`` in nested dicts/lists; a list step is an index or a layer ``name``. Returns
    the path as set, list steps as indices (``('layers', 0, 'ppo', 'lr')``), so that an error
    found later at that place can name the flag that put the value there."""
    parts = dotted.split(".")
    node: Any = data
    resolved: list = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if isinstance(node, list):
            idx = int(part) if part.isdigit() else next(
                (j for j, item in enumerate(node) if isinstance(item, dict) and item.get("name") == part), None)
            if idx is None or idx >= len(node):
                names = [item["name"] for item in node if isinstance(item, dict) and "name" in item]
                close = difflib.get_close_matches(part, names, n=1)
                raise ConfigError(f"{source} {dotted}: no list entry '{part}' at {'.'.join(parts[:i]) or 'top'}"
                                  f"{f' (did you mean {close[0]!r}?)' if close else ''}; use an index "
                                  f"(0..{len(node) - 1}){' or a name: ' + ', '.join(names) if names else ''}.")
            resolved.append(idx)
            if last:
                node[idx] = value
            else:
                node = node[idx]
            continue
        if not isinstance(node, dict):
            raise ConfigError(f"{source} {dotted}: '{'.'.join(parts[:i])}' is a value, not a section.")
        resolved.append(part)
        if last:
            node[part] = value
        else:
            if part == "layers" and part not in node:
                node[part] = [{}]
            node = node.setdefault(part, {})
    return tuple(resolved)


def parse_override(text: str) -> tuple[str, Any]:
    """``a.b=value`` with the value parsed as YAML (so numbers, bools, lists and null work)."""
    if "=" not in text:
        raise ConfigError(f"--set {text!r}: expected KEY=VALUE, e.g. --set layers.0.ppo.lr=1e-4")
    key, raw = text.split("=", 1)
    try:
        return key.strip(), yaml.load(raw, Loader=ConfigLoader)   # 1e6 a number, as in the file
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML ({exc}).") from None


def _given_at(loc: tuple, given: dict[tuple, str]) -> str | None:
    """The command-line flag that set the value at ``loc`` or the section holding it, if any
    (the longest such path: ``--set layers.0.ppo={...}`` then ``--set layers.0.ppo.lr=...``,
    the second names an error at lr)."""
    best = None
    for path, flag in given.items():
        if loc[:len(path)] == path and (best is None or len(path) > len(best)):
            best = path
    if best is None:  # the error is at a section above the value set (an unknown key: --set trian.seed=1)
        best = next((path for path in given if loc and path[:len(loc)] == loc), None)
    return given[best] if best is not None else None


def validate(data: Any, source: str = "config", given: dict[tuple, str] | None = None) -> Config:
    """A :class:`Config` from plain data, or a :class:`ConfigError` naming every bad field.
    ``given`` maps the paths that command-line flags set (``('ray', 'working_dir')``) to the
    flag as typed: an error at such a path says which flag to fix, not only which file."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a mapping of keys (name, env, layers, train, ray); "
                          f"got {type(data).__name__}.")
    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        lines = _merge_same([_explain(e, given) for e in errors])
        flagged = sum(_given_at(tuple(e["loc"]), given or {}) is not None
                      or bool(_flags_named(e["msg"], given or {})) for e in errors)
        what = f"{source}, as changed on the command line," if flagged else source
        raise ConfigError(f"{what} is invalid: " + " ".join(lines)) from None


class ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader reading numbers as YAML 1.2 does: ``1e6`` and ``3e-4`` are floats (YAML
    1.1, PyYAML's, wants a dot, ``1.0e6``, and reads ``1e6`` as a string that an int field
    refuses), as the command line's ``--set`` and the RLlib and CleanRL configs users come from."""


ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[0-9][0-9_]*[eE][-+]?[0-9]+|\.[0-9_]+(?:[eE][-+]?[0-9]+)?)$"),
    list("-+0123456789."))


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read, override and validate a YAML config: a file, or a preset by name (``default``).
    Raises :class:`ConfigError` naming the problem."""
    path = resolve_config_path(path)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{path} is not a text file in UTF-8 (a config is YAML text). Pass the YAML file, "
                          "e.g. configs/default.yaml, or save it as UTF-8.") from None
    if not text.strip():
        raise ConfigError(f"{path} is empty. A config needs at least env (name defaults to the file's name, layers to "
                          "one PPO layer): copy a preset (hdppo presets lists them) and edit it.")
    try:
        data = yaml.load(text, Loader=ConfigLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path} is not valid YAML{where}: {getattr(exc, 'problem', exc)}. Fix the syntax there.") from None
    data = {} if data is None else data
    if isinstance(data, dict) and "name" not in data:  # the run dir's name: runs/<name>
        data["name"] = re.sub(r"[^A-Za-z0-9_.\-]", "_", path.stem) or "run"
    _upgrade_run_config(data)
    given: dict[tuple, str] = {}
    for text in overrides or []:
        key, value = parse_override(text)
        if not isinstance(data, dict):
            break
        given[set_path(data, key, value)] = f"--set {text}"
    return validate(data, source=str(path), given=given)


# Every PolicyConfig field a run dir's config.yaml held before policy.critic_input existed
# (2026-12-03): a policy section with all of them and no critic_input is such a dump.
_POLICY_FIELDS_BEFORE_CRITIC_INPUT = {"hidden", "activation", "init_log_std", "central_critic", "encoder", "set_features",
                                      "gru_hidden", "seq_len", "image_shape", "image_layout", "cnn_channels",
                                      "cnn_features"}


def _upgrade_run_config(data: Any) -> None:
    """A run trained before ``policy.critic_input`` had a central critic reading state() and
    the command only, and its checkpoints hold a critic of that width: its saved config gets
    ``critic_input: state`` so that eval, export and resume load it. Configs people write do
    not list every policy field, so they get the new default."""
    layers = data.get("layers") if isinstance(data, dict) else None
    for layer in layers if isinstance(layers, list) else []:
        policy = layer.get("policy") if isinstance(layer, dict) else None
        if isinstance(policy, dict) and "critic_input" not in policy and _POLICY_FIELDS_BEFORE_CRITIC_INPUT <= set(policy):
            policy["critic_input"] = "state"


def dump_config(cfg: Config) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False)


def json_schema() -> dict:
    """The config's JSON Schema, as files are read (:func:`load_config`), not as the model is built:
    ``name`` may be left out (it comes from the file's name), and a group's ``dppo`` takes the
    group-level fields of a layer's ``dppo`` only, as validation does (the model keeps it a dict,
    filled into the layers before they are validated)."""
    schema = Config.model_json_schema()
    schema["required"] = [k for k in schema.get("required", []) if k != "name"]
    name = schema["properties"]["name"]
    name["description"] = name.get("description", "") + " Default: the config file's name."
    dppo = schema["$defs"]["DPPOConfig"]["properties"]
    schema["$defs"]["GroupSpec"]["properties"]["dppo"] = {
        **schema["$defs"]["GroupSpec"]["properties"]["dppo"], "additionalProperties": False,
        "properties": {k: dppo[k] for k in GROUP_DPPO_FIELDS if k in dppo}}
    return schema


def worker_quota(layer: LayerConfig, num_workers: int) -> int:
    """Samples per rollout of one worker: its share of ``train_batch_size``, cut into
    ``chunks_per_worker`` chunks when workers stream (sync soft/async)."""
    chunks = layer.dppo.chunks_per_worker if layer.dppo.streaming else 1
    return max(1, math.ceil(layer.dppo.train_batch_size / (num_workers * chunks)))


def rollout_length(layer: LayerConfig, num_workers: int) -> int:
    """Steps per env per rollout so that the workers' rollouts together fill ``train_batch_size``."""
    return max(1, math.ceil(worker_quota(layer, num_workers) / layer.dppo.num_envs_per_worker))
