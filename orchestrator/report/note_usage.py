"""Per-note usage of the memories a sweep's student points read (the AgentBrew paper's
§3.5: how often a note is retrieved and the success rate when applied): one table, a
row per (method, benchmark, student, note) with the distinct tasks that were shown the
note and how many of those were solved, pooled over a cell's seeds, most-read notes
first (at most `TOP` per cell). Read from the episode files of the points' scoring
stages (`<output root>/stages/<kind>/<stage>/episodes/`), whose logs name the notes
shown (`shown`); a method whose episodes record none has no rows. The CSV is logged to
MLflow with the rest of the report (`report/note_usage.csv`).

What a method's own bound left out of the same episodes (ACE's playbook cut, ExpeL's
examples skipped) is marked next to its cell: memory_bounds.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from distillery.orchestrator.report.load import SweepData
from distillery.orchestrator.report.memory_bounds import scoring_episodes
from distillery.orchestrator.report.tables import Table
from distillery.workers.memory.agentbrew.usage import note_usage

TOP = 20
COLUMNS = ["method", "benchmark", "student", "note", "tasks", "solved", "success_rate"]


def note_usage_table(
    data: SweepData, episodes: Mapping[str, list[Any]] | None = None
) -> tuple[list[Table], list[str]]:
    """The table; `episodes`: the scoring stages' episodes by stage, when already read
    (`memory_bounds.scoring_episodes`)."""
    notes: list[str] = []
    if episodes is None:
        episodes, notes = scoring_episodes(data)
    points = data.points
    if not episodes or points.empty:
        return [], notes
    students = points[points["role"] == "student"] if "role" in points.columns else points
    by_cell: dict[tuple[str, str, str], list[Any]] = {}
    read: set[tuple[tuple[str, str, str], str]] = set()
    for point in students.to_dict("records"):
        stage = str(point.get("stage") or "")
        cell = (str(point["method"]), str(point["benchmark"]), str(point.get("student")))
        if stage not in episodes or (cell, stage) in read:  # a stage shared by points: once
            continue
        read.add((cell, stage))
        by_cell.setdefault(cell, []).extend(episodes[stage])
    rows: list[dict[str, Any]] = []
    for (method, benchmark, student), records in by_cell.items():
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
