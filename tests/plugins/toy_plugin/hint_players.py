"""Scripted student and teacher of the `toy_hint` tests (stub server scripts).

The student plays a toy task perfectly when it is even-numbered, or when a hint is in
its system prompt (but never task 5: no hint helps it); otherwise it ends every turn at
once ("Done.", a failure). The teacher answers every request with one fixed hint; its
`GATE_CALL`-th request, when $TOY_HINT_GATE names a folder, first writes `asked` there
and waits for `release` (so a test can kill the run while a teacher call is in flight).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from toy_plugin.bench import SPECS
from toy_plugin.hints import MARKER
from toy_plugin.players import replay

HINT = "Make every call the request names, one per step, then say Done."
GATE_CALL = 2
_teacher_calls = 0


def _task_index(messages: list[dict[str, Any]]) -> int | None:
    firsts = [spec.turns[0] for spec in SPECS]
    for message in messages:
        if message["role"] == "user" and message.get("content") in firsts:
            return firsts.index(message["content"])
    return None


def student(request: dict[str, Any]) -> dict[str, Any]:
    messages = request["messages"]
    index = _task_index(messages)
    if index is None:
        return {"content": "OK"}
    hinted = MARKER in str(messages[0].get("content"))
    if index % 2 == 0 or (hinted and index != 5):
        return replay(request)
    return {"content": "Done."}


def teacher(request: dict[str, Any]) -> dict[str, Any]:
    global _teacher_calls
    _teacher_calls += 1
    gate = os.environ.get("TOY_HINT_GATE")
    if gate and _teacher_calls == GATE_CALL:
        (Path(gate) / "asked").write_text("1")
        deadline = time.monotonic() + 300
        while not (Path(gate) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return {"content": HINT}
