"""A module's parameters as views of one flat buffer: an optimizer step in a handful of operators.

A PPO learner on CPU makes hundreds of optimizer steps per update on small networks, where each
step's cost is torch's per-call overhead rather than its maths: ``clip_grad_norm_`` and a fused
``Adam.step`` over a dozen parameter tensors took ~150-340 us per minibatch (a 64x64 actor and
critic), a fifth of the whole step. Over one flat tensor the same maths is one concatenation,
one norm, one scale and one fused Adam kernel (~60 us): the same Adam (the update of each element
depends on that element's gradient and moments only) and the same clipping (one norm over every
element). See ``benchmarks/learner_device.py`` for the update times.

The parameters stay ordinary leaf ``nn.Parameter`` s (autograd, ``state_dict`` and
``load_state_dict`` see no difference); only their storage moves into the buffer, once, after
the module is on its device. Whatever later replaces a parameter's storage (``.to(device)``,
``.data =``, ``load_state_dict(assign=True)``) would cut it loose from the buffer:
:meth:`FlatParameters.check` says so.

Checkpoints keep the per-parameter optimizer state that ``torch.optim.Adam`` over the separate
tensors writes (:meth:`per_parameter_state`, :meth:`flat_state`), so runs saved before and after
this change resume from each other.
"""
from __future__ import annotations

from typing import Sequence

import torch


class FlatParameters:
    """``params`` made views of one contiguous buffer, :attr:`param` (an ``nn.Parameter`` over
    that buffer, for the optimizer)."""

    def __init__(self, params: Sequence[torch.Tensor]):
        if not params:
            raise ValueError("FlatParameters: no parameters to flatten")
        self.params = list(params)
        self.shapes = [p.shape for p in self.params]
        self.numels = [p.numel() for p in self.params]
        with torch.no_grad():
            buf = torch.cat([p.detach().reshape(-1) for p in self.params])
        for p, view in zip(self.params, buf.split(self.numels)):
            p.data = view.view(p.shape)
        self.param = torch.nn.Parameter(buf)

    def check(self) -> None:
        """Raise if a parameter no longer lives in the buffer (its storage was replaced)."""
        base, size = self.param.data_ptr(), self.param.element_size()
        offset = 0
        for i, (p, n) in enumerate(zip(self.params, self.numels)):
            if p.data_ptr() != base + offset * size or not p.is_contiguous():
                raise RuntimeError(f"parameter {i} {tuple(p.shape)} no longer lives in the flat buffer (its storage "
                                   "was replaced after FlatParameters flattened it): the optimizer would not update "
                                   "it. Load weights in place (load_state_dict without assign=True).")
            offset += n

    def gather(self, grads: Sequence[torch.Tensor]) -> torch.Tensor:
        """One flat gradient (a new tensor on the buffer's device, the callers' left untouched), in
        the parameters' order; each gradient read in its logical order whatever its strides."""
        device = self.param.device
        return torch.cat([g.reshape(-1).to(device) for g in grads])

    def split(self, flat: torch.Tensor) -> list[torch.Tensor]:
        """``flat`` (laid out as the buffer) as one view per parameter, in their shapes."""
        return [v.view(shape) for v, shape in zip(flat.split(self.numels), self.shapes)]

    # -- optimizer state in the per-parameter layout -------------------------------------------
    def per_parameter_state(self, state: dict) -> dict:
        """An optimizer ``state_dict`` over :attr:`param` as the same optimizer over the separate
        parameters would have written it (each tensor of ``numel`` elements split per parameter,
        copies; scalars such as Adam's step repeated)."""
        flat_state = state["state"].get(0, {})
        per: dict[int, dict] = {}
        if flat_state:
            for i in range(len(self.params)):
                per[i] = {}
            for key, value in flat_state.items():
                tensor = isinstance(value, torch.Tensor) and value.dim() == 1 and value.numel() == self.param.numel()
                for i, part in enumerate(self.split(value) if tensor else [value] * len(self.params)):
                    per[i][key] = part.clone() if isinstance(part, torch.Tensor) else part
        groups = [dict(g, params=list(range(len(self.params)))) for g in state["param_groups"]]
        return {"state": per, "param_groups": groups}

    def flat_state(self, state: dict) -> dict:
        """The inverse of :meth:`per_parameter_state`: a per-parameter optimizer ``state_dict`` (one
        param group over every parameter, as the learner builds it) over :attr:`param`. A parameter
        without state (never stepped) gets zeros; its scalars are taken from the first that has."""
        per = state["state"]
        if len(state["param_groups"]) != 1 or len(state["param_groups"][0]["params"]) != len(self.params):
            raise ValueError(f"optimizer state of {sum(len(g['params']) for g in state['param_groups'])} parameters in "
                             f"{len(state['param_groups'])} groups; this policy has {len(self.params)} in one group "
                             "(was the checkpoint saved by another network?)")
        entries = [per.get(pid) for pid in state["param_groups"][0]["params"]]
        j = next((i for i, e in enumerate(entries) if e), None)
        flat: dict = {}
        for key, value in (entries[j] if j is not None else {}).items():
            if isinstance(value, torch.Tensor) and value.shape == self.shapes[j]:  # one value per element
                flat[key] = torch.cat([(e[key] if e else torch.zeros(s, dtype=value.dtype, device=value.device))
                                       .reshape(-1) for e, s in zip(entries, self.shapes)])
            else:  # a scalar shared by every parameter (Adam's step)
                flat[key] = value.clone() if isinstance(value, torch.Tensor) else value
        groups = [dict(state["param_groups"][0], params=[0])]
        return {"state": {0: flat} if flat else {}, "param_groups": groups}


def clip_grad_norm_(grad: torch.Tensor, max_norm: float) -> torch.Tensor:
    """``torch.nn.utils.clip_grad_norm_`` on one flat gradient: scale it in place by
    ``min(1, max_norm / (norm + 1e-6))``; returns the norm before clipping."""
    norm = torch.linalg.vector_norm(grad)
    grad.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    return norm
