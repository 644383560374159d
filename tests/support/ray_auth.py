"""Switching a test process between Ray clusters with different token settings.

Ray reads `RAY_AUTH_MODE` and the token once per process into its C++ config and
token cache (and a private `ray.init()` itself sets `RAY_AUTH_MODE=token` and writes
~/.ray/auth_token). A test that joins a cluster with a token of its own must therefore
refresh both after changing the variables, and again after restoring them; otherwise
every later `ray.init()` in the same pytest process fails with InvalidAuthToken.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def _refresh_ray_auth_state() -> None:
    # What Ray's own tests do after changing these variables (config first, then the
    # token cache, so a draining gRPC thread never sees token mode without a token).
    from ray._raylet import AuthenticationTokenLoader, Config

    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


@contextmanager
def ray_auth_env(env: dict[str, str]) -> Iterator[None]:
    """Set `env` (token auth variables and any others) for this process while inside,
    then put every variable back as it was, with Ray's cached auth state refreshed."""
    names = set(env) | set(AUTH_VARIABLES)
    saved = {name: os.environ.get(name) for name in names}
    for name in AUTH_VARIABLES:
        if name not in env:
            os.environ.pop(name, None)
    os.environ.update(env)
    _refresh_ray_auth_state()
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _refresh_ray_auth_state()
