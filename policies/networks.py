"""Actor-critic networks for Box, Discrete and MultiDiscrete action spaces.

Separate actor and critic MLPs with orthogonal initialisation (the choices CleanRL and
"Implementation Matters" found to matter for PPO on MuJoCo). A Box action is a diagonal
Gaussian with a state-independent log-std; the env receives it clipped to the bounds, while
the loss uses the unclipped sample. Discrete is MultiDiscrete with one component.
"""
from __future__ import annotations

import contextlib
import math
from typing import Sequence

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Normal

# The logit of an action the mask forbids: probability zero in float32, yet finite, so no NaN
# reaches a softmax or its gradient.
MASKED_LOGIT = -1e8

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def _layer(inp: int, out: int, gain: float) -> nn.Linear:
    lin = nn.Linear(inp, out)
    nn.init.orthogonal_(lin.weight, gain)
    nn.init.zeros_(lin.bias)
    return lin


def mlp(inp: int, hidden: Sequence[int], out: int, activation: str, out_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [_layer(inp, h, math.sqrt(2)), _ACTIVATIONS[activation]()]
        inp = h
    layers.append(_layer(inp, out, out_gain))
    return nn.Sequential(*layers)


def _tensor(x: torch.Tensor | np.ndarray | None) -> torch.Tensor | None:
    """``x`` as a torch tensor (numpy arrays shared, not copied); None stays None."""
    return torch.from_numpy(x) if isinstance(x, np.ndarray) else x


def precision_context(precision: str, device_type: str):
    """The context the update's forward passes run in: nothing for 'fp32'; for 'bf16', torch's
    autocast to bfloat16 (convs and dense layers; :func:`run_mlp` keeps the output layer float32)."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if precision == "bf16":
        return torch.autocast(device_type, dtype=torch.bfloat16)
    raise ValueError(f"unknown precision {precision!r}: use 'fp32' or 'bf16'")


def masked_logits(logits: torch.Tensor, masks: torch.Tensor | None) -> torch.Tensor:
    """``logits`` with illegal actions (``masks`` 0) at MASKED_LOGIT: zero probability, finite
    gradients. No mask, or an empty one, leaves them as they are."""
    if masks is not None and masks.shape[-1] > 0:
        return torch.where(masks > 0, logits, torch.full_like(logits, MASKED_LOGIT))
    return logits


def normal_logp_entropy(mean: torch.Tensor, std: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probability and entropy ``[B]`` of ``actions [B, dim]`` under independent Gaussians
    ``(mean, std) [B, dim]``, summed over the dimensions: torch's ``Normal`` arithmetic, the same
    numbers, without its argument checks (see :func:`categorical_logp_entropy`; a Hopper-sized
    update, 64x64 MLPs, 80 steps of 512: 0.138-0.140 against 0.144-0.148 s, two alternated pairs,
    ``benchmarks/learner_device.py``)."""
    var = std ** 2
    logp = -((actions - mean) ** 2) / (2 * var) - std.log() - math.log(math.sqrt(2 * math.pi))
    entropy = 0.5 + 0.5 * math.log(2 * math.pi) + torch.log(std)
    return logp.sum(-1), entropy.sum(-1)


def categorical_logp_entropy(logits: torch.Tensor, actions: torch.Tensor, nvec: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed log-probability and entropy ``[B]`` of ``actions [B, len(nvec)]`` under one
    categorical per chunk of ``logits [B, sum(nvec)]``: the arithmetic of torch's ``Categorical``
    (log-softmax by logsumexp, softmax probabilities, the entropy's clamp), the same numbers,
    without its argument checks, which cost more than the arithmetic on a minibatch's few logits
    (a MinAtar bf16 update: 85 against 89-91 ms, three alternated pairs on a synthetic batch)."""
    logp = entropy = None
    for i, chunk in enumerate(torch.split(logits, list(nvec), dim=-1)):
        norm = chunk - chunk.logsumexp(dim=-1, keepdim=True)
        lp = norm.gather(-1, actions[:, i:i + 1].long()).squeeze(-1)
        ent = -(torch.clamp(norm, min=torch.finfo(norm.dtype).min) * torch.softmax(norm, dim=-1)).sum(-1)
        logp, entropy = (lp, ent) if logp is None else (logp + lp, entropy + ent)
    return logp, entropy


def tanh_(z: torch.Tensor) -> torch.Tensor:
    """``torch.tanh(z)``, computed in place by numpy where that is safe: a contiguous float32 CPU
    tensor that autograd does not track (the caller's own, fresh from a matmul). torch 2.13's CPU
    tanh took ~100 us on a 512x64 block on an AMD EPYC VM (its AVX2, AVX512 and scalar kernels
    alike), numpy's 13 us (2026-12-07); on the Intel Xeon VM torch's had taken ~10 us (run_mlp's
    note; numpy's not timed there). A learner's minibatch step of a 64x64 tanh actor-critic
    computes four such blocks. The values agree to a few float32 ulps. Anything else (bfloat16, CUDA, a tensor that needs a gradient) goes to torch.tanh."""
    if (z.device.type == "cpu" and z.dtype == torch.float32 and z.is_contiguous()
            and not (z.requires_grad and torch.is_grad_enabled())):
        a = z.detach().numpy()
        np.tanh(a, out=a)
        return z
    return torch.tanh(z)


def run_mlp(seq: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """``seq(x)`` without nn.Module's call machinery (hooks, dispatch): the same operations on
    the same parameters, at half the cost for the small batches a worker acts on every step.

    Under bf16 autocast (:func:`precision_context`) the hidden layers run in bfloat16 and the
    output layer in float32, on float32 inputs: logits and values keep float32's resolution, so
    the probability ratios and the value loss are not rounded to bfloat16's 3 digits."""
    last = len(seq) - 1
    own = False  # x was made here (by a Linear or ReLU), not handed in: tanh_ may write into it
    for k, m in enumerate(seq):
        kind = type(m)
        if kind is nn.Linear:
            if k == last and torch.is_autocast_enabled(x.device.type):
                with torch.autocast(x.device.type, enabled=False):
                    return F.linear(x.float(), m.weight, m.bias)
            x, own = F.linear(x, m.weight, m.bias), True
        elif kind is nn.Tanh:
            # CPU kernels compute a bfloat16 tanh ~4x slower than a float32 one and a round trip
            # (512x64: 55 against 10 us, ~18 with both casts); the same values either way.
            if x.dtype == torch.bfloat16 and x.device.type == "cpu":
                x = tanh_(x.float()).to(x.dtype)  # float() of bfloat16 is a new tensor
            else:
                x = tanh_(x) if own else torch.tanh(x)
            own = True
        elif kind is nn.ReLU:
            x, own = torch.relu(x), True
        else:
            x, own = m(x), False
    return x.float()  # a no-op in float32; a SetScorer's output under autocast


# Above this many input values (rows x width) an actor led by a conv encoder runs in torch: its
# convs outweigh torch's per-call cost, and numpy's im2col is slower than torch's kernels. A plain
# MLP runs in numpy at any size: its dense layers cost the same in either (one BLAS thread in a
# worker, see hdppo.platform.threads), and numpy's sampling from the logits costs less than torch's
# operators (192 MAgent2 views of 845 values: an act of ~350 against ~430 us).
NUMPY_ACT_MAX_VALUES = 8192


class NumpyMLP:
    """An actor's forward pass in numpy: an MLP, optionally behind a small-image conv encoder.

    A worker acts on a few rows every env step (4 Hopper copies, 24 MPE agents, 4 MinAtar
    screens). There each of torch's ~15 operator calls costs more than its maths: an act took
    ~120 us in torch and ~35 us here (4 rows of Hopper); with MinAtar's conv (4 rows of 10x10x4)
    ~290-335 us and ~120-170 us, the forward pass ~60 us of it (measured on a loaded VM). A
    linear layer's weight is a row-major copy of its torch parameter's transpose, a conv kernel
    an im2col matrix, the linear layer after the convs rearranged in the maps'
    height-width-channel order. All are rebuilt
    when a parameter changes: torch bumps a tensor's version on every in-place write
    (``load_state_dict``, optimizer steps), and a storage that moved (``.data =``,
    ``.to(device)``) changes its data pointer. Only float32 CPU actors of Linear, Tanh and ReLU,
    optionally led by an :class:`ImageEncoder`, qualify: :meth:`build` returns None otherwise.
    ``extra`` parameters (a log-std) get views, in :attr:`extra`.
    """

    def __init__(self, seq: nn.Sequential, extra: Sequence[torch.Tensor] = ()):
        self.seq = seq
        self.params = [*seq.parameters(), *extra]
        self.n_extra = len(extra)
        self._bind()

    @staticmethod
    def build(seq: nn.Module, extra: Sequence[torch.Tensor] = ()) -> "NumpyMLP | None":
        if not isinstance(seq, nn.Sequential) or not len(seq):
            return None
        mods = list(seq)
        if isinstance(mods[0], ImageEncoder):
            if not _numpy_image_encoder(mods[0]):
                return None
            mods = mods[1:]
        if not all(type(m) in (nn.Linear, nn.Tanh, nn.ReLU) for m in mods):
            return None
        if any(p.device.type != "cpu" or p.dtype != torch.float32 for p in [*seq.parameters(), *extra]):
            return None
        return NumpyMLP(seq, extra)

    def _bind(self) -> None:
        self.image = any(isinstance(m, ImageEncoder) for m in self.seq)
        self.ops: list[tuple] = []
        for m in self.seq:
            if isinstance(m, ImageEncoder):
                self.ops.append((_image_op(m), m))
            elif type(m) is nn.Linear:
                # x @ W.T with W.T copied row-major: BLAS multiplies by it 8-35% faster than by the
                # transposed view (845x64 at 192 rows: 185 against 200 us; 11x64 at 4 rows: 0.8
                # against 1.2 us), and the copy is made once per new set of weights.
                self.ops.append((np.ascontiguousarray(m.weight.detach().numpy().T), m.bias.detach().numpy()))
            else:
                self.ops.append((_activation(m),))
        self.extra = [p.detach().numpy() for p in self.params[len(self.params) - self.n_extra:]]
        self.stamp = self._stamp()
        self.binds = getattr(self, "binds", 0) + 1  # what callers key values derived from the arrays on

    def _stamp(self) -> list[tuple[int, int]]:
        return [(p.data_ptr(), p._version) for p in self.params]

    def fresh(self) -> bool:
        """True when the arrays are current (rebuilt if a parameter changed or moved); False once
        a parameter left the CPU, for the caller to fall back to torch."""
        if self._stamp() != self.stamp:
            if any(p.device.type != "cpu" for p in self.params):
                return False
            self._bind()
        return True

    def __call__(self, x: np.ndarray, start: int = 0) -> np.ndarray:
        """The forward pass of ``x``, or (``start``) of a hidden ``x`` from that op on."""
        for op in self.ops[start:] if start else self.ops:
            if len(op) == 2:
                if isinstance(op[1], ImageEncoder):
                    x = _image_forward(x, op[0])
                    continue
                x = x @ op[0]
                x += op[1]
            else:
                op[0](x, out=x)
        return x


class FusedFirstLayer:
    """An actor's and a critic's first linear layers, on the same input, as one product.

    A sampler on wide rows (battle_v4: 192 views of 845 values a step) spends about a quarter
    of its time in these two products; one product by the side-by-side weights reads the rows
    once and keeps BLAS's kernel fuller (845x64 twice against 845x128 once: ~250 against ~210 us
    at 192 rows), the rest of each network then runs on its half of the result (a view: BLAS
    takes it with its row stride, no copy). Made again when either network rebinds.

    ``bf16=True`` (a worker whose layer's learner runs at ``precision: bf16``): the product in
    bfloat16, as the learner's first layer computes it (inputs and weights rounded to bfloat16,
    float32 sums; the Xeon's AMX units), from BF16_MIN_VALUES inputs: 192x845 by 845x128 in
    ~130 against ~313 us, the sampler 1.087x faster on battle_v4. The bias and the layers after it
    stay float32."""

    BF16_MIN_VALUES = 4096  # below it torch's call costs more than the product saves (4x11: 25 against 2 us)

    def __init__(self, actor: NumpyMLP, critic: NumpyMLP):
        (wa, ba), (wc, bc) = actor.ops[0], critic.ops[0]
        self.actor, self.critic = actor, critic
        self.key = (actor.binds, critic.binds)
        self.w = np.ascontiguousarray(np.concatenate([wa, wc], axis=1))
        self.b = np.concatenate([ba, bc])
        self.split = wa.shape[1]
        self._w_bf16: torch.Tensor | None = None  # made on first use

    @staticmethod
    def fits(actor: NumpyMLP, critic: NumpyMLP) -> bool:
        """Both lead with a plain linear layer of the same input width."""
        a, c = actor.ops[0], critic.ops[0]
        return (not actor.image and not critic.image and len(a) == 2 and len(c) == 2
                and a[0].shape[0] == c[0].shape[0])

    def __call__(self, x: np.ndarray, bf16: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """(the actor's output, the critic's ``[B, 1]``)."""
        if bf16 and x.size >= self.BF16_MIN_VALUES and x.dtype == np.float32 and x.flags.writeable:
            if self._w_bf16 is None:
                self._w_bf16 = torch.from_numpy(self.w).to(torch.bfloat16)
            h = (torch.from_numpy(x).to(torch.bfloat16) @ self._w_bf16).float().numpy()
        else:
            h = x @ self.w
        h += self.b
        return self.actor(h[:, :self.split], start=1), self.critic(h[:, self.split:], start=1)


def _activation(m: nn.Module):
    return np.tanh if type(m) is nn.Tanh else _relu_


def _numpy_image_encoder(enc: "ImageEncoder") -> bool:
    """Whether numpy can run ``enc``: plain convs (no padding, dilation or groups) and ReLU/Tanh."""
    mods = list(enc.convs)
    convs, acts = mods[0::2], mods[1::2]
    return (all(type(c) is nn.Conv2d and c.padding == (0, 0) and c.dilation == (1, 1) and c.groups == 1
                and c.stride[0] == c.stride[1] and c.kernel_size[0] == c.kernel_size[1] for c in convs)
            and all(type(a) in (nn.Tanh, nn.ReLU) for a in acts) and len(convs) == len(acts)
            and type(enc.act) in (nn.Tanh, nn.ReLU))


def _image_op(enc: "ImageEncoder") -> tuple:
    """``enc`` as arrays for :func:`_image_forward`: each conv's kernel as an im2col matrix
    ``[k * k * C_in, C_out]`` (rows in (kh, kw, C) order), and the dense layer's weight transposed."""
    convs = []
    mods = list(enc.convs)
    for conv, act in zip(mods[0::2], mods[1::2]):
        w = conv.weight.detach().numpy()                                  # [out, C, k, k]
        k, stride = w.shape[-1], conv.stride[0]
        convs.append((k, stride, np.ascontiguousarray(w.transpose(2, 3, 1, 0).reshape(k * k * w.shape[1], -1)),
                      conv.bias.detach().numpy(), _activation(act)))
    lin = enc.dense.weight.detach().numpy().T                              # [Hf * Wf * C, F], a view
    return (enc.chw, enc.channels_last, enc.offset, enc.pixels, convs, lin, enc.dense.bias.detach().numpy(),
            _activation(enc.act))


def _image_forward(x: np.ndarray, op: tuple) -> np.ndarray:
    """:meth:`ImageEncoder.forward` in numpy: im2col convs on height-width-channel maps."""
    (c, h, w), channels_last, off, pixels, convs, lin, lin_b, act = op
    B = x.shape[0]
    img = x[:, off:off + pixels]
    img = img.reshape(B, h, w, c) if channels_last else img.reshape(B, c, h, w).transpose(0, 2, 3, 1)
    for k, stride, wm, b, conv_act in convs:
        win = np.lib.stride_tricks.sliding_window_view(img, (k, k), axis=(1, 2))[:, ::stride, ::stride]  # [B, H', W', C, k, k]
        ho, wo = win.shape[1], win.shape[2]
        m = win.transpose(0, 1, 2, 4, 5, 3).reshape(B * ho * wo, -1) @ wm
        m += b
        conv_act(m, out=m)
        img = m.reshape(B, ho, wo, -1)
    z = img.reshape(B, -1) @ lin
    z += lin_b
    act(z, out=z)
    if x.shape[1] == pixels:
        return z
    rest = [x[:, off + pixels:]] if off == 0 else [x[:, :off], x[:, off + pixels:]]
    return np.concatenate([z, *rest], axis=1)


def _relu_(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0, out=out)


def image_layout(shape: Sequence[int], layout: str = "auto") -> tuple[tuple[int, int, int], bool]:
    """``((C, H, W), channels_last)`` of an image observation of ``shape``. ``layout`` 'auto'
    reads a square image by its square sides (8x8x12, four stacked RGB frames: HWC; 4x10x10:
    CHW), and otherwise as channels last (HWC) when the last size is no larger than the first
    (210x160x3) and as channels first else (3x210x160)."""
    if len(shape) != 3:
        raise ValueError(f"an image observation has three dimensions, got shape {tuple(shape)}")
    a, b, c = (int(d) for d in shape)
    if layout == "auto" and a == b != c:
        last = True
    elif layout == "auto" and b == c != a:
        last = False
    else:
        last = layout == "hwc" or (layout == "auto" and c <= a)
    return ((c, a, b), True) if last else ((a, b, c), False)


class ImageEncoder(nn.Module):
    """``x [B, D]`` -> ``[B, features + D - prod(image)]``: the ``prod(image)`` values from
    ``offset`` on (0: the first; a Dict observation's image key may sort after others) are an
    image (flattened in the env's order, HWC or CHW), read by a conv stack; the rest (the Dict's
    other keys, command one-hot, agent id) passes through beside its features, in its order.

    Small images (up to 32 a side: MinAtar's 10x10, MAgent2's 13x13 views) get 3x3 convs of
    stride 1 with no padding, as MinAtar's and MAgent2's baselines use: every stride-2 layer would
    halve a 10x10 view. Larger ones get the Nature-DQN stack (8x8/4, 4x4/2, 3x3/1; Mnih et al.
    2015), whose strides keep the linear layer small at 84x84.
    """

    def __init__(self, chw: tuple[int, int, int], channels_last: bool, channels: Sequence[int] = (16, 32, 32),
                 features: int = 128, activation: str = "relu", offset: int = 0):
        super().__init__()
        self.chw, self.channels_last = tuple(int(d) for d in chw), bool(channels_last)
        self.pixels = int(np.prod(self.chw))
        self.offset = int(offset)
        c, h, w = self.chw
        if max(h, w) <= 32:
            kernels = [(3, 1)] * len(channels)
        else:
            nature = [(8, 4), (4, 2), (3, 1)]
            kernels = [nature[min(i, 2)] for i in range(len(channels))]
        layers: list[nn.Module] = []
        for out, (k, stride) in zip(channels, kernels):
            if min(h, w) < k:
                break  # the image is used up: fewer layers rather than a zero-size map
            conv = nn.Conv2d(c, int(out), k, stride)
            nn.init.orthogonal_(conv.weight, math.sqrt(2))
            nn.init.zeros_(conv.bias)
            layers += [conv, _ACTIVATIONS[activation]()]
            c, h, w = int(out), (h - k) // stride + 1, (w - k) // stride + 1
        self.convs = nn.Sequential(*layers)
        # 'dense', not 'linear': its columns are in the maps' (H, W, C) order. Weights saved
        # before that (as 'linear', columns in (C, H, W) order) are converted on loading.
        self.dense = _layer(c * h * w, int(features), math.sqrt(2))
        self.map_channels = c
        self.act = _ACTIVATIONS[activation]()
        self.features = int(features)
        self.register_load_state_dict_pre_hook(_upgrade_on_load)

    def out_dim(self, inp: int) -> int:
        return self.features + inp - self.pixels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        flat = x.reshape(-1, x.shape[-1])
        off, end = self.offset, self.offset + self.pixels
        img = flat[:, off:end]
        c, h, w = self.chw
        # Channels-last memory all the way: an HWC image is already laid out so (a permuted view),
        # a CHW one is copied so; oneDNN's convs then write channels-last maps, which flatten in
        # (H, W, C) order without a copy, and their backward gets its gradient channels-last
        # without a reorder. The last conv's activation runs after the flatten, on contiguous
        # memory. Forward and backward of MinAtar's CNN take ~20% less time so than on NCHW maps
        # flattened in (C, H, W) order (256 rows, one thread, float32 and bfloat16 alike).
        img = (img.reshape(-1, h, w, c).permute(0, 3, 1, 2) if self.channels_last
               else img.reshape(-1, c, h, w).contiguous(memory_format=torch.channels_last))
        if len(self.convs):
            # A loop, not convs[:-1]: TorchScript (hdppo export --format torchscript) cannot call a slice.
            feats, last = img, len(self.convs) - 1
            for i, layer in enumerate(self.convs):
                feats = layer(feats.permute(0, 2, 3, 1).reshape(feats.shape[0], -1) if i == last else feats)
        else:  # an image smaller than one kernel: read as it is
            feats = img.permute(0, 2, 3, 1).reshape(img.shape[0], -1)
        z = self.act(self.dense(feats))
        if flat.shape[-1] == self.pixels:
            out = z
        elif off == 0:  # the common case: no empty slice to join on every forward pass
            out = torch.cat([z, flat[:, end:]], dim=-1)
        else:
            out = torch.cat([z, flat[:, :off], flat[:, end:]], dim=-1)
        return out.reshape(list(lead) + [out.shape[-1]])  # a list, as TorchScript needs


def upgrade_image_encoders(state: dict) -> tuple[dict, list[str]]:
    """A policy state dict saved before image encoders flattened their maps in (H, W, C) order,
    converted: each encoder's ``linear.weight`` (columns in (C, H, W) order) becomes ``dense.weight``
    with its columns in (H, W, C) order, ``linear.bias`` becomes ``dense.bias``; the network computes
    exactly what it did. An encoder is recognised by ``P.linear.weight`` beside ``P.convs.0.weight``.
    Returns the new dict (the input when nothing needed converting) and the converted weights' new
    keys, whose Adam moments :func:`upgrade_moments` reorders the same way."""
    old = [k[:-len("linear.weight")] for k in state
           if k.endswith("linear.weight") and k[:-len("linear.weight")] + "convs.0.weight" in state]
    if not old:
        return state, []
    out = dict(state)
    for p in old:
        _convert_encoder(out, p, state[_last_conv_weight(state, p)].shape[0])
    return out, [p + "dense.weight" for p in old]


def upgrade_moments(module: nn.Module, optimizer_state: dict, converted: list[str], saved: dict) -> None:
    """Reorder, in place, the per-parameter optimizer state (Adam's moments) of the weights that
    :func:`upgrade_image_encoders` converted, so that a resumed run's moments follow their weights."""
    index = {name: i for i, (name, _) in enumerate(module.named_parameters())}
    for key in converted:
        prefix = key[:-len("dense.weight")]
        channels = saved[_last_conv_weight(saved, prefix)].shape[0]
        entry = optimizer_state.get("state", {}).get(index[key])
        for name, value in (entry or {}).items():
            if isinstance(value, torch.Tensor) and value.dim() == 2:
                entry[name] = _hwc_columns(value, channels)


def _last_conv_weight(state: dict, prefix: str) -> str:
    convs = [k for k in state if k.startswith(prefix + "convs.") and k.endswith(".weight")]
    return max(convs, key=lambda k: int(k[len(prefix + "convs."):].split(".")[0]))


def _hwc_columns(weight: torch.Tensor, channels: int) -> torch.Tensor:
    """``weight [F, C * S]``, columns in (C, S) order, as ``[F, S * C]`` in (S, C) order."""
    f = weight.shape[0]
    return weight.reshape(f, channels, -1).transpose(1, 2).reshape(f, -1).contiguous()


def _convert_encoder(state: dict, prefix: str, channels: int) -> None:
    """In place: the encoder at ``prefix``'s ``linear`` weights as ``dense`` ones (see upgrade_image_encoders)."""
    state[prefix + "dense.weight"] = _hwc_columns(state.pop(prefix + "linear.weight"), channels)
    state[prefix + "dense.bias"] = state.pop(prefix + "linear.bias")


def _upgrade_on_load(module: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    """load_state_dict pre-hook of :class:`ImageEncoder`: weights in the old layout, converted
    (the module knows its channel count, so an encoder without convs is converted too)."""
    if prefix + "linear.weight" in state_dict and prefix + "dense.weight" not in state_dict:
        _convert_encoder(state_dict, prefix, module.map_channels)


class ItemAttention(nn.Module):
    """One pre-norm Transformer block over a set of item embeddings ``[B, n, W]`` (no positional
    encoding, so it is permutation-equivariant): ``h + MHA(LN(h))``, then ``h + FF(LN(h))``.
    Written with plain linear layers rather than ``nn.MultiheadAttention`` so that TorchScript and
    the ONNX export see ordinary matmuls and softmax."""

    def __init__(self, width: int, heads: int, activation: str):
        super().__init__()
        if width % heads:
            raise ValueError(f"set attention: the item width {width} is not a multiple of {heads} heads")
        self.heads, self.head_dim = int(heads), width // int(heads)
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv = _layer(width, 3 * width, 1.0)
        # Zero-initialised outputs: each block starts as the identity, so a new block leaves the
        # Deep Sets encoder it extends unchanged at the first update.
        self.out = _layer(width, width, 0.0)
        self.ff = nn.Sequential(_layer(width, 2 * width, math.sqrt(2)), _ACTIVATIONS[activation](),
                                _layer(2 * width, width, 0.0))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, n, w = h.size(0), h.size(1), h.size(2)
        q, k, v = self.qkv(self.norm1(h)).reshape(b, n, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(self.head_dim), dim=-1)     # [B, heads, n, n]
        h = h + self.out((att @ v).transpose(1, 2).reshape(b, n, w))
        return h + self.ff(self.norm2(h))


class SetScorer(nn.Module):
    """A permutation-equivariant policy over a set of items (Deep Sets, Zaheer et al. 2017; the
    pointer-style scoring of learned dispatchers): the first ``items * features`` values of the
    flat input are ``items`` rows of ``features`` values each (item-major), the rest global values.

    Every item is embedded by one shared MLP, then passes ``attention`` :class:`ItemAttention`
    blocks (0: none, Deep Sets proper); the context is the mean and max of the embeddings with
    the global values. ``per_item`` (the actor): ``[B, D] -> [B, items]``, one score per item
    from its embedding and the context, so action ``i`` picks item ``i`` whatever the items' order.
    Otherwise (the critic): ``[B, D] -> [B, out]`` from the context alone. No weight depends on
    ``items``, so the same weights run on any number of items (a policy trained on 10x10 job
    shops loads into a 15x15 one): only the global width must match.
    """

    def __init__(self, items: int, features: int, inp: int, hidden: Sequence[int], out: int, activation: str,
                 out_gain: float, per_item: bool, attention: int = 0, heads: int = 4):
        super().__init__()
        self.items, self.features, self.per_item = int(items), int(features), bool(per_item)
        self.global_dim = int(inp) - self.items * self.features
        if self.global_dim < 0:
            raise ValueError(f"encoder 'set': {items} items of {features} features need {items * features} input "
                             f"values, but the input has {inp}")
        if per_item and out != self.items:
            raise ValueError(f"encoder 'set': the actor scores each of the {items} items, so it needs {items} "
                             f"outputs (a Discrete({items}) action), not {out}")
        width = int(hidden[0])
        self.embed = nn.Sequential(_layer(self.features, width, math.sqrt(2)), _ACTIVATIONS[activation](),
                                   _layer(width, width, math.sqrt(2)), _ACTIVATIONS[activation]())
        self.blocks = nn.Sequential(*(ItemAttention(width, heads, activation) for _ in range(int(attention))))
        head_hidden = list(hidden[1:]) or [width]
        context = 2 * width + self.global_dim
        self.head = mlp(width + context if per_item else context, head_hidden, 1 if per_item else out,
                        activation, out_gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead, n, f = x.shape[:-1], self.items, self.features
        flat = x.reshape(-1, x.shape[-1])
        h = self.blocks(self.embed(flat[:, :n * f].reshape(-1, n, f)))              # [B, n, W]
        context = torch.cat([h.mean(1), h.amax(1), flat[:, n * f:]], dim=-1)      # [B, 2W + G]
        if self.per_item:
            both = torch.cat([h, context.unsqueeze(1).expand(-1, n, -1)], dim=-1)
            out = self.head(both).squeeze(-1)                                      # [B, n]
        else:
            out = self.head(context)
        return out.reshape(list(lead) + [out.shape[-1]])  # a list, as TorchScript needs


def trunk(inp: int, hidden: Sequence[int], out: int, activation: str, out_gain: float,
          encoder: dict | None, role: str = "actor") -> nn.Sequential:
    """The MLP alone (``encoder`` None or kind 'mlp'), or an ImageEncoder followed by it in one
    Sequential, or a SetScorer (kind 'set'; ``role`` 'actor' scores items, 'critic' pools them),
    each a Sequential so that ``run_mlp`` and export treat them alike."""
    if not encoder or encoder.get("kind", "mlp") == "mlp":
        return mlp(inp, hidden, out, activation, out_gain)
    if encoder["kind"] == "set":
        return nn.Sequential(SetScorer(encoder["items"], encoder["features"], inp, hidden, out, activation, out_gain,
                                       per_item=role == "actor", attention=encoder.get("attention", 0),
                                       heads=encoder.get("heads", 4)))
    if encoder["kind"] != "cnn":
        raise ValueError(f"unknown encoder {encoder['kind']!r}: use 'mlp', 'cnn' or 'set'")
    enc = ImageEncoder(encoder["chw"], encoder["channels_last"], encoder.get("channels", (16, 32, 32)),
                       encoder.get("features", 128), offset=encoder.get("offset", 0))
    if inp < enc.offset + enc.pixels:
        raise ValueError(f"encoder 'cnn': the image {encoder['chw']} has {enc.pixels} values but the input only {inp}")
    return nn.Sequential(enc, *mlp(enc.out_dim(inp), hidden, out, activation, out_gain))


class ActionHead:
    """How one action space turns network outputs into a distribution."""

    def __init__(self, space: gym.Space):
        if isinstance(space, gym.spaces.Box):
            self.kind = "box"
            self.dim = int(np.prod(space.shape))
            self.low = np.asarray(space.low, np.float32).reshape(-1)
            self.high = np.asarray(space.high, np.float32).reshape(-1)
            self.shape = space.shape
            self.nvec: list[int] = []
            self.logits_dim = self.dim
        elif isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
            self.kind = "discrete" if isinstance(space, gym.spaces.Discrete) else "multidiscrete"
            self.nvec = [int(space.n)] if self.kind == "discrete" else [int(n) for n in np.asarray(space.nvec).reshape(-1)]
            self.start = (np.asarray([int(space.start)]) if self.kind == "discrete"
                          else np.asarray(space.start).reshape(-1).astype(np.int64))
            self.dim = len(self.nvec)
            self.logits_dim = int(sum(self.nvec))
            self.shape = space.shape
        else:
            raise TypeError(f"unsupported action space {space!r}: use Box, Discrete or MultiDiscrete")

    def to_env_array(self, actions: np.ndarray) -> np.ndarray:
        """Network actions ``[B, dim]`` as one env-format array ``[B, *shape]`` (clipped floats
        for a Box, int64 indices with the space's ``start`` added for Discrete/MultiDiscrete)."""
        if self.kind == "box":  # minimum/maximum: np.clip's call overhead dominates on a few actions
            return np.minimum(np.maximum(actions, self.low), self.high).reshape((-1, *self.shape))
        ints = actions.astype(np.int64) + self.start
        return ints[:, 0] if self.kind == "discrete" else ints.reshape((-1, *self.shape))

    def to_env(self, actions: np.ndarray) -> list:
        """Network actions ``[N, dim]`` to what ``env.step`` takes, one per env."""
        if self.kind == "box":
            clipped = np.clip(actions, self.low, self.high)
            return [a.reshape(self.shape) for a in clipped]
        ints = actions.astype(np.int64) + self.start
        if self.kind == "discrete":
            return [int(a[0]) for a in ints]
        return [a.reshape(self.shape) for a in ints]


class ActorCritic(nn.Module):
    """``obs [B, obs_dim]`` -> action distribution and value ``[B]``."""

    # The arithmetic of the act's first layer where it runs fused (FusedFirstLayer): a worker sets
    # 'bf16' when its layer's learner computes at that precision, so the two round alike.
    act_precision = "fp32"

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", init_log_std: float = 0.0, critic_dim: int | None = None,
                 encoder: dict | None = None):
        super().__init__()
        self.head = ActionHead(action_space)
        # ``encoder``: None / {"kind": "mlp"}, {"kind": "cnn", "chw", "channels_last", "channels",
        # "features"} (a conv stack ahead of the hidden layers), or {"kind": "set", "items",
        # "features"} (a SetScorer); see hierarchies.spec.encoder_spec.
        self.actor = trunk(obs_dim, hidden, self.head.logits_dim, activation, 0.01, encoder)
        # A centralized critic (MAPPO) reads ``critic_obs`` (the global state) instead of ``obs``.
        self.central = critic_dim is not None
        self.critic = (mlp(critic_dim, hidden, 1, activation, 1.0) if critic_dim is not None
                       else trunk(obs_dim, hidden, 1, activation, 1.0, encoder, role="critic"))
        if self.head.kind == "box":
            self.log_std = nn.Parameter(torch.full((self.head.dim,), float(init_log_std)))

    def value(self, obs: torch.Tensor, critic_obs: torch.Tensor | None = None) -> torch.Tensor:
        return run_mlp(self.critic, critic_obs if self.central else obs).squeeze(-1)

    def bf16_inputs_exact(self) -> bool:
        """Whether handing the update bfloat16 observations changes nothing under bf16 autocast:
        each network's first operation on them is a dense layer or an image encoder's conv, which
        autocast rounds its input to bfloat16 for anyway (a SetScorer computes on them first)."""
        return all(len(seq) and type(seq[0]) in (nn.Linear, ImageEncoder) for seq in (self.actor, self.critic))

    def box_mean(self, obs: torch.Tensor) -> torch.Tensor:
        """A Box policy's Gaussian mean ``[B, dim]``, before the env's clipping."""
        return run_mlp(self.actor, obs)

    def log_prob_entropy(self, obs: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor | None = None,
                         with_mean: bool = False) -> tuple[torch.Tensor, ...]:
        """Log-probability and entropy ``[B]`` of ``actions [B, dim]``; ``masks [B, logits]`` or None.
        ``with_mean`` (Box only): also the Gaussian's mean ``[B, dim]`` from the same forward pass."""
        out = run_mlp(self.actor, obs)
        if self.head.kind == "box":
            logp, entropy = normal_logp_entropy(out, self.log_std.exp().expand_as(out), actions)
            return (logp, entropy, out) if with_mean else (logp, entropy)
        return categorical_logp_entropy(masked_logits(out, masks), actions, self.head.nvec)

    def act(self, obs: torch.Tensor | np.ndarray, deterministic: bool = False, masks: torch.Tensor | np.ndarray | None = None,
            critic_obs: torch.Tensor | np.ndarray | None = None, with_value: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Sample (or take the mode of) actions: ``(actions [B, dim], logp [B], value [B])``;
        the value is None with ``with_value=False`` (a caller that evaluates the critic later, batched).
        Inputs are torch tensors or float32 numpy arrays (a sampler's, passed without a round trip).

        A plain MLP actor on the CPU runs in numpy (:class:`NumpyMLP`) at any batch size, one led by a small conv
        encoder on a small input too (see NUMPY_ACT_MAX_VALUES); anything else in torch:
        the same distribution either way, the noise drawn from a numpy generator seeded from torch's."""
        if isinstance(obs, np.ndarray):
            fast = self._numpy_actor()
            if fast is not None and fast.image and obs.size > NUMPY_ACT_MAX_VALUES:
                fast = None
            x = obs
        else:
            fast = self._numpy_actor() if obs.device.type == "cpu" else None
            if fast is not None and fast.image and obs.numel() > NUMPY_ACT_MAX_VALUES:
                fast = None
            x = obs.detach().numpy() if fast is not None else None
        if fast is None:
            return self._act_torch(_tensor(obs), deterministic, _tensor(masks), _tensor(critic_obs), with_value)
        fused = self._fused(fast) if with_value and not self.central else None
        if fused is not None:
            out, v = fused(x, bf16=self.act_precision == "bf16")
        else:
            out, v = fast(x), None
        rng = self._rng
        if self.head.kind == "box":
            std, logp_base = self._box_terms(fast)
            eps = (np.zeros_like(out) if deterministic else rng.standard_normal(out.shape, dtype=np.float32))
            a = eps * std
            a += out
            logp = np.einsum("ij,ij->i", eps, eps)  # one pass, where (eps * eps).sum(-1) makes a temporary
            logp *= -0.5
            logp -= logp_base
        else:
            if masks is not None and masks.shape[-1] > 0:
                out = np.where(np.asarray(masks) > 0, out, np.float32(MASKED_LOGIT))
            rows = np.arange(out.shape[0])
            a = np.empty((out.shape[0], len(self.head.nvec)), np.float32)
            logp = np.zeros(out.shape[0], np.float32)
            at = 0
            # Plain indexing and one preallocated array: take_along_axis and np.stack cost more
            # than the maths on the few rows a sampler passes per step.
            for k, n in enumerate(self.head.nvec):
                chunk = out[:, at:at + n]
                at += n
                top = chunk.max(-1, keepdims=True)
                log_probs = chunk - (top + np.log(np.exp(chunk - top).sum(-1, keepdims=True)))
                if deterministic:
                    pick = log_probs.argmax(-1)
                else:  # Gumbel-max: argmax of log p + G samples from p
                    u = rng.random(log_probs.shape, dtype=np.float32)
                    np.maximum(u, 1e-20, out=u)  # u < 1 already: only the floor matters, and np.clip costs more
                    pick = (log_probs - np.log(-np.log(u))).argmax(-1)
                a[:, k] = pick
                logp += log_probs[rows, pick]
        if with_value and v is not None:
            v = v[:, 0]
        elif with_value:
            critic = self._numpy_critic()
            if critic is not None:
                v = critic(np.asarray(critic_obs) if self.central else x)[:, 0]
            else:
                with torch.inference_mode():
                    v = self.value(_tensor(obs), _tensor(critic_obs)).numpy()
        return a.astype(np.float32, copy=False), logp.astype(np.float32, copy=False), v

    def _box_terms(self, fast: NumpyMLP) -> tuple[np.ndarray, float]:
        """``(std, sum(log_std) + dim * log(2 pi) / 2)`` of the Gaussian head, recomputed only when
        ``fast`` rebinds to new weights: per step they cost more than the maths that uses them."""
        cached = self.__dict__.get("_box_cache")
        if cached is None or cached[0] is not fast or cached[1] != fast.binds:
            log_std = fast.extra[0]
            cached = (fast, fast.binds, np.exp(log_std), float(log_std.sum(dtype=np.float64)) + _HALF_LOG_2PI * log_std.size)
            self.__dict__["_box_cache"] = cached
        return cached[2], cached[3]

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()  # the numpy views and generator are rebuilt on first use
        state.pop("_fast_actor", None)
        state.pop("_fast_critic", None)
        state.pop("_fused_first", None)  # numpy copies of the weights: rebuilt on first use
        state.pop("_rng", None)
        state.pop("_box_cache", None)
        state.pop("_mlp_layers", None)  # mlp_gradients' view of the layers: rebuilt on first use
        return state

    def _numpy_actor(self) -> NumpyMLP | None:
        fast = self.__dict__.get("_fast_actor", False)
        if fast is False:  # first call: decide once (the actor's kind never changes)
            fast = NumpyMLP.build(self.actor, [self.log_std] if self.head.kind == "box" else [])
            self.__dict__["_fast_actor"] = fast
            # A numpy generator per policy, seeded from torch's: torch.manual_seed still fixes a run.
            self.__dict__["_rng"] = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))
        return fast if fast is not None and fast.fresh() else None

    def _numpy_critic(self) -> NumpyMLP | None:
        """The critic in numpy where it is a plain MLP on the CPU (as :meth:`_numpy_actor`; a conv
        critic stays in torch, whose batched convs beat numpy's im2col)."""
        fast = self.__dict__.get("_fast_critic", False)
        if fast is False:
            fast = NumpyMLP.build(self.critic)
            fast = self.__dict__["_fast_critic"] = fast if fast is not None and not fast.image else None
        return fast if fast is not None and fast.fresh() else None

    def _fused(self, actor: NumpyMLP) -> FusedFirstLayer | None:
        """The actor's and critic's first layers as one product, where both are plain numpy MLPs
        on the observation (kept until either gets new weights)."""
        critic = self._numpy_critic()
        if critic is None or not FusedFirstLayer.fits(actor, critic):
            return None
        fused = self.__dict__.get("_fused_first")
        if fused is None or fused.actor is not actor or fused.critic is not critic or fused.key != (actor.binds, critic.binds):
            fused = self.__dict__["_fused_first"] = FusedFirstLayer(actor, critic)
        return fused

    def numpy_critic(self) -> bool:
        """Whether :meth:`act` computes values in numpy (a plain MLP critic on the CPU)."""
        return self._numpy_critic() is not None

    @torch.inference_mode()
    def _act_torch(self, obs: torch.Tensor, deterministic: bool = False, masks: torch.Tensor | None = None,
                   critic_obs: torch.Tensor | None = None, with_value: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if self.head.kind == "box":
            # Written out rather than through torch.distributions.Normal: this runs once per env
            # step in every worker, and the distribution object costs more than the maths.
            # a = mean + std * eps, so (a - mean) / std is eps itself: log N(a) needs no division.
            mean, log_std = run_mlp(self.actor, obs), self.log_std
            eps = torch.zeros_like(mean) if deterministic else torch.randn_like(mean)
            a = mean + log_std.exp() * eps
            logp = -0.5 * (eps * eps).sum(-1) - (log_std.sum() + _HALF_LOG_2PI * mean.shape[-1])
        else:
            # Written out too (Gumbel-max sampling from log-softmax): Categorical validates its
            # arguments and normalises twice, which costs more than the network on small inputs.
            logits = masked_logits(run_mlp(self.actor, obs), masks)
            parts, logp = [], torch.zeros(logits.shape[0])
            for chunk in torch.split(logits, self.head.nvec, dim=-1):
                log_probs = torch.log_softmax(chunk, dim=-1)
                if deterministic:
                    pick = log_probs.argmax(-1)
                else:
                    gumbel = -torch.log(-torch.log(torch.rand_like(log_probs).clamp_(1e-20, 1.0)))
                    pick = (log_probs + gumbel).argmax(-1)
                parts.append(pick)
                logp = logp + log_probs.gather(-1, pick.unsqueeze(-1)).squeeze(-1)
            a = torch.stack(parts, dim=-1).float()
        v = self.value(obs, critic_obs).numpy() if with_value else None
        return a.numpy(), logp.numpy(), v  # type: ignore[union-attr]


def flat_obs_dim(space: gym.Space) -> int:
    return int(gym.spaces.flatdim(space))


class RecurrentActorCritic(nn.Module):
    """A GRU actor-critic: ``obs [B, D]`` and hidden ``h [B, hidden_dim]`` -> action
    distribution, value, and the next hidden: ``policy.encoder: gru`` (or ``cnn_gru``), built by
    :func:`make_policy`; the sampler carries the hidden, the learner replays chunks (:meth:`replay`).

    Actor and critic each have their own GRU cell (as the MLP policy keeps them apart, so the
    value loss never shapes the actor's memory); ``h`` holds both, actor first:
    ``hidden_dim = 2 * gru_hidden`` (``gru_hidden`` alone with a central critic, an MLP on
    state()). An optional ImageEncoder (``cnn``: an encoder dict as ActorCritic takes) reads the
    image ahead of each GRU. Convention for the hidden state a step receives: it is already
    reset (zero) where an episode starts or a lane appears, so ``value(obs, h_in)`` of a stored
    step needs no sequence, and :meth:`replay` zeroes it at the steps flagged ``first``.
    """

    recurrent = True

    def __init__(self, obs_dim: int, action_space: gym.Space, hidden: Sequence[int] = (64, 64),
                 activation: str = "tanh", init_log_std: float = 0.0, critic_dim: int | None = None,
                 gru_hidden: int = 64, cnn: dict | None = None):
        super().__init__()
        self.head = ActionHead(action_space)
        self.central = critic_dim is not None
        self.gru_hidden = int(gru_hidden)
        self.hidden_dim = self.gru_hidden * (1 if self.central else 2)

        def reader() -> tuple[nn.Module, nn.GRUCell]:
            enc: nn.Module = nn.Identity()
            width = obs_dim
            if cnn:
                enc = ImageEncoder(cnn["chw"], cnn["channels_last"], cnn.get("channels", (16, 32, 32)),
                                   cnn.get("features", 128), offset=cnn.get("offset", 0))
                width = enc.out_dim(obs_dim)
            cell = nn.GRUCell(width, self.gru_hidden)
            for name, p in cell.named_parameters():  # orthogonal weights, zero biases (as the MLPs)
                nn.init.orthogonal_(p) if "weight" in name else nn.init.zeros_(p)
            return enc, cell

        self.actor_enc, self.actor_gru = reader()
        self.actor = mlp(self.gru_hidden, hidden, self.head.logits_dim, activation, 0.01)
        if self.central:
            self.critic = mlp(critic_dim, hidden, 1, activation, 1.0)  # type: ignore[arg-type]
        else:
            self.critic_enc, self.critic_gru = reader()
            self.critic = mlp(self.gru_hidden, hidden, 1, activation, 1.0)
        if self.head.kind == "box":
            self.log_std = nn.Parameter(torch.full((self.head.dim,), float(init_log_std)))

    def initial_hidden(self, n: int) -> np.ndarray:
        return np.zeros((n, self.hidden_dim), np.float32)

    def _actor_step(self, obs: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.actor_gru(self.actor_enc(obs), h[:, : self.gru_hidden])

    def _critic_step(self, obs: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        return self.critic_gru(self.critic_enc(obs), h[:, self.gru_hidden:])

    def _logits_dists(self, out: torch.Tensor, masks: torch.Tensor | None):
        if self.head.kind == "box":
            return Normal(out, self.log_std.exp().expand_as(out))
        out = masked_logits(out, masks)
        return [Categorical(logits=chunk) for chunk in torch.split(out, self.head.nvec, dim=-1)]

    def _score(self, out: torch.Tensor, actions: torch.Tensor, masks: torch.Tensor | None):
        if self.head.kind == "box":
            return normal_logp_entropy(out, self.log_std.exp().expand_as(out), actions)
        return categorical_logp_entropy(masked_logits(out, masks), actions, self.head.nvec)

    def value(self, obs: torch.Tensor, h: torch.Tensor, critic_obs: torch.Tensor | None = None) -> torch.Tensor:
        """``V [B]`` of steps with inputs ``obs [B, D]`` and the hidden they received ``h [B, hidden_dim]``."""
        if self.central:
            return run_mlp(self.critic, critic_obs).squeeze(-1)
        return run_mlp(self.critic, self._critic_step(obs, h)).squeeze(-1)

    @torch.inference_mode()
    def act(self, obs: torch.Tensor, h: torch.Tensor, deterministic: bool = False,
            masks: torch.Tensor | None = None, critic_obs: torch.Tensor | None = None,
            with_value: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
        """``(actions [B, dim], logp [B], value [B] or None, next hidden [B, hidden_dim])``."""
        za = self._actor_step(obs, h)
        d = self._logits_dists(run_mlp(self.actor, za), masks)
        if self.head.kind == "box":
            a = d.mean if deterministic else d.sample()
            logp = d.log_prob(a).sum(-1)
        else:
            picks = [di.probs.argmax(-1) if deterministic else di.sample() for di in d]
            logp = sum(di.log_prob(p) for di, p in zip(d, picks))
            a = torch.stack(picks, dim=-1).float()
        if self.central:
            h_next = za
        else:
            h_next = torch.cat([za, self._critic_step(obs, h)], dim=-1)
        v = self.value(obs, h, critic_obs).numpy() if with_value else None
        return a.numpy(), logp.numpy(), v, h_next.numpy()  # type: ignore[union-attr]

    def replay(self, obs: torch.Tensor, h0: torch.Tensor, first: torch.Tensor, actions: torch.Tensor,
               masks: torch.Tensor | None = None, critic_obs: torch.Tensor | None = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chunks of consecutive steps, replayed through the GRUs from their stored first hidden:
        ``obs [S, C, D]``, ``h0 [S, hidden_dim]`` (the hidden the chunk's first step received),
        ``first [S, C]`` bool (the hidden is zeroed before those steps: episode starts),
        ``actions [S, C, dim]``, ``masks [S, C, logits]``, ``critic_obs [S, C, state]``
        -> ``(logp, entropy, value)``, each ``[S, C]``. Padded steps are the caller's to mask."""
        S, C = obs.shape[:2]
        H = self.gru_hidden
        ha = h0[:, :H]
        hc = None if self.central else h0[:, H:]
        xa = self.actor_enc(obs.reshape(S * C, -1)).reshape(S, C, -1)
        xc = None if self.central else self.critic_enc(obs.reshape(S * C, -1)).reshape(S, C, -1)
        outs_a, outs_c = [], []
        for k in range(C):
            if k:
                keep = (~first[:, k]).unsqueeze(-1).to(ha.dtype)
                ha = ha * keep
                hc = hc * keep if hc is not None else None
            ha = self.actor_gru(xa[:, k], ha)
            outs_a.append(ha)
            if hc is not None:
                hc = self.critic_gru(xc[:, k], hc)  # type: ignore[index]
                outs_c.append(hc)
        za = torch.stack(outs_a, 1).reshape(S * C, H)
        logp, ent = self._score(run_mlp(self.actor, za), actions.reshape(S * C, actions.shape[-1]),
                                masks.reshape(S * C, masks.shape[-1]) if masks is not None else None)
        if self.central:
            v = run_mlp(self.critic, critic_obs.reshape(S * C, critic_obs.shape[-1]))  # type: ignore[union-attr]
        else:
            v = run_mlp(self.critic, torch.stack(outs_c, 1).reshape(S * C, H))
        return logp.reshape(S, C), ent.reshape(S, C), v.reshape(S, C)


def sequence_chunks(ids: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut a batch into chunks of consecutive steps of one lane, for :meth:`RecurrentActorCritic.replay`.

    ``ids [B, 4]`` (hdppo.platform.batch: worker, copy, env step, lane) -> ``(index [S, seq_len]
    int64, valid [S, seq_len] bool)``: row s lists the samples of chunk s in step order, padded
    with index 0 where ``valid`` is False. Each (worker, copy, lane) sequence is sorted by step
    and cut every ``seq_len`` samples; every sample lies in exactly one chunk."""
    if len(ids) == 0:
        return np.zeros((0, seq_len), np.int64), np.zeros((0, seq_len), bool)
    order = np.lexsort((ids[:, 2], ids[:, 3], ids[:, 1], ids[:, 0]))
    key = ids[order][:, [0, 1, 3]]
    new_seq = np.ones(len(order), bool)
    new_seq[1:] = (key[1:] != key[:-1]).any(axis=1)
    seq_id = np.cumsum(new_seq) - 1
    starts = np.flatnonzero(new_seq)
    pos = np.arange(len(order)) - starts[seq_id]           # position within its sequence
    chunk_of_seq = pos // seq_len
    new_chunk = new_seq | (pos % seq_len == 0)
    chunk = np.cumsum(new_chunk) - 1
    index = np.zeros((int(chunk[-1]) + 1, seq_len), np.int64)
    valid = np.zeros_like(index, bool)
    col = pos - chunk_of_seq * seq_len
    index[chunk, col] = order
    valid[chunk, col] = True
    return index, valid


def make_policy(obs_dim: int, action_space: gym.Space, hidden: Sequence[int] = (64, 64), activation: str = "tanh",
                init_log_std: float = 0.0, critic_dim: int | None = None,
                encoder: dict | None = None) -> "ActorCritic | RecurrentActorCritic":
    """The layer's policy for ``encoder`` (hierarchies.spec.encoder_spec): an ActorCritic (MLP,
    CNN), or a RecurrentActorCritic (``{"kind": "gru", "gru_hidden", "seq_len", "cnn"}``)."""
    if encoder and encoder.get("kind") == "gru":
        return RecurrentActorCritic(obs_dim, action_space, hidden, activation, init_log_std, critic_dim,
                                    encoder["gru_hidden"], encoder.get("cnn"))
    return ActorCritic(obs_dim, action_space, hidden, activation, init_log_std, critic_dim, encoder)
