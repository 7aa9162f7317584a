"""Gradient compression with error feedback, as pure functions of tensors.

A worker's gradients (one tensor per parameter) are flattened into one vector, the residual
left over from its previous message is added (error feedback, Seide et al. 2014 for 1-bit SGD;
Karimireddy et al. 2019, arXiv:1901.09847, for why it keeps SGD convergent), and the sum is
quantised:

- ``sign1``: 1 bit per value, the sign, times one scale (mean |g|);
- ``q2``: 2 bits per value, 4 levels evenly spaced in [-max|g|, max|g|];
- ``q8``: 8 bits per value, 256 levels evenly spaced in [-max|g|, max|g|].

Codes are packed into bytes. What the quantiser lost becomes the next residual.
"""
from __future__ import annotations

import struct

import numpy as np
import torch

BITS = {"sign1": 1, "q2": 2, "q8": 8}


_HEADER = struct.Struct("<BIf")  # scheme id, number of values, scale
_IDS = {name: i for i, name in enumerate(BITS)}
_NAMES = {i: name for name, i in _IDS.items()}


def _encode(scheme: str, numel: int, scale: float, codes: np.ndarray) -> bytes:
    """One flat message: a 9-byte header and the packed codes (shapes are known to both ends)."""
    return _HEADER.pack(_IDS[scheme], numel, scale) + codes.tobytes()


def flatten(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([g.reshape(-1) for g in grads]).to(torch.float32)


def unflatten(flat: torch.Tensor, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    out, offset = [], 0
    for shape in shapes:
        n = int(np.prod(shape)) if shape else 1
        out.append(flat[offset:offset + n].reshape(shape))
        offset += n
    return out


def _pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Little-endian bit packing of codes < 2**bits into bytes."""
    if bits == 8:
        return codes.astype(np.uint8)
    per = 8 // bits
    padded = np.zeros(-(-len(codes) // per) * per, np.uint8)
    padded[: len(codes)] = codes
    grouped = padded.reshape(-1, per).astype(np.uint16)
    shifts = (np.arange(per) * bits).astype(np.uint16)
    return (grouped << shifts).sum(axis=1).astype(np.uint8)


def _unpack(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    if bits == 8:
        return packed[:n]
    per = 8 // bits
    shifts = (np.arange(per) * bits).astype(np.uint8)
    codes = (packed[:, None] >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:n]


def compress(grads: list[torch.Tensor], scheme: str, residual: torch.Tensor | None) -> tuple[bytes, torch.Tensor]:
    """``(message, new residual)`` for ``grads`` plus the previous ``residual`` (or None)."""
    bits = BITS[scheme]
    g = flatten(grads)
    if residual is not None:
        g = g + residual
    x = g.numpy().astype(np.float64)
    if scheme == "sign1":
        scale = float(np.abs(x).mean())
        codes = (x >= 0).astype(np.uint8)
    else:
        scale = float(np.abs(x).max())
        levels = (1 << bits) - 1
        unit = (x / scale + 1.0) / 2.0 if scale > 0 else np.full_like(x, 0.5)
        codes = np.clip(np.rint(unit * levels), 0, levels).astype(np.uint8)
    msg = _encode(scheme, int(g.numel()), scale, _pack(codes, bits))
    return msg, g - flatten(decompress(msg, [tuple(t.shape) for t in grads]))


def decompress(msg: bytes, shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    """The gradients (one tensor per shape) that ``msg`` encodes."""
    scheme_id, numel, scale = _HEADER.unpack_from(msg)
    scheme = _NAMES[scheme_id]
    bits = BITS[scheme]
    codes = _unpack(np.frombuffer(msg, np.uint8, offset=_HEADER.size), bits, numel).astype(np.float64)
    if scheme == "sign1":
        values = (2.0 * codes - 1.0) * scale
    else:
        levels = (1 << bits) - 1
        values = (codes / levels * 2.0 - 1.0) * scale
    return unflatten(torch.as_tensor(values, dtype=torch.float32), shapes)


def payload_nbytes(msg: bytes) -> int:
    return len(msg)


def dense_nbytes(grads: list[torch.Tensor]) -> int:
    """Payload bytes of the same gradients sent as float32."""
    return int(sum(4 * g.numel() for g in grads))


def wire_nbytes(obj: object) -> int:
    """Bytes of ``obj`` as serialised for sending (pickle protocol 5, as Ray uses): the honest
    figure for what a message costs, framing included."""
    import pickle

    return len(pickle.dumps(obj, protocol=5))
