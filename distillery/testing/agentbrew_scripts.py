"""Scripted AgentBrew players on BFCL for the stub server (scripted_server.py): a student
that succeeds only with the right note in its prompt, a JSON teacher and a curator
(tests/workers/memory/agentbrew/test_agentbrew_end_to_end.py, bench/brew.py).

- `student`: a task whose index is in `EASY` is solved on every play (BFCL's prompt
  format, the ground truth call by call). Any other task is solved only when the
  request shows the note written for its group of classes (`note_key(task)`, as the
  student's block renders it: "Note 1 (use-gorillafilesystem)"); otherwise it makes the
  task's first ground-truth call and gives up (a failure the checker scores).
- `teacher`: plays a BFCL task perfectly when asked to (a collect stage: AMD's); answers
  "OK" to another method's builder prompts (AMD's builders fall back, counted); else
  reads the task from AgentBrew's prompt and answers one valid note for its
  group (scope `bfcl_multi_turn`); with $AGENTBREW_GATE naming a folder, its
  `GATE_CALL`-th request first writes `asked` there and waits for `release` (so a test
  can kill a brew while a teacher call is in flight).
- `curator` (the teacher's server answers it too): "add" for a candidate whose key no listed note has, "merge" into the one
  that has it.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

from distillery.testing.bfcl_scripts import (
    _position,
    _tasks_by_first_turn,
    is_observation,
    replay_native,
    replay_text,
)

EASY = frozenset({0, 3, 4, 8})  # solved without a note (by task index)
GATE_CALL = 2
_teacher_calls = 0


def note_key(group: str) -> str:
    return "use-" + re.sub(r"[^a-z0-9]+", "-", group.lower()).strip("-")


def _index(task_id: str) -> int:
    return int(task_id.rsplit("_", 1)[1])


def student(request: dict[str, Any]) -> dict[str, Any]:
    messages = request["messages"]
    users = [m for m in messages if m["role"] == "user" and not is_observation(m)]
    if not users or users[0]["content"] not in _tasks_by_first_turn():
        return {"content": "OK"}
    task, truth, turn, made = _position(messages)
    shown = " ".join(str(m.get("content")) for m in messages if m["role"] == "system")
    solved = _index(task.task_id) in EASY or f"({note_key(task.group_id)})" in shown
    if solved:
        calls = truth[turn]
        if made < len(calls):
            return {"content": f"[{calls[made]}]"}
        return {"content": "I have completed the request."}
    if turn == 0 and made == 0 and truth[0]:
        return {"content": f"[{truth[0][0]}]"}
    return {"content": "Sorry, I cannot complete this request."}


def _task_of(prompt: str) -> Any:
    found = re.search(r"The task:\n<<<\n(.*?)\n>>>", prompt, re.DOTALL)
    if found is None:
        return None
    first = found.group(1).split("\n\nTurn 2: ", 1)[0].removeprefix("Turn 1: ")
    candidates = _tasks_by_first_turn().get(first)
    return candidates[0][0] if candidates else None


def teacher(request: dict[str, Any]) -> dict[str, Any]:
    """The teacher, and the curator where the brew's curator is the teacher's model (the
    default): a curator's request is answered by `curator`."""
    global _teacher_calls
    first = str(request["messages"][0].get("content"))
    if first.startswith("You curate"):
        return curator(request)
    users = [m for m in request["messages"] if m["role"] == "user" and not is_observation(m)]
    if users and users[0]["content"] in _tasks_by_first_turn():  # the teacher plays a task
        return replay_native(request) if request.get("tools") else replay_text(request)
    if "The task:\n<<<" not in first:  # another method's builder (AMD's): no valid answer
        return {"content": "OK"}
    _teacher_calls += 1
    gate = os.environ.get("AGENTBREW_GATE")
    if gate and _teacher_calls == GATE_CALL:
        (Path(gate) / "asked").write_text("1")
        deadline = time.monotonic() + 300
        while not (Path(gate) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    task = _task_of(str(request["messages"][0].get("content")))
    if task is None:
        return {"content": "I cannot tell which task this is."}
    classes = task.group_id.split("+")
    functions = sorted(d["name"] for d in task.function_docs)
    note = {
        "note_key": note_key(task.group_id),
        "scope": "bfcl_multi_turn",
        "scope_description": "Multi-turn requests served by calling file system, social "
        "media, ticket and other API functions in order.",
        "trigger_pattern": f"A request for {' and '.join(classes)}: {', '.join(functions)}.",
        "corrective_rule": f"Use only {' and '.join(classes)} calls, one per step, and check "
        "each result before the next call.",
        "minimal_steps": [
            "Read every action the request asks for.",
            "Call one function per step, in the order asked.",
            "After the last call, say that the request is done.",
        ],
        "tags": ["bfcl", *[c.lower() for c in classes]],
        "not_applicable_when": "The request asks only a question that needs no function.",
        "quality_score": 0.8,
    }
    steps = "1. Failure mode: stopped early. 2. Gap: order of calls. 3. Rule below."
    return {"content": f"{steps}\n```json\n{json.dumps(note)}\n```"}


def curator(request: dict[str, Any]) -> dict[str, Any]:
    prompt = str(request["messages"][0].get("content"))
    blocks = re.findall(r"```json\n(.*?)\n```", prompt, re.DOTALL)
    candidate = json.loads(blocks[0])
    existing = [json.loads(b) for b in blocks[1:]]
    same = [n for n in existing if n["note_key"] == candidate["note_key"]]
    if same:
        merged = {k: candidate[k] for k in ("trigger_pattern", "corrective_rule",
                                            "minimal_steps", "tags", "not_applicable_when")}  # fmt: skip
        verdict = {"decision": "merge", "target": same[0]["note_key"], "reason": "same rule",
                   "note": merged}  # fmt: skip
    else:
        verdict = {"decision": "add", "target": "", "reason": "a new group of classes"}
    return {"content": f"```json\n{json.dumps(verdict)}\n```"}
