"""The simulated servers' replies in a BFCL rehearsal: a perfect agent (bfcl_scripts'
replay_native) for every request that carries tools, also where a memory method put
its memory into the user message (MemP, for one, appends it to the task's turn: the task
is then found by the turn the message starts with); every other prompt (a memory
builder's) gets a plain text the builders reject, so their deterministic fallback
writes the notes (distillery.testing.scripts.agent_or_builder)."""

from __future__ import annotations

from typing import Any

from distillery.testing.bfcl_scripts import _tasks_by_first_turn, is_observation, replay_native
from distillery.testing.scripts import always_text


def any_role(request: dict[str, Any]) -> dict[str, Any]:
    if not request.get("tools"):
        return always_text(request)
    try:
        return replay_native(request)
    except (KeyError, IndexError):  # no task starts exactly so: memory in the message
        return replay_native({**request, "messages": _task_turns(request["messages"])})


def _task_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with each user turn cut back to the task's own turn text."""
    users = [m for m in messages if m["role"] == "user" and not is_observation(m)]
    first = str(users[0].get("content") or "")
    starts = [turn for turn in _tasks_by_first_turn() if first.startswith(turn)]
    if not starts:
        raise KeyError("no BFCL task's first turn starts this conversation")
    (task, _), *_ = _tasks_by_first_turn()[max(starts, key=len)]
    out, index = [], 0
    for message in messages:
        if message in users and index < len(task.turns):
            content = str(message.get("content") or "")
            if content.startswith(task.turns[index]):
                message = {**message, "content": task.turns[index]}
            index += 1
        out.append(message)
    return out
