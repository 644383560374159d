"""Per-note usage at test time (the AgentBrew paper's §3.5: a note "retrieved and used
on 1,200 distinct test tasks with a 55.6% success rate when applied"): from the episodes
of an evaluation, for every note, each use (an episode whose prompt showed it) and
whether that episode succeeded, so the success rate is per use; the distinct tasks that
read it besides. Every AgentBrew episode records the ids of the notes it was shown
(`shown` in its log, serve.py); an unscored episode (an infrastructure error) counts
nowhere."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any


def note_usage(records: Iterable[Any]) -> list[dict[str, Any]]:
    """One row per note shown: `note` (its memory id), `uses` (scored episodes that
    showed it), `succeeded` (those that succeeded), `success_rate` (per use), `tasks`
    (distinct tasks that read it); most-used first (ties by id)."""
    uses: dict[str, list[int]] = {}  # note -> [uses, succeeded]
    tasks: dict[str, set[str]] = {}
    for record in records:
        success = getattr(record, "success", None)
        if success is None:
            continue
        log = json.loads(getattr(record, "extra_json", None) or "{}")
        shown = log.get("shown") if isinstance(log, dict) else None
        if not isinstance(shown, list):  # another method's log may use the key otherwise
            continue
        for memory_id in dict.fromkeys(str(m) for m in shown):  # a note once per episode
            tally = uses.setdefault(memory_id, [0, 0])
            tally[0] += 1
            tally[1] += bool(success)
            tasks.setdefault(memory_id, set()).add(record.task_id)
    rows = [
        {
            "note": note,
            "uses": n,
            "succeeded": ok,
            "success_rate": ok / n,
            "tasks": len(tasks[note]),
        }  # fmt: skip
        for note, (n, ok) in uses.items()
    ]
    return sorted(rows, key=lambda r: (-r["uses"], r["note"]))
