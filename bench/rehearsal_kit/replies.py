"""The simulated servers' replies in a BFCL rehearsal: a perfect agent (bfcl_scripts'
replay_native) for every request that carries tools, also where a memory method put
its memory into the user message (MemP, for one, appends it to the task's turn: the task
is then found by the turn the message starts with); every other prompt (a memory
builder's) gets a plain text the builders reject, so their deterministic fallback
writes the notes (distillery.testing.scripts.agent_or_builder)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
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


# GSM8K (agentbrew_table1_gsm8k): the data folder the sweep reads, named in the servers'
# environment (set before the Ray nodes start; they inherit it).
GSM8K_DATA_ENV = "REHEARSAL_GSM8K_DATA"


@functools.cache
def _gsm8k_solutions() -> dict[str, str]:
    folder = Path(os.environ[GSM8K_DATA_ENV])
    out = {}
    for name in ("train.jsonl", "test.jsonl"):
        for line in (folder / name).read_text().splitlines():
            row = json.loads(line)
            out[row["question"]] = row["answer"]
    return out


def gsm8k_any_role(request: dict[str, Any]) -> dict[str, Any]:
    """A GSM8K student that solves about 70 % of the problems on every play (the worked
    solution; the others a wrong one, so Reflexion re-plays and the brew asks its
    teacher), AgentBrew's curator (bench's agentbrew_scripts.curator), and a plain text
    for every other prompt (the builders' and the teacher's notes fail their
    validation and are counted so: their calls are made and timed)."""
    messages = request.get("messages") or []
    first = str(messages[0].get("content") or "") if messages else ""
    if first.startswith("You curate"):
        from distillery.testing.agentbrew_scripts import curator

        with contextlib.suppress(Exception):
            return curator(request)
        return always_text(request)
    users = [str(m.get("content") or "") for m in messages if m.get("role") == "user"]
    if not users:
        return always_text(request)
    solutions = _gsm8k_solutions()
    question = next((q for q in solutions if q in users[0]), None)
    if question is None:
        return always_text(request)
    digest = hashlib.blake2b(question.encode(), digest_size=2).digest()
    if int.from_bytes(digest) % 10 < 7:
        return {"content": solutions[question]}
    return {"content": "I add the numbers.\n#### 0"}
