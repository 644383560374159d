"""The MemP AppWorld port's loop hints (memory/repeats.py `LoopHints`, their
memp_student_react.py `_build_loop_hint`): which hint fires after which outputs, the
hint appended after the step's output by the memp_amd hooks, counted, on in the paper
runs' entry only."""

from __future__ import annotations

import asyncio
from typing import Any

from distillery.workers.envs.base import Task, ToolResult
from distillery.workers.memory import repeats
from distillery.workers.memory.registry import memory_method

FAILED = "Execution failed. Traceback:\n  File ...\nException: No spotify account for x.\n"
HTTP = "Execution failed. Traceback:\nException: Response status code is 401:\nUnauthorized"


def _run(steps: list[tuple[str, str]]) -> list[str | None]:
    hints = repeats.LoopHints()
    out = []
    for code, output in steps:
        hint = hints.after_step([ToolResult(call=f"execute(code={code!r})", content=output)])
        out.append(None if hint is None else hint.text)
    return out


def test_error_signature():
    assert repeats.error_signature("all good") is None
    assert repeats.error_signature(HTTP) == "status code is 401:"
    assert repeats.error_signature(FAILED) == "Exception: No spotify account for x."
    assert repeats.error_signature("Traceback\nbad") == "Traceback\nbad"[:120]


def test_which_hint_fires():
    ok = "[1, 2]"
    # The same code three times, succeeding: the same-code hint, on the third and after.
    same_code = repeats.SAME_CODE.format(times=3, error=None)
    assert _run([("a", ok)] * 4) == [None, None, same_code, same_code]
    # The same code failing the same way: the critical hint, naming the error.
    critical = repeats.SAME_CODE_AND_ERROR.format(times=3, error="status code is 401:")
    assert _run([("a", HTTP)] * 3)[-1] == critical
    # Different code, the same error three times.
    same_error = repeats.SAME_ERROR.format(times=3, error="status code is 401:")
    assert _run([("a", HTTP), ("b", HTTP), ("c", HTTP)]) == [None, None, same_error]
    # Failures in a row with different errors: the milder hint, sharper from six on.
    errors = [(f"c{i}", f"Execution failed.\nError: e{i}") for i in range(6)]
    assert _run(errors) == [None, None, *[repeats.FAILING] * 3, repeats.FAILING_AGAIN]
    # A success clears the streak and the errors.
    assert _run([("a", HTTP), ("b", HTTP), ("c", ok), ("d", HTTP)]) == [None] * 4


def _hooks(entry: str) -> Any:
    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config

    cfg = to_config(compose(["experiment=appworld_table1"]))
    spec = cfg.method_catalog[entry]
    method = memory_method(spec.kind)
    settings = method.settings({}, dict(spec.retrieval or {}), None)
    task = Task("t", "appworld", ("x",), (), ())
    return method, settings, method.hooks(task, None, settings, lambda s: True, _no_model)


async def _no_model(messages: list[dict[str, Any]]) -> Any:
    raise AssertionError("no model is asked here")


def test_the_appworld_port_appends_its_hints_after_the_output_and_counts_them():
    method, settings, hooks = _hooks("memp_amd_appworld")
    assert (
        settings.loop_hints is True
        and "no_loop_hints" not in method.tags(settings, "x")["differences"]
    )
    ran = [ToolResult(call="execute(code='a')", content="ok")]
    got = [asyncio.run(hooks.step_messages(0, n, "reply", ran)) for n in (1, 2, 3)]
    assert got[0] is None and got[1] is None
    assert [m.text for m in got[2].appended] == [repeats.SAME_CODE.format(times=3, error=None)]
    assert asyncio.run(hooks.step_messages(0, 0, None, [])) is None  # a turn's start
    assert hooks.record()["loop_hints"] == {"same_code": 1}
    assert method.read_identity(settings)["loop_hints"] is True


def test_without_the_setting_nothing_is_added_and_the_identity_is_as_before():
    method = memory_method("memp_amd")
    settings = method.settings({}, {}, None)  # memp_amd_toolsandbox's
    identity = method.read_identity(settings)
    assert "loop_hints" not in identity
    assert "no_loop_hints" in method.tags(settings, "x")["differences"]
    hooks: Any = method.hooks(Task("t", "toolsandbox", ("x",), (), ()), None, settings,
                              lambda s: True, _no_model)  # fmt: skip
    ran = [ToolResult(call="f()", content="Traceback")]
    assert all(asyncio.run(hooks.step_messages(0, n, "r", ran)) is None for n in (1, 2, 3, 4))
    assert "loop_hints" not in hooks.record()
