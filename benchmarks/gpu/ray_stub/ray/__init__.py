"""A stand-in for Ray on a GPU machine without it (benchmarks/gpu/check.sh): the real wheel (79 MB)
was over that machine's transfer limit, and these checks use hdppo's local backend only. Anything Ray-backed fails loudly."""
import types


class ObjectRef:  # never instantiated on the local backend
    pass


actor = types.SimpleNamespace(ActorHandle=type("ActorHandle", (), {}))


class _Exc(types.ModuleType):
    class RayError(Exception):
        pass

    class RayActorError(RayError):
        pass

    class GetTimeoutError(RayError):
        pass


exceptions = _Exc("ray.exceptions")
import sys as _sys
_sys.modules["ray.exceptions"] = exceptions


def is_initialized():
    return False


def _missing(*a, **k):
    raise RuntimeError("ray stub: this device check uses ray.backend=local only")


init = get = put = wait = remote = shutdown = kill = cluster_resources = available_resources = _missing
