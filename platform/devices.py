"""Where a learner runs: ``learner.device`` (``auto``, ``cpu`` or ``cuda``) resolved once, in the
driver, before the group starts its actors.

Only learners move: rollout workers act on small batches every env step, where a GPU's launch
latency costs more than the arithmetic, so they stay on CPU. A learner on CUDA keeps its
weights, optimizer and minibatches there and publishes CPU copies of its weights (workers and
checkpoints only ever see CPU tensors). On Ray it asks for ``learner.num_gpus`` of a GPU, so Ray
places it on a node with one and sets ``CUDA_VISIBLE_DEVICES`` for it.
"""
from __future__ import annotations

from .errors import ConfigError

def gpus_available(backend: str) -> float:
    """GPUs the learners could use: the whole Ray cluster's (``backend`` "ray", Ray initialised),
    or this process's (the local backend runs the learner here)."""
    if backend == "ray":
        import ray

        return float(ray.cluster_resources().get("GPU", 0.0))
    import torch

    return float(torch.cuda.device_count()) if torch.cuda.is_available() else 0.0


def devices_seen(backend: str) -> str:
    """Where GPUs were looked for, as a user would check it."""
    return ("the Ray cluster reports none, ray.cluster_resources()" if backend == "ray" else
            "torch in this process sees none, torch.cuda.is_available()")


def resolve_device(requested: str, backend: str, where: str) -> str:
    """``cpu`` or ``cuda`` for a learner that asked for ``requested``; ``where`` names the config
    field in the error when ``cuda`` is asked for and there is none."""
    if requested == "cpu":
        return "cpu"
    have = gpus_available(backend) > 0
    if requested == "auto":
        return "cuda" if have else "cpu"
    if not have:
        seen = ("the Ray cluster reports no GPU (ray.cluster_resources() has none)" if backend == "ray" else
                "torch in this process sees no CUDA device (torch.cuda.is_available() is False)")
        raise ConfigError(f"{where} is 'cuda', but {seen}. Set it to 'auto' (CUDA where there is one, else CPU) "
                          "or 'cpu'; or run where a GPU is visible, with a CUDA build of torch (the Makefile "
                          "installs the CPU one) and, on a cluster, `ray start --num-gpus=N` on a GPU node.")
    return "cuda"


def check_visible(device: str, where: str) -> None:
    """In the learner's own process: a CUDA device really is usable there (a node that Ray says
    has a GPU may have a CPU-only torch)."""
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{where} resolved to 'cuda', but torch in the learner's process sees no CUDA device "
                          f"(torch {torch.__version__}, CUDA build: {torch.version.cuda or 'no'}). Install a CUDA "
                          "build of torch on the GPU nodes, or set it to 'cpu'.")
