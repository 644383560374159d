"""Whether a sweep's repeated runs (the same cell over several seeds) really differ.

A repeated-runs table (paper table 5: mean ± std over five runs) only means something
when the runs can differ: the sweep seed reaches the sampler as each request's `seed`,
so at temperature 0 the runs send the same greedy requests and repeat each other (up to
server nondeterminism). The report says so instead of printing a spread of 0 as if it
were run-to-run robustness.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd


def repeat_notes(points: pd.DataFrame, episodes: pd.DataFrame, keys: Sequence[str]) -> list[str]:
    """One note per cell (points equal on `keys`) with several seeds whose runs are
    identical task by task, or whose student sampled at temperature 0."""
    if points.empty or "seed" not in points.columns:
        return []
    student = points[points["role"] == "student"]
    by_point: Any = episodes.dropna(subset=["success"]).groupby("point_id")
    outcomes = (
        by_point.apply(
            lambda g: tuple(sorted(zip(g["task_id"], g["success"].astype(bool), strict=True)))
        )
        if not episodes.empty
        else pd.Series(dtype=object)
    )
    notes = []
    for cell_values, cell in student.groupby(list(keys), sort=False):
        seeds = sorted(int(s) for s in cell["seed"].unique())
        if len(seeds) < 2:
            continue
        name = _cell_name(dict(zip(keys, cell_values, strict=True)))
        runs = {outcomes.get(pid) for pid in cell["point_id"]}
        greedy = "temperature" in cell.columns and bool(
            (pd.to_numeric(cell["temperature"], errors="coerce") == 0).all()
        )
        why = (
            " The student sampled at temperature 0: each seed sent the same greedy "
            "requests, so the runs repeat each other; set a sampling temperature (e.g. "
            "student.temperature=0.7, as experiment=bfcl_repeated_runs does) for "
            "run-to-run variance."
            if greedy
            else ""
        )
        if len(runs) == 1 and None not in runs:
            notes.append(
                f"{name}: the {len(seeds)} runs (seeds {', '.join(map(str, seeds))}) are "
                f"identical task by task; their ± std is 0 by construction, not a measured "
                f"robustness.{why}"
            )
        elif greedy:
            notes.append(
                f"{name}: seeds {', '.join(map(str, seeds))} differ only by server "
                f"nondeterminism.{why}"
            )
    return notes


def _cell_name(values: dict[str, object]) -> str:
    shown = ("method", "student", "protocol", "benchmark")
    return " ".join(f"{k}={values[k]}" for k in shown if values.get(k) not in (None, ""))
