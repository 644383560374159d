"""Per-note usage at test time (the AgentBrew paper's §3.5: a note "retrieved and used
on 1,200 distinct test tasks with a 55.6% success rate when applied"): from the episodes
of an evaluation, for every note, the tasks whose prompt showed it and how many of those
were solved. Every AgentBrew episode records the ids of the notes it was shown
(`shown` in its log, serve.py); an unscored episode (an infrastructure error) counts
nowhere."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def note_usage(records: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per note shown: `note` (its memory id), `tasks` (distinct tasks that read
    it), `solved` (those solved), `success_rate`; most-read first (ties by id)."""
    shown_on: dict[str, dict[str, bool]] = {}
    for record in records:
        success = getattr(record, "success", None)
        if success is None:
            continue
        log = json.loads(getattr(record, "extra_json", None) or "{}")
        shown = log.get("shown") if isinstance(log, dict) else None
        if not isinstance(shown, list):  # another method's log may use the key otherwise
            continue
        for memory_id in shown:
            tasks = shown_on.setdefault(str(memory_id), {})
            tasks[record.task_id] = tasks.get(record.task_id, False) or bool(success)
    rows = []
    for memory_id, tasks in shown_on.items():
        solved = sum(tasks.values())
        rows.append({"note": memory_id, "tasks": len(tasks), "solved": solved,
                     "success_rate": solved / len(tasks)})  # fmt: skip
    return sorted(rows, key=lambda r: (-r["tasks"], r["note"]))
