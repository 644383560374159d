"""What escapes AppWorld's own interpreter while it runs the model's code (protocol 2):
the call's failure, an observation, never an infrastructure error. In a real episode a
program's `raise KeyboardInterrupt` got past `AppWorld.execute` and killed the worker
(retried, then left unscored); printing a lone surrogate made `execute` raise. The real
world module's `step` runs here behind the real server's request handling, with an
`AppWorld` whose `execute` raises as those did (AppWorld itself is not needed)."""

from __future__ import annotations

import pytest

from distillery.workers.envs.appworld import world as module
from distillery.workers.envs.isolated import server
from distillery.workers.envs.isolated.server import NOT_RUN


class _RaisingAppWorld:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def task_completed(self) -> bool:
        return False

    def execute(self, code: str) -> str:
        raise self.exc


def _execute(code: str) -> dict:
    return {"name": "execute", "args": [], "kwargs": {"code": code}, "call_id": None, "source": ""}


@pytest.mark.parametrize(
    "exc",
    [KeyboardInterrupt(), UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed")],
)
def test_what_escapes_appworlds_interpreter_is_the_calls_failure(exc):
    handler = server._Server(module)
    world = object.__new__(module.World)  # its AppWorld replaced: no data, no venv
    world.world = _RaisingAppWorld(exc)
    handler.world = world
    try:
        failed, after = handler.handle("step", {"calls": [_execute("x"), _execute("y")]})
    except BaseException as escaped:  # noqa: BLE001 - in the worker, this ended the process
        pytest.fail(f"{type(escaped).__name__} escaped the world's step: an infra error")
    assert failed["failed"] is True and type(exc).__name__ in failed["error"]
    assert failed["content"].startswith("Error: CallFailed: AppWorld could not run the code")
    assert after["content"] == NOT_RUN
