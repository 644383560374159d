"""Where a method's own bound left part of its memory out of what the student read, shown
next to the cell it concerns (Table 1 and every table built from the cells):

- ACE's playbook cut section-aware at `playbook_max_chars` (episodes logging
  `bullets_cut`: the bullets left out);
- ExpeL's in-context examples skipped as longer than `max_example_chars` (episodes
  logging `examples_too_long`).

Read from the episode files of the points' scoring stages
(`<output root>/stages/<kind>/<stage>/episodes/`, whose logs carry the hooks' counters),
pooled over a cell's points (its seeds), each stage once. A cell with a cut gets a marker
after its label (`✂ …`), its numbers go to cells.csv and the tables' CSVs
(`bound_episodes`, `bullets_cut`, `examples_too_long`: 0 where nothing was cut), and a
report note says the same in words."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from distillery.orchestrator.report.load import SweepData
from distillery.workers.trajectories import read_episodes

MARK = "✂"
# The hooks' counters of what a method's own bound left out, and how a cell says them.
COUNTERS = ("bullets_cut", "examples_too_long")
COLUMNS = ("bound_episodes", *COUNTERS)


def stage_episodes(root: Any, digest: str) -> list[Any]:
    """The episode records of the stage `digest` under an output root (any kind)."""
    stages = root / "stages"
    if not stages.exists():
        return []
    for kind in stages.subdirs():
        folder = kind / digest[:16] / "episodes"
        if folder.exists():
            return read_episodes(folder)
    return []


def scoring_episodes(data: SweepData) -> tuple[dict[str, list[Any]], list[str]]:
    """The episodes of every student point's scoring stage, by stage digest (each stage
    read once), and a note where they could not be read."""
    points = data.points
    if points.empty or "stage" not in points.columns or "/sweeps/" not in data.location.uri:
        return {}, []
    root = type(data.location).of(data.location.uri.rsplit("/sweeps/", 1)[0])
    students = points[points["role"] == "student"] if "role" in points.columns else points
    out: dict[str, list[Any]] = {}
    try:
        for point in students.to_dict("records"):
            stage = str(point.get("stage") or "")
            if point.get("method_kind") in (None, "zero_shot") or not stage or stage in out:
                continue
            out[stage] = stage_episodes(root, stage)
    except (OSError, ValueError) as exc:
        return {}, [f"stage episodes unreadable ({exc}); note usage and memory cuts skipped"]
    return out, []


def stage_bounds(records: Sequence[Any]) -> dict[str, int]:
    """What one stage's episodes say their methods' bounds left out."""
    out: dict[str, int] = {c: 0 for c in COLUMNS}
    for record in records:
        extra = json.loads(record.extra_json or "{}")
        counts = {c: int(extra.get(c) or 0) for c in COUNTERS}
        out["bound_episodes"] += int(any(counts.values()))
        for column, value in counts.items():
            out[column] += value
    return out


def marker(bounds: Mapping[str, int], episodes: int) -> str:
    """A cell's marker, "" when its memory was never cut."""
    parts = []
    if bounds["bullets_cut"]:
        parts.append(f"playbook cut ({bounds['bullets_cut']} bullets left out)")
    if bounds["examples_too_long"]:
        parts.append(f"{bounds['examples_too_long']} examples skipped as too long")
    if not parts:
        return ""
    return f"{MARK} {bounds['bound_episodes']}/{episodes} episodes: " + ", ".join(parts)


def mark_cells(
    cells: pd.DataFrame, points: pd.DataFrame, episodes: Mapping[str, list[Any]]
) -> tuple[pd.DataFrame, list[str]]:
    """`cells` with the bound columns and, where something was cut, the marker after
    the label; a note per marked cell."""
    if cells.empty:
        return cells.assign(**{c: pd.Series(dtype="int64") for c in COLUMNS}), []
    stage_of = (
        dict(zip(points["point_id"], points["stage"], strict=True))
        if "stage" in points.columns
        else {}
    )
    rows: list[dict[str, int]] = []
    labels: list[str] = []
    notes: list[str] = []
    for cell in cells.to_dict("records"):
        stages = dict.fromkeys(
            str(stage_of.get(pid) or "") for pid in str(cell.get("point_ids") or "").split(",")
        )
        records = [r for s in stages if s for r in episodes.get(s, [])]
        bounds = stage_bounds(records)
        rows.append(bounds)
        mark = marker(bounds, len(records))
        labels.append(f"{cell['label']} · {mark}" if mark else str(cell["label"]))
        if mark:
            notes.append(
                f"{cell['method']} on {cell['benchmark']} ({cell['student']}): {mark} "
                "(the method's own bound: ACE's playbook_max_chars, ExpeL's "
                "max_example_chars; marked ✂ in the tables)"
            )
    counts = pd.DataFrame(rows, columns=list(COLUMNS), index=cells.index).astype("int64")
    return cells.assign(**{c: counts[c] for c in COLUMNS}, label=labels), notes
