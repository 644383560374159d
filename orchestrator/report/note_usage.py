"""Per-note usage of the memories a sweep's student points read (the AgentBrew paper's
§3.5: how often a note is retrieved and the success rate when applied): one table, a
row per (method, benchmark, student, note) with the distinct tasks that were shown the
note and how many of those were solved, pooled over a cell's seeds, most-read notes
first (at most `TOP` per cell). Read from the episode files of the points' scoring
stages (`<output root>/stages/<kind>/<stage>/episodes/`), whose logs name the notes
shown (`shown`); a method whose episodes record none has no rows. The CSV is logged to
MLflow with the rest of the report (`report/note_usage.csv`).

From the same episodes, a report note per cell whose memory block was cut to a method's
own bound (ACE's section-aware `playbook_max_chars`: episodes logging `bullets_cut`):
how many episodes read a cut playbook and how many entries were left out."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from distillery.orchestrator.report.load import SweepData
from distillery.orchestrator.report.tables import Table
from distillery.workers.memory.agentbrew.usage import note_usage
from distillery.workers.trajectories import read_episodes

TOP = 20
COLUMNS = ["method", "benchmark", "student", "note", "tasks", "solved", "success_rate"]


def _stage_episodes(root: Any, digest: str) -> list[Any]:
    stages = root / "stages"
    if not stages.exists():
        return []
    for kind in stages.subdirs():
        folder = kind / digest[:16] / "episodes"
        if folder.exists():
            return read_episodes(folder)
    return []


def note_usage_table(data: SweepData) -> tuple[list[Table], list[str]]:
    points = data.points
    if points.empty or "stage" not in points.columns:
        return [], []
    uri = data.location.uri
    if "/sweeps/" not in uri:
        return [], []
    root = type(data.location).of(uri.rsplit("/sweeps/", 1)[0])
    rows: list[dict[str, Any]] = []
    students = points[points["role"] == "student"] if "role" in points.columns else points
    by_cell: dict[tuple[str, str, str], list[Any]] = {}
    read: set[tuple[tuple[str, str, str], str]] = set()
    try:
        for point in students.to_dict("records"):
            if point.get("method_kind") in (None, "zero_shot"):
                continue
            cell = (str(point["method"]), str(point["benchmark"]), str(point.get("student")))
            stage = str(point.get("stage") or "")
            if not stage or (cell, stage) in read:  # a stage shared by points: once
                continue
            read.add((cell, stage))
            by_cell.setdefault(cell, []).extend(_stage_episodes(root, stage))
    except (OSError, ValueError) as exc:
        return [], [f"note usage: episode files unreadable ({exc}); skipped"]
    notes = []
    for (method, benchmark, student), records in by_cell.items():
        cut = [json.loads(r.extra_json or "{}").get("bullets_cut", 0) for r in records]
        if any(cut):
            notes.append(
                f"{method} on {benchmark} ({student}): {sum(1 for c in cut if c)} of "
                f"{len(records)} episodes read a memory cut to the method's bound, "
                f"{sum(cut)} entries left out in all (ACE: playbook_max_chars)"
            )
        usage = note_usage(records)[:TOP]
        rows += [{"method": method, "benchmark": benchmark, "student": student, **u}
                 for u in usage]  # fmt: skip
    if not rows:
        return [], notes
    frame = pd.DataFrame(rows, columns=COLUMNS)
    shown = frame.assign(success_rate=[f"{100 * r:.1f}%" for r in frame["success_rate"]])
    caption = (
        "Per note: the distinct test tasks whose prompt showed it (tasks) and those solved "
        f"(solved), seeds pooled; the {TOP} most-read notes of each method × benchmark × "
        "student (the AgentBrew paper's §3.5)."
    )
    table = Table("note_usage", "Per-note usage at test time", shown, caption, None, frame)
    return [table], notes
