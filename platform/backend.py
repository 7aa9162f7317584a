"""Execution backends, chosen by one switch (``ray.backend``): Ray actors, or plain objects in
this process. The group and trainer are written once against this small interface, so a test
or a debugger can step through a whole update without a cluster."""
from __future__ import annotations

from typing import Any

import ray

from .tensor_buffers import restore_tensors


def deref(obj: Any) -> Any:
    """The value behind an object reference (Ray), or the object itself (local, or a reference
    Ray resolved as a task's argument), with the NumPy buffers a learner puts made tensors again
    (tensor_buffers)."""
    return restore_tensors(ray.get(obj) if isinstance(obj, ray.ObjectRef) else obj)


def call_service(service: Any, method: str, *args: Any, wait: bool = True) -> Any:
    """Call the parameter service whether it is a Ray actor handle or a local object. With a Ray
    handle and ``wait=False``, the answer's reference, for :func:`deref` to wait on later."""
    if isinstance(service, ray.actor.ActorHandle):
        ref = getattr(service, method).remote(*args)
        return ray.get(ref) if wait else ref
    return getattr(service, method)(*args)


def concurrency_group(name: str) -> Any:
    """Mark an actor method to run in concurrency group ``name`` (on a thread of its own, beside
    the methods of the default group, which still run one at a time and in order). The class
    lists its groups in ``CONCURRENCY_GROUPS``; in-process the mark does nothing."""
    return ray.method(concurrency_group=name)


class Failed:
    """A call that raised, kept until someone asks for its result (the local backend's future)."""

    def __init__(self, error: BaseException):
        self.error = error


class LocalBackend:
    """Everything runs in this process, in order. Calls return values, not futures."""

    name = "local"
    concurrent = False  # a call has run by the time it returns: nothing is gained by queueing more

    def make(self, cls: type, *args: Any, num_cpus: float | None = None, name: str | None = None,
             num_gpus: float | None = None) -> Any:
        return cls(*args)

    def call(self, handle: Any, method: str, *args: Any) -> Any:
        if any(isinstance(a, Failed) for a in args):
            return next(a for a in args if isinstance(a, Failed))
        try:
            return getattr(handle, method)(*args)
        except Exception as exc:  # noqa: BLE001 - re-raised by get(), or reported by outcomes()
            return Failed(exc)

    def get(self, futures: Any) -> Any:
        for f in futures if isinstance(futures, list) else [futures]:
            if isinstance(f, Failed):
                raise f.error
        return futures

    def outcomes(self, futures: list) -> list[Any]:
        """Each result, or the exception its call raised."""
        return [f.error if isinstance(f, Failed) else f for f in futures]

    def wait_all(self, futures: list, timeout: float | None = None) -> bool:
        return True

    def ready(self, futures: list) -> list[int]:
        """Positions of the calls that have finished (here: all of them, calls run eagerly)."""
        return list(range(len(futures)))

    def free_cpus(self) -> float:
        return float("inf")

    def put(self, obj: Any) -> Any:
        return obj

    def kill(self, handle: Any) -> None:
        return None


class RayBackend:
    """Each object is a Ray actor declaring ``num_cpus`` (and ``num_gpus``, a CUDA learner);
    calls return object references."""

    name = "ray"
    concurrent = True  # calls run in their actors while the driver goes on; an actor runs its calls in order

    def make(self, cls: type, *args: Any, num_cpus: float | None = None, name: str | None = None,
             num_gpus: float | None = None) -> Any:
        opts: dict[str, Any] = {"num_cpus": num_cpus if num_cpus is not None else 1}
        if num_gpus:
            opts["num_gpus"] = num_gpus
        if name:
            opts["name"] = name
        groups = getattr(cls, "CONCURRENCY_GROUPS", None)  # Ray takes them at decoration, not in options()
        remote = ray.remote(concurrency_groups=groups)(cls) if groups else ray.remote(cls)
        return remote.options(**opts).remote(*args)

    def call(self, handle: Any, method: str, *args: Any) -> Any:
        return getattr(handle, method).remote(*args)

    def get(self, futures: Any) -> Any:
        return ray.get(futures)

    def outcomes(self, futures: list) -> list[Any]:
        """Each result, or the exception its task raised (a dead actor included)."""
        out: list[Any] = []
        for f in futures:
            try:
                out.append(ray.get(f))
            except (ray.exceptions.RayError, Exception) as exc:  # noqa: BLE001 - reported to the caller
                out.append(exc)
        return out

    def wait_all(self, futures: list, timeout: float | None = None) -> bool:
        """Wait without pulling the objects to this process; False if ``timeout`` ran out."""
        ready, _ = ray.wait(futures, num_returns=len(futures), fetch_local=False, timeout=timeout)
        return len(ready) == len(futures)

    def ready(self, futures: list) -> list[int]:
        """Positions of the calls that have finished; blocks until at least one has."""
        first, _ = ray.wait(futures, num_returns=1, fetch_local=False)
        done, _ = ray.wait(futures, num_returns=len(futures), timeout=0, fetch_local=False)
        done_ids = {ref for ref in [*first, *done]}
        return [i for i, f in enumerate(futures) if f in done_ids]

    def free_cpus(self) -> float:
        """CPUs no actor has claimed yet, over the whole cluster; none inside a placement group
        (a sweep trial): its bundles were sized for the pool it started with, and a worker
        beyond them would wait for CPUs forever."""
        from ray.util import get_current_placement_group

        if get_current_placement_group() is not None:
            return 0.0
        return float(ray.available_resources().get("CPU", 0.0))

    def put(self, obj: Any) -> Any:
        return ray.put(obj)

    def kill(self, handle: Any) -> None:
        ray.kill(handle)


def make_backend(name: str) -> LocalBackend | RayBackend:
    return RayBackend() if name == "ray" else LocalBackend()
