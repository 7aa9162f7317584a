"""Errors a user can act on, owned by ``envs`` so that env code needs nothing from the runtime.

``hdppo.platform.errors`` re-exports these same classes (so ``except ConfigError`` catches
either import) and adds the runtime's own. The CLI prints their message as one paragraph and
exits non-zero.
"""
from __future__ import annotations

import contextlib
from typing import Iterator

__all__ = ["HdppoError", "ConfigError", "EnvError", "UserCodeError", "user_code", "user_code_error", "where_raised",
           "traceback_text"]


class HdppoError(Exception):
    """Base class: the message names the file, field or env and says what would fix it."""

    exit_code = 2


class ConfigError(HdppoError):
    """A config file or override that is missing, malformed or invalid."""


class EnvError(HdppoError):
    """An env that cannot be made, or whose outputs do not match its spaces."""


class UserCodeError(HdppoError):
    """A function the config names (a reward, an observation view, a teacher) raised: a bug in that
    function, the same on every worker, so the run stops instead of replacing workers."""


def user_code_error(label: str, path: str, exc: BaseException, called_as: str = "") -> UserCodeError:
    """A :class:`UserCodeError` for ``exc`` raised by the function at ``path`` (``module:function``)
    that the config field ``label`` names: the exception, where in the user's file it was raised
    (the deepest frame outside hdppo and the installed packages), and how the function is called."""
    # No frame of the user's: the function returned, and hdppo could not use what it returned.
    at = where_raised(exc)
    where = f" (at {at})" if at else " (on the value it returned)"
    return UserCodeError(f"{label} {path!r} raised {type(exc).__name__}: {exc}{where}. It is the function's own "
                         f"error, and it would fail the same on every worker, so the run stops.{called_as} Fix the "
                         "function and train again.")


def where_raised(exc: BaseException) -> str | None:
    """``FILE, line N, in NAME``: the deepest frame of ``exc`` outside hdppo's runtime and the
    installed packages (the user's env or function), None if there is none. An error from a Ray
    actor carries the actor's traceback as text, which is read the same way."""
    import os
    import re
    import traceback

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # hdppo's packages live below it
    ours = tuple(os.path.join(root, d) + os.sep for d in ("platform", "envs", "policies", "hierarchies"))
    builtin = os.path.join(root, "envs", "builtin") + os.sep               # the built-in envs count as env code

    def user(name: str) -> bool:
        return ((name.startswith(builtin) or not name.startswith(ours)) and "site-packages" not in name
                and os.sep + "lib" + os.sep + "python" not in name and not name.startswith("<"))

    remote = [(f, int(n), fn) for f, n, fn in re.findall(r'File "([^"]+)", line (\d+), in (\S+)', str(exc))]
    local = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(exc.__traceback__)]
    found = [f for f in remote if user(f[0])] or [f for f in local if user(f[0])]
    return f"{found[-1][0]}, line {found[-1][1]}, in {found[-1][2]}" if found else None


def traceback_text(exc: BaseException) -> str:
    """The whole traceback of ``exc`` as text: a Ray actor's error already carries the actor's (the
    worker's stack, the part worth reading), a local one is formatted here."""
    import traceback

    text = str(exc)
    if "Traceback (most recent call last)" in text:
        return text
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


@contextlib.contextmanager
def user_code(label: str, path: str, called_as: str = "") -> Iterator[None]:
    """Around a call into a function the config names (``label``: its field, ``path``: its name):
    an exception of its own stops the run as :func:`user_code_error` (the field, the function, the
    line in the user's file) instead of passing for a crashed worker to be replaced."""
    try:
        yield
    except HdppoError:
        raise
    except Exception as exc:  # noqa: BLE001 - any bug in the user's function: say whose and where
        raise user_code_error(label, path, exc, called_as) from exc
