"""Tensors as NumPy buffers for Ray's object store, and back.

Ray serialises a NumPy array as one out-of-band buffer, copied into the object store without the
GIL; a torch tensor goes through ``torch.save`` inside Ray's pickling, more than twice as slow (a
MinAtar CNN's 1 MB of weights: 2.9 ms against 1.2 ms per ``ray.put``, medians of 300 in a Ray
actor on this project's 2-core VM). So what a learner puts for others to read (its published
weights, its state snapshots) holds :class:`TensorArray` leaves, and :func:`restore_tensors` (which
``backend.deref`` applies to everything it fetches) turns them back into tensors.
"""
from __future__ import annotations

import copy
from typing import Any

import numpy as np
import torch


class TensorArray:
    """A CPU tensor's data as a NumPy array, in a tree a learner puts (see the module docstring).
    :func:`restore_tensors` turns it back into the tensor."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray):
        self.array = array

    def __reduce__(self) -> tuple:
        return (TensorArray, (self.array,))


def map_leaves(fn: Any, tree: Any) -> Any:
    """``tree`` (dicts, lists and tuples, nested) with ``fn`` applied to every other value."""
    if isinstance(tree, dict):
        return {k: map_leaves(fn, v) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(map_leaves(fn, v) for v in tree)
    return fn(tree)


def _copy_leaf(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.dtype == torch.bfloat16:  # NumPy has no bfloat16
            return t.clone()
        return TensorArray(np.array(t.numpy(), order="K"))  # its strides kept (a channels-last conv weight)
    return x.copy() if isinstance(x, np.ndarray) else copy.deepcopy(x)


def copied(tree: Any) -> Any:
    """A copy of a (nested) CPU state (:meth:`Learner.get_state`) that later in-place updates of
    the learner cannot change: tensors as :class:`TensorArray` (a bfloat16 one cloned), arrays
    copied, everything else deep-copied (it is small)."""
    return map_leaves(_copy_leaf, tree)


def restore_tensors(tree: Any) -> Any:
    """``tree`` with each :class:`TensorArray` a tensor again, in memory of its own (Ray hands
    arrays over read-only): a state snapshot as :meth:`Learner.get_state` gives it, published
    weights as ``load_state_dict`` takes them. Anything else passes through."""
    return map_leaves(lambda x: torch.from_numpy(np.array(x.array, order="K")) if isinstance(x, TensorArray) else x,
                       tree)


def on_cpu(tree: Any) -> Any:
    """Every tensor of a (nested) state dict on CPU; CPU tensors are returned as they are."""
    return map_leaves(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, tree)


def _buffer_leaf(x: Any) -> Any:
    return TensorArray(x.detach().numpy()) if isinstance(x, torch.Tensor) and x.dtype != torch.bfloat16 else x


def as_buffers(tree: Any) -> Any:
    """``tree`` with each float32 (or other NumPy-typed) CPU tensor wrapped as a
    :class:`TensorArray` sharing its memory: for a state the caller has already copied (so no
    later update can change it) and is about to ``put``. bfloat16 tensors stay tensors."""
    return map_leaves(_buffer_leaf, tree)
