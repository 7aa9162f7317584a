"""Joining a Ray cluster that uses token authentication (Ray >= 2.52).

A head started with ``ray start --head`` enables token authentication when a token exists on it
(``~/.ray/auth_token``; Ray 2.59 made that the default for local clusters). A client then has to
send the same token, and Ray only does that when ``RAY_AUTH_MODE=token`` is set in the client's
environment: ``ray.init`` turns it on by itself for ``address="auto"`` when a token is found, never
for an explicit ``host:port``. Without it the driver retries for about twenty seconds, printing
``InvalidAuthToken`` lines, and gives up with "Failed to connect to Ray cluster".

So before joining an explicit address, :func:`match_auth_mode` asks the GCS once whether it takes
this process as it is; only when it refuses, and a token is available here, does it set
``RAY_AUTH_MODE=token``. The mode must equal the cluster's, not merely carry a token: against a
cluster without authentication a driver in token mode connects, but its actors die before they
start (seen on Ray 2.60 with ``ray.cluster_utils.Cluster``; the workers, which send no token, are
presumably refused when they call back into the driver). :func:`refused` then
asks once more, so that a missing or wrong token is reported in a second, by :func:`auth_error`,
instead of after the retries. hdppo never turns authentication off: a mode the user set is kept.

Token sources and their order are Ray's
(https://docs.ray.io/en/master/ray-core/internals/token-authentication.html): ``RAY_AUTH_TOKEN``,
then the file ``RAY_AUTH_TOKEN_PATH`` names, then ``~/.ray/auth_token``.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import RayStartError

MODE_VAR = "RAY_AUTH_MODE"
DEFAULT_TOKEN_FILE = "~/.ray/auth_token"

HOW_TO_GET = ("Get the head's token by running `ray get-auth-token` on the head node, then either export it here "
              "as RAY_AUTH_TOKEN=<token> or save it in ~/.ray/auth_token (copy the head's ~/.ray/auth_token file; "
              "RAY_AUTH_TOKEN_PATH may name another file). Every other node needs it too, and RAY_AUTH_MODE=token "
              "when it runs `ray start --address`.")


def token_source() -> str | None:
    """Where Ray would read this process's token from, in words; None when there is none.

    A ``RAY_AUTH_TOKEN_PATH`` that cannot be read is an error here: Ray aborts the process on it.
    """
    if os.environ.get("RAY_AUTH_TOKEN", "").strip():
        return "the RAY_AUTH_TOKEN environment variable"
    named = os.environ.get("RAY_AUTH_TOKEN_PATH")
    if named:
        try:
            text = Path(named).expanduser().read_text().strip()
        except OSError as exc:
            raise RayStartError(f"RAY_AUTH_TOKEN_PATH names {named}, which cannot be read ({exc.strerror or exc}). "
                                f"Point it at the file that holds the cluster's token, or unset it. {HOW_TO_GET}") from None
        if not text:
            raise RayStartError(f"RAY_AUTH_TOKEN_PATH names {named}, which is empty. {HOW_TO_GET}")
        return f"the file RAY_AUTH_TOKEN_PATH names ({named})"
    default = Path(DEFAULT_TOKEN_FILE).expanduser()
    try:
        if default.read_text().strip():
            return f"{default}"
    except OSError:
        pass
    return None


def match_auth_mode(address: str) -> str:
    """Set this process's auth mode to the cluster's at ``address`` (host:port), as far as a token
    here allows; returns the mode now in force ('token', 'disabled', or what the user set)."""
    mode = os.environ.get(MODE_VAR)
    if mode is not None:
        return mode.lower()
    if token_source() is None or refused(address) is None:
        return "disabled"  # nothing to send (auth_error says so if needed), or taken as we are (or it cannot tell)
    os.environ[MODE_VAR] = "token"
    _refresh_ray_config()
    return "token"


def _refresh_ray_config() -> None:
    """Ray caches its config (the auth mode among it) in the C++ core once read; re-read it, as
    ``ray._private.authentication.authentication_token_setup._enable_token_auth`` does. Private
    API, so checked: without it the mode is still set for ``ray.init`` to pick up where it can."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()  # a token looked up earlier in this process
    except (ImportError, AttributeError):
        pass


def is_auth_failure(exc: BaseException | None) -> bool:
    """Whether an error from ``ray.init`` (or anything it wraps) is the cluster refusing our token."""
    from ray.exceptions import AuthenticationError

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, AuthenticationError) or "InvalidAuthToken" in str(exc):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def refused(address: str) -> BaseException | None:
    """Ask the GCS at ``address`` once whether it accepts this process's token: the
    authentication error if it refuses, else None (also when it cannot tell: ``ray.init`` then
    says what is wrong). ``ray.init`` itself would retry for twenty seconds.

    Uses ``ray._raylet.GcsClient`` (private, as ``ray status`` uses it): any other failure, or the
    class missing, is not taken as an answer.
    """
    try:
        from ray._raylet import GcsClient
    except ImportError:
        return None
    try:
        GcsClient(address=address)
    except Exception as exc:  # noqa: BLE001 - only an authentication failure is an answer
        return exc if is_auth_failure(exc) else None
    return None


def auth_error(address: str, mode: str, log: Path | None) -> RayStartError:
    """The one paragraph for a cluster that refused us: what is missing or wrong, and the fix."""
    source = token_source() if mode == "token" else None
    where = f"the Ray cluster at {address!r} uses token authentication"
    if mode not in ("token", "disabled") or (mode == "disabled" and os.environ.get(MODE_VAR) is not None):
        what = (f"{where}, but {MODE_VAR}={os.environ.get(MODE_VAR)} is set here. Unset it (hdppo then sends the "
                f"token it finds) or set {MODE_VAR}=token, with the head's token available here.")
    elif source is None:
        what = (f"{where} and no token was found here (RAY_AUTH_TOKEN and RAY_AUTH_TOKEN_PATH are unset and "
                f"{Path(DEFAULT_TOKEN_FILE).expanduser()} does not exist).")
    else:
        what = f"{where} and refused the token from {source}: it is not the head's token."
    tail = f" Ray's connection log: {log}." if log is not None else ""
    return RayStartError(f"{what} {HOW_TO_GET} (The address is right: the cluster answered there.){tail}")
