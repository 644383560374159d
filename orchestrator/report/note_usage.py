"""Per-note usage of the memories a sweep's student points read (the AgentBrew paper's
§3.5: how often a note is retrieved and the success rate when applied): one table, a
row per (method, benchmark, student, seed, note) with the note's uses (episodes that
showed it), how many of those succeeded (the success rate per use) and the distinct
tasks that read it, for the seeds pooled and for each seed, most-used notes first (at
most `TOP` per cell, chosen on the pooled uses). Read from the episode files of the points' scoring
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
COLUMNS = [
    "method", "benchmark", "student", "seed", "note", "uses", "succeeded", "success_rate",
    "tasks",
]  # fmt: skip
POOLED = "pooled"


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
    # cell -> seed -> the episodes of that seed's scoring stage (a stage shared by
    # points of one seed is read once)
    by_cell: dict[tuple[str, str, str], dict[str, list[Any]]] = {}
    read: set[tuple[tuple[str, str, str], str, str]] = set()
    for point in students.to_dict("records"):
        stage = str(point.get("stage") or "")
        cell = (str(point["method"]), str(point["benchmark"]), str(point.get("student")))
        seed = str(point.get("seed", ""))
        if stage not in episodes or (cell, seed, stage) in read:
            continue
        read.add((cell, seed, stage))
        by_cell.setdefault(cell, {}).setdefault(seed, []).extend(episodes[stage])
    rows: list[dict[str, Any]] = []
    for (method, benchmark, student), seeds in by_cell.items():
        pooled = note_usage(r for records in seeds.values() for r in records)[:TOP]
        top = [u["note"] for u in pooled]
        key = {"method": method, "benchmark": benchmark, "student": student}
        rows += [{**key, "seed": POOLED, **u} for u in pooled]
        if len(seeds) > 1:
            for seed in sorted(seeds, key=_seed_order):
                mine = {u["note"]: u for u in note_usage(seeds[seed])}
                rows += [{**key, "seed": seed, **mine[n]} for n in top if n in mine]
    if not rows:
        return [], notes
    frame = pd.DataFrame(rows, columns=COLUMNS)
    shown = frame.assign(success_rate=[f"{100 * r:.1f}%" for r in frame["success_rate"]])
    caption = (
        "Per note: its uses (test episodes whose prompt showed it), those that succeeded "
        "and the success rate per use, and the distinct tasks that read it; seeds pooled, "
        f"then each seed; the {TOP} most-used notes of each method × benchmark × student "
        "(the AgentBrew paper's §3.5)."
    )
    table = Table("note_usage", "Per-note usage at test time", shown, caption, None, frame)
    return [table], notes


def _seed_order(seed: str) -> tuple[int, str]:
    return (int(seed), "") if seed.lstrip("-").isdigit() else (0, seed)
