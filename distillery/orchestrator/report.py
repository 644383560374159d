"""`distillery report`: paper-style tables, paired tests, plots and costs of a sweep.

    distillery report [SWEEP_DIR | OUTPUT_ROOT] [--out DIR] [--no-mlflow]

Reads only the files a finished sweep leaves in `<output_root>/sweeps/<sweep_id>/`:

- `sweep.json`: sweep_id, tracking_uri, parent_run_id, experiment, created_at, prices,
  git_sha;
- `points.parquet`: one row per evaluation point (method, role, agent, student, teacher,
  student_params_b, benchmark, protocol, memory_types, k_/delta_/repr_ wf|st|fn, seed,
  eval_task_ids_sha, upstream stage hashes (its own included), mlflow_run_id);
- `episodes.parquet`: one row per (point, task): success (null = infrastructure failure,
  not scored), termination, total_steps, n_llm_calls, tokens_in, tokens_out, wall_s;
- `stages.parquet`: one row per distinct stage: kind, model, tokens, embed_tokens,
  wall_s, gpu_s, ran (see `costs.py`).

and writes `report.md`, the tables as CSV and the plots as PNG into `--out` (default
`<sweep_dir>/report`), then logs them to the sweep's MLflow parent run under `report/`.

A *cell* is a set of points with the same descriptors except the seed. Its success
rate is pooled over its seeds' scored episodes (n), with a 95 % Wilson interval, and,
when it has several seeds, the mean ± sample std of the per-seed rates. Infrastructure
failures are never scored: they are out of n and counted apart.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd

from distillery.orchestrator.costs import (
    CATEGORIES,
    PriceTable,
    cost_breakdown,
    point_costs,
    stage_costs,
    unpriced_models,
)
from distillery.orchestrator.repeats import repeat_notes
from distillery.orchestrator.stats import mcnemar, wilson_interval
from distillery.redaction import REDACTED
from distillery.workers.storage import Location

MEMORY_TYPES = ("wf", "st", "fn")
# Descriptors that define a cell (everything but the seed), in display order.
CELL_KEYS: tuple[str, ...] = (
    "benchmark",
    "protocol",
    "teacher",
    "student",
    "method",
    "method_kind",
    "role",
    "memory_types",
    *(f"{p}_{t}" for p in ("k", "delta", "repr") for t in MEMORY_TYPES),
)
# Keys a table may add to its rows to tell apart cells that its focus keys would merge.
DISAMBIGUATORS: tuple[str, ...] = (
    "method",
    "memory_types",
    "teacher",
    "student",
    *(f"{p}_{t}" for p in ("k", "repr", "delta") for t in MEMORY_TYPES),
    "protocol",
    "benchmark",
)
_KIND_ORDER = {"teacher": 0, "zero_shot": 1, "student_memory": 2, "amd": 3}
_POINT_REQUIRED = (
    "point_id",
    "method",
    "role",
    "student",
    "teacher",
    "benchmark",
    "protocol",
    "seed",
    "upstream",
)
_EPISODE_REQUIRED = ("point_id", "task_id", "success")
_STAGE_REQUIRED = ("stage_hash", "kind")
_PREFERRED_PROTOCOL = "main"
_NA = "–"


class ReportError(Exception):
    """A problem the user fixes (a missing sweep, an unfinished one): message only."""


def _run_hint(root: str) -> str:
    return (
        "run the sweep first: distillery [experiment=... | -m ...] "
        f"output_dir={root} (re-running the same command finishes an interrupted sweep)"
    )


# -- loading ----------------------------------------------------------------------------


@dataclass(frozen=True)
class SweepData:
    """A sweep's files, loaded and normalized (see `load_sweep`)."""

    location: Location
    meta: Mapping[str, Any]
    points: pd.DataFrame
    episodes: pd.DataFrame
    stages: pd.DataFrame
    notes: tuple[str, ...] = ()

    @property
    def sweep_id(self) -> str:
        return str(self.meta.get("sweep_id") or self.location.name)

    @property
    def prices(self) -> PriceTable:
        return PriceTable.from_dict(self.meta.get("prices"))


def find_sweep(path: str | Path | Location) -> tuple[Location, str | None]:
    """The sweep directory `path` names: itself when it holds sweep.json, else the most
    recently created sweep (by `created_at`) of an output root (`<root>/sweeps/*`) or of
    a `sweeps` folder. The second value says which one was picked when there was a
    choice."""
    loc = path if isinstance(path, Location) else Location.of(path)
    if loc.name in ("sweep.json", "points.parquet", "episodes.parquet", "stages.parquet"):
        loc = Location(loc.uri.rsplit("/", 1)[0])  # a file of the sweep: its folder
    if not loc.exists():
        raise ReportError(f"{loc} does not exist; {_run_hint(str(path))}")
    if (loc / "sweep.json").exists():
        return loc, None
    base = loc / "sweeps" if (loc / "sweeps").exists() else loc
    found: list[tuple[float, Location]] = []
    for sub in base.subdirs():
        marker = sub / "sweep.json"
        if not marker.exists():
            continue
        try:
            created = float(marker.read_json().get("created_at") or 0.0)
        except (ValueError, TypeError, AttributeError):
            created = 0.0  # unreadable: still a sweep, ranked oldest
        found.append((created, sub))
    if not found:
        raise ReportError(
            f"no sweep in {loc}: expected {loc}/sweep.json (a sweep directory) or "
            f"{loc}/sweeps/<sweep_id>/sweep.json (an output root); {_run_hint(str(path))}"
        )
    found.sort(key=lambda item: (item[0], item[1].uri))
    # A sweep still running (or interrupted) has sweep.json but no tables yet: report the
    # most recent finished one and name the newer ones, rather than fail on them.
    finished = [item for item in found if (item[1] / "points.parquet").exists()]
    created, chosen = (finished or found)[-1]
    if len(found) == 1:
        return chosen, None
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(created)) if created else "?"
    newer = [sub.name for c, sub in found if (c, sub.uri) > (created, chosen.uri)]
    note = (
        f"{len(found)} sweeps under {base}; reporting the most recent"
        f"{' finished' if newer else ''} one, {chosen.name} (created {when})"
    )
    if newer:
        note += f"; not finished yet (no tables): {', '.join(newer)}"
    return chosen, note + "; pass a sweep's directory to report another"


def _read_parquet(loc: Location, name: str, root_hint: str) -> pd.DataFrame:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = loc / name
    if not target.exists():
        raise ReportError(
            f"{target} is missing: a sweep writes its tables when its run ends; "
            f"{_run_hint(root_hint)}"
        )
    try:
        return pq.read_table(pa.BufferReader(target.read_bytes())).to_pandas()
    except (pa.ArrowInvalid, OSError) as exc:
        raise ReportError(
            f"{target} is not a readable Parquet file ({exc}); re-run the sweep's command "
            "to rewrite it"
        ) from None


def _require(frame: pd.DataFrame, columns: Sequence[str], where: Location) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing and not frame.empty:
        raise ReportError(
            f"{where} lacks column(s) {', '.join(missing)}: it was written by another "
            "version of distillery; re-run the sweep's command to rewrite it"
        )


def _text(value: Any) -> str:
    """A descriptor as a cell key / display string; "" for not applicable."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float | np.floating):
        return str(int(value)) if float(value).is_integer() else f"{float(value):g}"
    return str(value)


def normalize_points(points: pd.DataFrame) -> pd.DataFrame:
    """Descriptors as strings ("" = not applicable) so cells group without NA pitfalls;
    `student_params_b` stays numeric. Teacher rows are keyed by the teacher that played
    (a teacher point is shared by every config of the sweep, whichever student it was
    written with); zero-shot and student-memory rows have no teacher (the teacher does
    not change them)."""
    out = points.copy()
    for column in CELL_KEYS:
        if column not in out.columns:
            out[column] = None
    for column in ("agent", "eval_task_ids_sha", "mlflow_run_id"):
        if column not in out.columns:
            out[column] = None
    if "student_params_b" not in out.columns:
        out["student_params_b"] = np.nan
    out["student_params_b"] = pd.to_numeric(out["student_params_b"], errors="coerce")
    for column in (*CELL_KEYS, "agent", "eval_task_ids_sha"):
        out[column] = out[column].map(_text).astype(object)
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").fillna(0).astype("int64")
    kind = out["method_kind"].where(out["method_kind"] != "", out["method"])
    out["method_kind"] = kind
    teacher_rows = out["role"] == "teacher"
    agent_or_teacher = out["agent"].where(out["agent"] != "", out["teacher"])
    out.loc[teacher_rows, "teacher"] = agent_or_teacher[teacher_rows]
    out.loc[teacher_rows, "student"] = agent_or_teacher[teacher_rows]
    out.loc[teacher_rows, "student_params_b"] = np.nan
    no_teacher = out["method_kind"].isin(["zero_shot", "student_memory"])
    out.loc[no_teacher, "teacher"] = ""
    return out.drop_duplicates("point_id", keep="last").reset_index(drop=True)


def normalize_episodes(episodes: pd.DataFrame) -> pd.DataFrame:
    out = episodes.copy()
    out["success"] = out["success"].astype("boolean")
    for column, default in (
        ("total_steps", 0),
        ("n_llm_calls", 0),
        ("tokens_in", 0),
        ("tokens_out", 0),
        ("wall_s", 0.0),
    ):
        if column not in out.columns:
            out[column] = default
        out[column] = pd.to_numeric(out[column], errors="coerce").fillna(default)
    if "termination" not in out.columns:
        out["termination"] = ""
    out["task_id"] = out["task_id"].astype(str)
    return out


def load_sweep(path: str | Path | Location) -> tuple[SweepData, str | None]:
    """Find (see `find_sweep`) and read a sweep; errors name the missing file and what
    to run."""
    loc, picked = find_sweep(path)
    # What to run names the output root: two levels above a sweep directory.
    root_hint = loc.uri.rsplit("/sweeps/", 1)[0] if "/sweeps/" in loc.uri else str(path)
    try:
        meta = (loc / "sweep.json").read_json()
    except ValueError as exc:
        raise ReportError(f"{loc}/sweep.json is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ReportError(f"{loc}/sweep.json is not a JSON object")
    points = _read_parquet(loc, "points.parquet", root_hint)
    episodes = _read_parquet(loc, "episodes.parquet", root_hint)
    stages = _read_parquet(loc, "stages.parquet", root_hint)
    _require(points, _POINT_REQUIRED, loc / "points.parquet")
    _require(episodes, _EPISODE_REQUIRED, loc / "episodes.parquet")
    _require(stages, _STAGE_REQUIRED, loc / "stages.parquet")
    notes: list[str] = []
    if points.empty:
        points = pd.DataFrame({c: pd.Series(dtype=object) for c in _POINT_REQUIRED})
    if episodes.empty:
        episodes = pd.DataFrame({c: pd.Series(dtype=object) for c in _EPISODE_REQUIRED})
    if stages.empty:
        stages = pd.DataFrame({c: pd.Series(dtype=object) for c in _STAGE_REQUIRED})
    points = normalize_points(points)
    episodes = normalize_episodes(episodes)
    duplicated = episodes.duplicated(["point_id", "task_id"], keep="last")
    if duplicated.any():
        notes.append(
            f"episodes.parquet repeats {int(duplicated.sum())} (point, task) row(s); "
            "the last of each was used"
        )
        episodes = episodes[~duplicated]
    orphans = ~episodes["point_id"].isin(set(points["point_id"]))
    if orphans.any():
        notes.append(f"{int(orphans.sum())} episode row(s) belong to no point and were ignored")
        episodes = episodes[~orphans]
    data = SweepData(
        loc,
        MappingProxyType(dict(meta)),
        points,
        episodes.reset_index(drop=True),
        stages,
        tuple(notes),
    )
    return data, picked


# -- numbers ------------------------------------------------------------------------------


def point_stats(points: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per point: tasks, scored episodes, successes, infrastructure failures, mean steps
    over scored episodes, and the success rate over scored episodes."""
    scored = episodes["success"].notna()
    frame = episodes.assign(
        scored=scored.astype("int64"),
        won=(episodes["success"].fillna(False)).astype("int64"),
        infra=(~scored).astype("int64"),
        steps=episodes["total_steps"].where(scored),
    )
    agg = frame.groupby("point_id").agg(
        n_tasks=("task_id", "size"),
        n_scored=("scored", "sum"),
        n_success=("won", "sum"),
        n_infra=("infra", "sum"),
        mean_steps=("steps", "mean"),
    )
    out = points.set_index("point_id").join(agg)
    for column in ("n_tasks", "n_scored", "n_success", "n_infra"):
        out[column] = out[column].fillna(0).astype("int64")
    out["rate"] = out["n_success"] / out["n_scored"].where(out["n_scored"] > 0)
    return out.reset_index()


def cell_label(successes: int, n: int, seed_mean: float, seed_std: float, n_seeds: int) -> str:
    """A cell as shown: `62.5% [42.7–78.8] n=24`, then `· 62.5 ± 3.5 (3 seeds)` when
    the cell has several seeds."""
    if n <= 0:
        return f"{_NA} n=0"
    low, high = wilson_interval(successes, n)
    label = f"{100 * successes / n:.1f}% [{100 * low:.1f}–{100 * high:.1f}] n={n}"
    if n_seeds > 1 and not math.isnan(seed_std):
        label += f" · {100 * seed_mean:.1f} ± {100 * seed_std:.1f} ({n_seeds} seeds)"
    return label


def cell_table(stats: pd.DataFrame) -> pd.DataFrame:
    """One row per cell (same descriptors but the seed): pooled n / successes / rate,
    95 % Wilson bounds, per-seed mean and sample std (NaN with one seed), the gain over
    the zero-shot cell of the same student, benchmark and protocol (percentage points),
    and the display label."""
    keys = list(CELL_KEYS)
    if stats.empty:
        return pd.DataFrame(columns=[*keys, "n", "successes", "rate", "label"])
    per_seed = stats.groupby([*keys, "seed"], sort=False).agg(
        n=("n_scored", "sum"), successes=("n_success", "sum")
    )
    per_seed["seed_rate"] = per_seed["successes"] / per_seed["n"].where(per_seed["n"] > 0)
    seeds = per_seed.reset_index()
    cells = seeds.groupby(keys, sort=False).agg(
        n=("n", "sum"),
        successes=("successes", "sum"),
        n_seeds=("seed_rate", "count"),
        seed_mean=("seed_rate", "mean"),
        seed_std=("seed_rate", "std"),  # ddof=1: the spread a reader expects from "± std"
        seeds=("seed", lambda s: ",".join(str(v) for v in sorted(s))),
    )
    extra = stats.groupby(keys, sort=False).agg(
        n_points=("point_id", "size"),
        n_infra=("n_infra", "sum"),
        mean_steps=("mean_steps", "mean"),
        student_params_b=("student_params_b", "first"),
        point_ids=("point_id", lambda s: ",".join(s)),
    )
    cells = cells.join(extra).reset_index()
    cells["rate"] = cells["successes"] / cells["n"].where(cells["n"] > 0)
    bounds = [
        wilson_interval(int(s), int(n)) for s, n in zip(cells["successes"], cells["n"], strict=True)
    ]
    cells["ci_low"] = [b[0] for b in bounds]
    cells["ci_high"] = [b[1] for b in bounds]
    cells["label"] = [
        cell_label(int(s), int(n), m, d, int(k))
        for s, n, m, d, k in zip(
            cells["successes"],
            cells["n"],
            cells["seed_mean"],
            cells["seed_std"],
            cells["n_seeds"],
            strict=True,
        )
    ]
    # Zero-shot reference: all zero-shot episodes of the student/benchmark/protocol.
    ref_keys = ["student", "benchmark", "protocol"]
    zero = cells[cells["method_kind"] == "zero_shot"].groupby(ref_keys)[["successes", "n"]].sum()
    zero_rate = (zero["successes"] / zero["n"].where(zero["n"] > 0)).rename("zero_shot_rate")
    cells = cells.join(zero_rate, on=ref_keys)
    cells.loc[cells["role"] != "student", "zero_shot_rate"] = np.nan
    cells["gain_pp"] = 100 * (cells["rate"] - cells["zero_shot_rate"])
    order = cells["method_kind"].map(lambda k: _KIND_ORDER.get(k, 3))
    return (
        cells.assign(_order=order)
        .sort_values(["benchmark", "protocol", "student", "_order", "method", "memory_types"])
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def _display(column: str, value: str) -> str:
    if column == "memory_types":
        return value or "none"
    return value or _NA


def pivot(
    cells: pd.DataFrame, rows: Sequence[str], column: str, value: str = "label"
) -> pd.DataFrame:
    """A paper-style table: `rows` keys down, one column per value of `column`. Keys
    that differ between cells the row keys would merge (e.g. k in a table by method)
    are added to the rows, in DISAMBIGUATORS order, so no two cells collapse."""
    index = distinguishing(cells, [*rows, column], [k for k in DISAMBIGUATORS if k != column])
    index.remove(column)
    # Rows in reading order (zero-shot before memory methods), whatever column has them.
    sort_by = [("_kind" if k == "method" else k) for k in index]
    if "method" in index:
        sort_by.insert(sort_by.index("_kind") + 1, "method")
    kinds = cells["method_kind"].map(lambda k: _KIND_ORDER.get(k, 3))
    ordered = (
        cells.assign(_kind=kinds).sort_values(sort_by, kind="stable").drop_duplicates(index)[index]
    )
    columns = sorted(cells[column].unique())
    lookup: dict[tuple[str, ...], list[str]] = {}
    for row in cells.itertuples(index=False):
        key = (*(getattr(row, k) for k in index), getattr(row, column))
        lookup.setdefault(key, []).append(str(getattr(row, value)))
    out = []
    for values in ordered.itertuples(index=False, name=None):
        record = {k: _display(k, v) for k, v in zip(index, values, strict=True)}
        for col in columns:
            found = lookup.get((*values, col))
            record[_display(column, col)] = " / ".join(found) if found else _NA
        out.append(record)
    return pd.DataFrame(out)


def distinguishing(
    frame: pd.DataFrame, base: Sequence[str], candidates: Iterable[str]
) -> list[str]:
    """`base` plus, in order, each candidate key that differs between rows the keys so
    far would merge: the fewest descriptors that tell the rows' cells apart."""
    index = list(base)
    if frame.empty:
        return index
    for key in candidates:
        if key in index or key not in frame.columns:
            continue
        if frame.groupby(index, sort=False)[key].nunique().max() > 1:
            index.append(key)
    return index


def _preferred_protocol(cells: pd.DataFrame) -> tuple[pd.DataFrame, str | None]:
    protocols = set(cells["protocol"])
    if len(protocols) > 1 and _PREFERRED_PROTOCOL in protocols:
        return cells[cells["protocol"] == _PREFERRED_PROTOCOL], _PREFERRED_PROTOCOL
    return cells, next(iter(protocols)) if len(protocols) == 1 else None


def representation_label(row: Mapping[str, Any]) -> str:
    """ "wf=text st=code fn=code" over the memory types a point uses."""
    parts = [f"{t}={row[f'repr_{t}']}" for t in MEMORY_TYPES if row.get(f"repr_{t}")]
    return " ".join(parts)


@dataclass(frozen=True)
class Table:
    name: str  # CSV file stem
    title: str
    frame: pd.DataFrame
    caption: str = ""


def paper_tables(cells: pd.DataFrame) -> tuple[list[Table], list[str]]:
    """Main (method × student × benchmark), memory ablation, representation and
    protocol tables; a note for each one the sweep has nothing to show in."""
    tables: list[Table] = []
    notes: list[str] = []
    if cells.empty:
        return tables, ["no points in this sweep: no tables"]
    main, protocol = _preferred_protocol(cells)
    where = f" (protocol: {protocol})" if protocol else ""
    tables.append(
        Table(
            "table_main",
            f"Method × student × benchmark{where}",
            pivot(main, ["student", "method"], "benchmark"),
        )
    )
    students = main[main["role"] == "student"]
    if students["memory_types"].nunique() > 1:
        tables.append(
            Table(
                "table_memory",
                f"Memory ablation{where}",
                pivot(students, ["student", "memory_types"], "benchmark"),
            )
        )
    else:
        notes.append("memory ablation table: one memory configuration in this sweep")
    labels = pd.Series(
        [representation_label(r) for _, r in students.iterrows()],
        index=students.index,
        dtype=object,
    )
    with_repr = students.assign(representation=labels).loc[labels != ""]
    if with_repr["representation"].nunique() > 1:
        frame = pivot(with_repr, ["student", "memory_types", "representation"], "benchmark")
        frame = frame.drop(columns=[c for c in frame.columns if c.startswith("repr_")])
        tables.append(Table("table_representation", f"Representation{where}", frame))
    else:
        notes.append("representation table: the representation does not vary in this sweep")
    if cells["protocol"].nunique() > 1:
        tables.append(
            Table("table_protocol", "Protocols", pivot(cells, ["student", "method"], "protocol"))
        )
    else:
        notes.append(f"protocol table: one protocol ({protocol}) in this sweep")
    return tables, notes


def mcnemar_table(stats: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Each student method point against the zero-shot point of the same student,
    benchmark, protocol and seed, on the tasks scored in both (preferring a zero-shot
    point evaluated on the same task split). b = tasks only the method solved, c = tasks
    only zero-shot solved; exact binomial when b + c < 25, else chi-square with
    continuity correction."""
    match = ["student", "benchmark", "protocol", "seed"]
    zero = stats[stats["method_kind"] == "zero_shot"]
    others = stats[(stats["role"] == "student") & (stats["method_kind"] != "zero_shot")]
    outcome = {
        pid: frame.dropna(subset=["success"]).set_index("task_id")["success"].astype(bool)
        for pid, frame in episodes.groupby("point_id")
    }
    rows = []
    for point in others.itertuples(index=False):
        candidates = zero
        for key in match:
            candidates = candidates[candidates[key] == getattr(point, key)]
        if candidates.empty:
            continue
        mine = outcome.get(point.point_id, pd.Series(dtype=bool))
        best: tuple[int, int, str, pd.DataFrame] | None = None
        for ref in candidates.itertuples(index=False):
            theirs = outcome.get(ref.point_id, pd.Series(dtype=bool))
            paired = pd.concat([mine.rename("m"), theirs.rename("z")], axis=1, join="inner")
            rank = (int(ref.eval_task_ids_sha == point.eval_task_ids_sha), len(paired))
            if best is None or rank > best[:2]:
                best = (*rank, ref.point_id, paired)
        assert best is not None
        paired, ref_id = best[3], best[2]
        b = int((paired["m"] & ~paired["z"]).sum())
        c = int((~paired["m"] & paired["z"]).sum())
        test = mcnemar(b, c)
        n = len(paired)
        rows.append(
            {
                **{k: getattr(point, k) for k in CELL_KEYS},
                "seed": point.seed,
                "point_id": point.point_id,
                "zero_shot_point_id": ref_id,
                "n_pairs": n,
                "rate": paired["m"].mean() if n else np.nan,
                "zero_shot_rate": paired["z"].mean() if n else np.nan,
                "both": int((paired["m"] & paired["z"]).sum()),
                "neither": int((~paired["m"] & ~paired["z"]).sum()),
                "b": b,
                "c": c,
                "test": test.method,
                "statistic": test.statistic,
                "p": test.p,
            }
        )
    columns = [
        *CELL_KEYS,
        "seed",
        "point_id",
        "zero_shot_point_id",
        "n_pairs",
        "rate",
        "zero_shot_rate",
        "both",
        "neither",
        "b",
        "c",
        "test",
        "statistic",
        "p",
    ]
    return pd.DataFrame(rows, columns=columns)


def steps_against_teacher(stats: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per (student point, task) scored on both sides: the student's steps and the
    teacher's (mean over the teacher's points of that benchmark) on the same task. A
    point with a teacher is compared with that teacher; zero-shot and student-memory
    points with every teacher of their benchmark."""
    scored = episodes[episodes["success"].notna()]
    teachers = stats[stats["role"] == "teacher"][["point_id", "teacher", "benchmark"]]
    t_eps = scored.merge(teachers, on="point_id")
    if t_eps.empty:
        return pd.DataFrame()
    t_steps = (
        t_eps.groupby(["teacher", "benchmark", "task_id"])
        .agg(teacher_steps=("total_steps", "mean"), teacher_success=("success", "max"))
        .reset_index()
    )
    students = stats[stats["role"] == "student"][
        ["point_id", *(k for k in CELL_KEYS if k != "teacher"), "teacher", "seed"]
    ]
    s_eps = scored.merge(students, on="point_id")
    with_teacher = s_eps[s_eps["teacher"] != ""].merge(
        t_steps, on=["teacher", "benchmark", "task_id"]
    )
    without = (
        s_eps[s_eps["teacher"] == ""]
        .drop(columns="teacher")
        .merge(t_steps, on=["benchmark", "task_id"])
    )
    out = pd.concat([with_teacher, without], ignore_index=True)
    return out.rename(columns={"total_steps": "student_steps"})


def steps_summary(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per cell and teacher: mean steps per task of student and teacher on the shared
    scored tasks, and on the tasks both solved (the paper's efficiency comparison)."""
    if pairs.empty:
        return pd.DataFrame()
    keys = [k for k in CELL_KEYS if k in pairs.columns]
    both = pairs["success"].astype(bool) & pairs["teacher_success"].astype(bool)
    frame = pairs.assign(
        s_both=pairs["student_steps"].where(both), t_both=pairs["teacher_steps"].where(both)
    )
    out = (
        frame.groupby(keys, sort=False)
        .agg(
            n_tasks=("task_id", "size"),
            student_steps=("student_steps", "mean"),
            teacher_steps=("teacher_steps", "mean"),
            n_both_solved=("s_both", "count"),
            student_steps_both_solved=("s_both", "mean"),
            teacher_steps_both_solved=("t_both", "mean"),
        )
        .reset_index()
    )
    out["ratio"] = out["student_steps"] / out["teacher_steps"].where(out["teacher_steps"] > 0)
    return out


# -- plots ------------------------------------------------------------------------------------


def _figure(ncols: int = 1, width: float = 6.0, height: float = 4.2) -> Any:
    # An explicit Figure with the Agg canvas: no pyplot global state, no display needed,
    # and no backend switch imposed on a process that imports this module.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, ncols, squeeze=False)[0]
    return fig, list(axes)


def _varying(frame: pd.DataFrame, keys: Iterable[str]) -> list[str]:
    return [k for k in keys if k in frame.columns and frame[k].nunique() > 1]


def _label_keys(lines: pd.DataFrame, exclude: Sequence[str] = ()) -> list[str]:
    """Short legend keys: the method, then only what tells lines of one method apart."""
    candidates = [k for k in ("student", *DISAMBIGUATORS) if k not in exclude]
    return distinguishing(lines, ["method"], candidates)


def _line_label(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    parts = []
    for k in keys:
        value = str(row[k])
        if k in ("method", "student", "memory_types"):
            parts.append(_display(k, value))
        elif value:  # "k_wf=–" on a zero-shot line says nothing
            parts.append(f"{k}={value}")
    return ", ".join(parts)


def _errorbars(cells: pd.DataFrame) -> np.ndarray:
    return 100 * np.vstack(
        [
            (cells["rate"] - cells["ci_low"]).clip(lower=0),
            (cells["ci_high"] - cells["rate"]).clip(lower=0),
        ]
    )


def plot_success_vs_k(cells: pd.DataFrame, path: Path) -> str | None:
    """Success vs k, one panel per memory type whose k varies, one line per setting of
    everything else. Returns a note when there is nothing to plot."""
    students = cells[(cells["role"] == "student") & cells["n"].gt(0)]
    panels = []
    for t in MEMORY_TYPES:
        column = f"k_{t}"
        data = students[students[column] != ""]
        if data[column].nunique() < 2:
            continue
        group_keys = [k for k in CELL_KEYS if k != column]
        lines = [g for _, g in data.groupby(group_keys, sort=False) if g[column].nunique() > 1]
        if lines:
            panels.append((t, lines))
    if not panels:
        return "success vs k: k does not vary within any memory configuration in this sweep"
    fig, axes = _figure(len(panels))
    zero = cells[cells["method_kind"] == "zero_shot"]
    for ax, (t, lines) in zip(axes, panels, strict=True):
        firsts = pd.DataFrame([g.iloc[0] for g in lines])
        label_keys = _label_keys(firsts, exclude=[f"k_{t}"])
        for g in lines:
            g = g.assign(_k=g[f"k_{t}"].astype(float)).sort_values("_k")
            ax.errorbar(
                g["_k"],
                100 * g["rate"],
                yerr=_errorbars(g),
                marker="o",
                capsize=3,
                label=_line_label(g.iloc[0], label_keys),
            )
        refs = zero.merge(firsts[["student", "benchmark", "protocol"]].drop_duplicates())
        for ref in refs.itertuples(index=False):
            ax.axhline(100 * ref.rate, linestyle=":", color="grey")
            ax.annotate(
                f"zero-shot {ref.student}",
                (ax.get_xlim()[0], 100 * ref.rate),
                fontsize=7,
                color="grey",
                va="bottom",
            )
        ax.set_xlabel(f"k ({t.upper()})")
        ax.set_ylabel("success rate (%)")
        ax.set_title(f"Success vs k, {t.upper()}")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)
    return None


def plot_student_size(cells: pd.DataFrame, path: Path) -> str | None:
    """Success and gain over zero-shot vs student size (billions of parameters)."""
    students = cells[
        (cells["role"] == "student") & cells["student_params_b"].notna() & cells["n"].gt(0)
    ]
    if students["student_params_b"].nunique() < 2:
        return (
            "success vs student size: fewer than two student sizes (student_params_b) in this sweep"
        )
    fig, (left, right) = _figure(2)
    group_keys = [k for k in CELL_KEYS if k != "student"]
    lines = list(students.groupby(group_keys, sort=False))
    firsts = pd.DataFrame([g.iloc[0] for _, g in lines])
    label_keys = _label_keys(firsts, exclude=["student"])
    for _, g in lines:
        g = g.sort_values("student_params_b")
        label = _line_label(g.iloc[0], label_keys)
        left.errorbar(
            g["student_params_b"],
            100 * g["rate"],
            yerr=_errorbars(g),
            marker="o",
            capsize=3,
            label=label,
        )
        if g.iloc[0]["method_kind"] != "zero_shot" and g["gain_pp"].notna().any():
            right.plot(g["student_params_b"], g["gain_pp"], marker="o", label=label)
    sizes = sorted(students["student_params_b"].unique())
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(sizes, [f"{s:g}B" for s in sizes])
        ax.minorticks_off()
        ax.set_xlabel("student size (parameters)")
    left.set_ylabel("success rate (%)")
    left.set_title("Success vs student size")
    left.legend(fontsize=7)
    right.axhline(0, color="grey", linewidth=0.8)
    right.set_ylabel("gain over zero-shot (points)")
    right.set_title("Gain over zero-shot vs student size")
    if right.get_legend_handles_labels()[0]:
        right.legend(fontsize=7)
    fig.savefig(path, dpi=120)
    return None


def plot_steps_vs_teacher(pairs: pd.DataFrame, path: Path) -> str | None:
    if pairs.empty:
        return (
            "steps vs teacher: no task scored for both a teacher and a student (no "
            "teacher point, or students evaluated on tasks the teacher never played)"
        )
    fig, (ax,) = _figure(1, width=5.5, height=5.0)
    label_keys = _varying(pairs, ["student", "method", "memory_types"]) or ["method"]
    rng = np.random.default_rng(0)  # a little jitter: integer steps overlap a lot
    for name, g in pairs.groupby(label_keys, sort=False):
        values = name if isinstance(name, tuple) else (name,)
        jitter = rng.uniform(-0.15, 0.15, size=(2, len(g)))
        ax.scatter(
            g["teacher_steps"] + jitter[0],
            g["student_steps"] + jitter[1],
            s=18,
            alpha=0.6,
            label=", ".join(_display(k, str(v)) for k, v in zip(label_keys, values, strict=True)),
        )
    top = float(max(pairs["teacher_steps"].max(), pairs["student_steps"].max())) + 1
    ax.plot([0, top], [0, top], linestyle="--", color="grey", linewidth=0.8, label="same steps")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel("teacher steps on the task")
    ax.set_ylabel("student steps on the task")
    ax.set_title("Steps per task: student vs teacher")
    ax.legend(fontsize=7)
    fig.savefig(path, dpi=120)
    return None


def plot_success_vs_cost(cells: pd.DataFrame, use_usd: bool, path: Path) -> str | None:
    column = "cost_usd" if use_usd else "cost_tokens"
    data = cells[cells["n"].gt(0) & cells[column].gt(0)]
    if data.empty:
        return "success vs cost: the sweep recorded no tokens or money for its points"
    fig, (ax,) = _figure(1, width=6.5, height=4.5)
    label_keys = _label_keys(data, exclude=["student"])
    low, high = float(data[column].min()), float(data[column].max())
    log_x = high / low > 100  # costs span orders of magnitude: teacher API vs a small student
    middle = math.sqrt(low * high) if log_x else (low + high) / 2
    for student, g in data.groupby("student", sort=False):
        ax.errorbar(
            g[column], 100 * g["rate"], yerr=_errorbars(g), fmt="o", capsize=3, label=student
        )
        for _, row in g.iterrows():
            # Labels of the right half point left, so they stay inside the axes.
            right = row[column] > middle
            note = ax.annotate(
                _line_label(row, label_keys),
                (row[column], 100 * row["rate"]),
                fontsize=6,
                xytext=(-3 if right else 3, 3),
                textcoords="offset points",
                ha="right" if right else "left",
            )
            note.set_in_layout(False)  # a long label must not squash the axes
    ax.margins(x=0.08)
    if log_x:
        ax.set_xscale("log")
    ax.set_xlabel(
        "cost per point (USD, every stage it depends on)"
        if use_usd
        else "tokens per point (every stage it depends on)"
    )
    ax.set_ylabel("success rate (%)")
    ax.set_title("Success vs cost")
    ax.legend(fontsize=7, title="agent")
    fig.savefig(path, dpi=120)
    return None


# -- the report -------------------------------------------------------------------------------------

PLOT_FILES = MappingProxyType(
    {
        "success_vs_k": "success_vs_k.png",
        "student_size": "student_size.png",
        "steps_vs_teacher": "steps_vs_teacher.png",
        "success_vs_cost": "success_vs_cost.png",
    }
)
TABLE_FILES = (
    "cells",
    "table_main",
    "table_memory",
    "table_representation",
    "table_protocol",
    "mcnemar",
    "steps_vs_teacher",
    "costs_breakdown",
    "costs_stages",
    "costs_points",
)


@dataclass(frozen=True)
class Report:
    sweep_id: str
    sweep_dir: str
    out_dir: Path
    markdown: str
    tables: Mapping[str, pd.DataFrame]  # CSV stem -> table (also written as CSV)
    plots: Mapping[str, Path]  # plot name -> PNG written
    notes: tuple[str, ...]  # what was skipped and why, data warnings
    files: tuple[Path, ...]
    picked: str | None = None  # which sweep of an output root was chosen, and why
    mlflow_run_id: str | None = None  # the parent run the files were logged to
    mlflow_note: str = ""  # why they were not (or where they went)
    mlflow_failed: bool = False
    summary: Mapping[str, Any] = field(default_factory=dict)

    def console(self) -> str:
        """What `distillery report` prints."""
        s = self.summary
        lines = []
        if self.picked:
            lines.append(self.picked)
        lines.append(
            f"sweep {self.sweep_id} ({s.get('experiment') or 'experiment ?'}): "
            f"{s.get('n_points', 0)} points, {s.get('n_episodes', 0)} episodes "
            f"({s.get('n_scored', 0)} scored, {s.get('n_infra', 0)} infrastructure failures)"
        )
        main = self.tables.get("table_main")
        if main is not None and not main.empty:
            lines += ["", markdown_table(main), ""]
        lines.append(f"cost: {s.get('cost_line', '')}")
        lines += [f"note: {n}" for n in self.notes]
        n_png = len(self.plots)
        n_csv = sum(1 for f in self.files if f.suffix == ".csv")
        lines.append(
            f"wrote {len(self.files)} files to {self.out_dir} (report.md, {n_png} plots, "
            f"{n_csv} tables)"
        )
        lines.append(self.mlflow_note)
        return "\n".join(line for line in lines if line is not None)


def _md_escape(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def markdown_table(frame: pd.DataFrame) -> str:
    header = "| " + " | ".join(_md_escape(c) for c in frame.columns) + " |"
    rule = "|" + "|".join("---" for _ in frame.columns) + "|"
    body = [
        "| " + " | ".join(_md_escape(v) for v in row) + " |"
        for row in frame.itertuples(index=False, name=None)
    ]
    return "\n".join([header, rule, *body])


def _money(usd: float) -> str:
    """Three significant digits below $1 (small sweeps cost cents), cents above."""
    if usd == 0:
        return "$0"
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.3g}"


def _fixed(digits: int) -> Any:
    """A formatter that shows a missing number (NaN) as "–", not "nan"."""
    return lambda v: _NA if v is None or pd.isna(v) else f"{v:.{digits}f}"


def _p(p: float) -> str:
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _cost_line(breakdown: pd.DataFrame, use_usd: bool, unpriced: list[str]) -> str:
    total = breakdown[breakdown["category"] == "total"].iloc[0]
    parts = breakdown[(breakdown["category"] != "total")]
    time_used = f"{total['wall_s']:.0f} s wall, {total['gpu_s']:.0f} GPU-s"
    if parts.empty:
        return "no stages recorded"
    if not use_usd:
        by_category = ", ".join(f"{r.category} {int(r.tokens):,}" for r in parts.itertuples())
        return (
            f"{int(total['tokens']):,} tokens in all ({by_category}); {time_used}; "
            "no prices (set cost.prices to get USD)"
        )
    by_category = ", ".join(f"{r.category} {_money(r.usd)}" for r in parts.itertuples())
    line = f"{_money(total['usd'])} in all ({by_category}); {int(total['tokens']):,} tokens, "
    line += time_used
    if unpriced:
        line += f"; no price for {', '.join(unpriced)} (counted as $0)"
    return line


def _clean(out_dir: Path) -> None:
    """Remove this module's own files from an earlier report (a plot that is skipped
    now must not linger); nothing else in the folder is touched."""
    for name in ["report.md", *PLOT_FILES.values(), *(f"{t}.csv" for t in TABLE_FILES)]:
        (out_dir / name).unlink(missing_ok=True)


def _default_out(data: SweepData) -> Path:
    if data.location.is_local:
        return data.location.local_path / "report"
    return Path("distillery_reports") / data.sweep_id  # a remote sweep: report locally


def build_report(
    sweep_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    log_to_mlflow: bool = True,
) -> Report:
    """Compute every table, test, cost and plot of a sweep, write them into `out_dir`
    (default `<sweep_dir>/report`) and, unless `log_to_mlflow` is false or sweep.json has
    no parent run, log them to the parent run under `report/`. `sweep_dir` may be an
    output root: its most recent sweep is used."""
    data, picked = load_sweep(sweep_dir)
    out = Path(out_dir) if out_dir is not None else _default_out(data)
    out.mkdir(parents=True, exist_ok=True)
    _clean(out)
    notes = list(data.notes)

    stats = point_stats(data.points, data.episodes)
    cells = cell_table(stats)
    prices = data.prices
    s_costs = stage_costs(data.stages, prices)
    p_costs = point_costs(data.points, s_costs)
    breakdown = cost_breakdown(s_costs)
    # With no price table at all every model is unpriced: say "no prices" once instead.
    unpriced = unpriced_models(s_costs) if prices.has_prices else []
    use_usd = prices.has_prices and bool(breakdown["usd"].sum() > 0)
    missing = int(p_costs["missing_stages"].sum()) if not p_costs.empty else 0
    if missing:
        notes.append(
            f"{missing} upstream stage reference(s) of points are not in stages.parquet; "
            "those points' costs are incomplete"
        )
    if not cells.empty:
        per_point = stats[["point_id", *CELL_KEYS]].merge(
            p_costs[["point_id", "usd", "tokens"]], on="point_id", how="left"
        )
        cell_cost = per_point.groupby(list(CELL_KEYS), sort=False)[["usd", "tokens"]].mean()
        cell_cost.columns = ["cost_usd", "cost_tokens"]
        cells = cells.join(cell_cost, on=list(CELL_KEYS))

    tables, table_notes = paper_tables(cells)
    notes += table_notes
    notes += repeat_notes(data.points, data.episodes, CELL_KEYS)
    tests = mcnemar_table(stats, data.episodes)
    pairs = steps_against_teacher(stats, data.episodes)
    steps = steps_summary(pairs)

    plots: dict[str, Path] = {}
    if not cells.empty:
        makers = {
            "success_vs_k": lambda p: plot_success_vs_k(cells, p),
            "student_size": lambda p: plot_student_size(cells, p),
            "steps_vs_teacher": lambda p: plot_steps_vs_teacher(pairs, p),
            "success_vs_cost": lambda p: plot_success_vs_cost(cells, use_usd, p),
        }
        for name, make in makers.items():
            target = out / PLOT_FILES[name]
            note = make(target)
            if note:
                notes.append(note)
            else:
                plots[name] = target

    point_view = stats[["point_id", *CELL_KEYS, "seed", "n_scored", "rate"]].merge(
        p_costs, on="point_id"
    )
    all_tables: dict[str, pd.DataFrame] = {
        "cells": cells,
        **{t.name: t.frame for t in tables},
        "mcnemar": tests,
        "steps_vs_teacher": steps,
        "costs_breakdown": breakdown,
        "costs_stages": s_costs,
        "costs_points": point_view,
    }
    files: list[Path] = []
    for name, frame in all_tables.items():
        target = out / f"{name}.csv"
        frame.to_csv(target, index=False)
        files.append(target)
    summary = {
        "experiment": data.meta.get("experiment"),
        "n_points": len(data.points),
        "n_episodes": len(data.episodes),
        "n_scored": int(data.episodes["success"].notna().sum()),
        "n_infra": int(data.episodes["success"].isna().sum()),
        "seeds": sorted(int(s) for s in data.points["seed"].unique()),
        "cost_line": _cost_line(breakdown, use_usd, unpriced),
        "use_usd": use_usd,
        "unpriced": unpriced,
    }
    markdown = render_markdown(
        data, summary, tables, tests, steps, breakdown, point_view, plots, notes, use_usd
    )
    (out / "report.md").write_text(markdown)
    files = [out / "report.md", *plots.values(), *files]

    report = Report(
        sweep_id=data.sweep_id,
        sweep_dir=data.location.uri,
        out_dir=out,
        markdown=markdown,
        tables=MappingProxyType(all_tables),
        plots=MappingProxyType(plots),
        notes=tuple(notes),
        files=tuple(files),
        picked=picked,
        summary=MappingProxyType(summary),
    )
    return _with_mlflow(report, data.meta, log_to_mlflow)


def _key_columns(frame: pd.DataFrame, base: Sequence[str]) -> dict[str, pd.Series]:
    """Display columns for `base` plus whatever descriptors tell its rows apart."""
    keys = distinguishing(frame, base, DISAMBIGUATORS)
    return {k: frame[k].map(lambda v, k=k: _display(k, str(v))) for k in keys}


def render_markdown(
    data: SweepData,
    summary: Mapping[str, Any],
    tables: Sequence[Table],
    tests: pd.DataFrame,
    steps: pd.DataFrame,
    breakdown: pd.DataFrame,
    point_view: pd.DataFrame,
    plots: Mapping[str, Path],
    notes: Sequence[str],
    use_usd: bool,
) -> str:
    meta = data.meta
    created = meta.get("created_at")
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(created))) if created else "?"
    md = [
        f"# Sweep report: {data.sweep_id}",
        "",
        f"Experiment `{meta.get('experiment', '?')}` · {summary['n_points']} points · "
        f"{summary['n_episodes']} episodes ({summary['n_scored']} scored, "
        f"{summary['n_infra']} infrastructure failures, not scored) · seeds "
        f"{', '.join(map(str, summary['seeds'])) or _NA} · git `{meta.get('git_sha', '?')}` · "
        f"created {when}",
        "",
        "Each cell: success rate over scored episodes pooled over seeds, [95 % Wilson "
        "interval], n = scored episodes; with several seeds, then the mean ± sample std of "
        "the per-seed success rates (percent). A cell is every point with the same "
        "descriptors except the seed.",
    ]
    for table in tables:
        md += ["", f"## {table.title}", "", markdown_table(table.frame)]
    md += ["", "## Paired test against zero-shot (McNemar)", ""]
    if tests.empty:
        md.append(
            "No method point has a zero-shot point of the same student, benchmark, "
            "protocol and seed to pair with."
        )
    else:
        md.append(
            "Same student, benchmark, protocol and seed, on the tasks scored in both. "
            "b = tasks only the method solved, c = tasks only zero-shot solved; exact "
            "binomial test when b + c < 25, else chi-square with continuity correction."
        )
        md.append("")
        view = pd.DataFrame(
            {
                **_key_columns(tests, ["method", "student"]),
                "seed": tests["seed"],
                "tasks": tests["n_pairs"],
                "method %": (100 * tests["rate"]).map(_fixed(1)),
                "zero-shot %": (100 * tests["zero_shot_rate"]).map(_fixed(1)),
                "b": tests["b"],
                "c": tests["c"],
                "test": tests["test"],
                "p": tests["p"].map(_p),
            }
        )
        md.append(markdown_table(view))
    md += ["", "## Cost", ""]
    md.append(
        "By category, every distinct stage counted once (what the sweep spent). Embedding "
        "tokens are approximate. Wall time and GPU-seconds stay with the stage that used "
        "them."
    )
    md.append("")
    md.append(
        markdown_table(
            pd.DataFrame(
                {
                    "category": breakdown["category"],
                    "tokens in": breakdown["tokens_in"].map("{:,}".format),
                    "tokens out": breakdown["tokens_out"].map("{:,}".format),
                    "embedding tokens": breakdown["embed_tokens"].map("{:,}".format),
                    "LLM calls": breakdown["n_llm_calls"].map("{:,}".format),
                    "wall s": breakdown["wall_s"].map("{:.0f}".format),
                    "GPU s": breakdown["gpu_s"].map("{:.0f}".format),
                    "USD": breakdown["usd"].map(_money),
                }
            )
        )
    )
    if not use_usd:
        md += ["", "No prices in `cost.prices`: money is 0 and plots use tokens."]
    if summary["unpriced"]:
        md += [
            "",
            f"No price for: {', '.join(summary['unpriced'])} (their tokens count, "
            "their money is 0: the USD total is a lower bound).",
        ]
    md += [
        "",
        "Per point, every stage it depends on counted in full (what reproducing that "
        "one result alone would cost):",
        "",
    ]
    md.append(
        markdown_table(
            pd.DataFrame(
                {
                    **_key_columns(
                        point_view, ["method", "student", "benchmark", "protocol", "seed"]
                    ),
                    "tokens": point_view["tokens"].map("{:,}".format),
                    **{f"USD {c}": point_view[f"usd_{c}"].map(_money) for c in CATEGORIES},
                    "USD": point_view["usd"].map(_money),
                    "wall s": point_view["wall_s"].map("{:.0f}".format),
                }
            )
        )
    )
    if not steps.empty:
        md += [
            "",
            "## Steps per task against the teacher",
            "",
            "Mean steps on the tasks scored for both; and on the tasks both solved.",
            "",
        ]
        md.append(
            markdown_table(
                pd.DataFrame(
                    {
                        **_key_columns(steps, ["student", "method", "benchmark", "protocol"]),
                        "tasks": steps["n_tasks"],
                        "student steps": steps["student_steps"].map(_fixed(2)),
                        "teacher steps": steps["teacher_steps"].map(_fixed(2)),
                        "ratio": steps["ratio"].map(_fixed(2)),
                        "both solved": steps["n_both_solved"],
                        "student (both solved)": steps["student_steps_both_solved"].map(_fixed(2)),
                        "teacher (both solved)": steps["teacher_steps_both_solved"].map(_fixed(2)),
                    }
                )
            )
        )
    titles = {
        "success_vs_k": "Success vs k",
        "student_size": "Success and gain vs student size",
        "steps_vs_teacher": "Steps per task against the teacher",
        "success_vs_cost": "Success vs cost",
    }
    if plots:
        md += ["", "## Plots", ""]
        md += [f"![{titles[name]}]({path.name})" for name, path in plots.items()]
    if notes:
        md += ["", "## Not shown", ""]
        md += [f"- {n}" for n in notes]
    md += [
        "",
        "Tables as CSV: "
        + ", ".join(
            f"[{t}.csv]({t}.csv)"
            for t in [
                "cells",
                *(t.name for t in tables),
                "mcnemar",
                "costs_breakdown",
                "costs_points",
                "costs_stages",
            ]
        )
        + ("" if steps.empty else ", [steps_vs_teacher.csv](steps_vs_teacher.csv)"),
        "",
    ]
    return "\n".join(md)


# -- MLflow --------------------------------------------------------------------------------------


def _tracking_store_missing(uri: str) -> str | None:
    """A local store that does not exist: MLflow would silently create an empty one."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
    elif uri.startswith("file://"):
        path = Path(uri.removeprefix("file://"))
    elif "://" not in uri:
        path = Path(uri)
    else:
        return None
    return None if path.exists() else str(path)


def log_report(out_dir: Path, tracking_uri: str, run_id: str) -> str:
    """Log every file of `out_dir` to run `run_id` under `report/`; returns the
    artifact URI. Raises on a missing run or store (callers decide how loud to be)."""
    import os

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    missing = _tracking_store_missing(tracking_uri)
    if missing:
        raise FileNotFoundError(
            f"tracking store {missing} not found (a relative tracking URI is resolved from "
            "the directory the report runs in: run it where the sweep ran)"
        )
    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)  # fails loudly for a deleted/unknown run
    client.log_artifacts(run_id, str(out_dir), artifact_path="report")
    client.set_tag(run_id, "distillery.report", "report/report.md")
    return f"{run.info.artifact_uri}/report"


def _with_mlflow(report: Report, meta: Mapping[str, Any], enabled: bool) -> Report:
    from dataclasses import replace

    run_id = meta.get("parent_run_id")
    uri = meta.get("tracking_uri")
    if not enabled:
        return replace(report, mlflow_note="not logged to MLflow (--no-mlflow)")
    if not run_id or not uri:
        return replace(
            report,
            mlflow_note="not logged to MLflow: sweep.json names no "
            "parent run (the sweep ran without tracking)",
        )
    if REDACTED in str(uri):  # a key in the URI is never stored: the user's own URI
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            return replace(
                report,
                mlflow_failed=True,
                mlflow_note="not logged to MLflow: the sweep's tracking URI held a key, which "
                "is never stored; set MLFLOW_TRACKING_URI to it and run the report again",
            )
    try:
        where = log_report(report.out_dir, str(uri), str(run_id))
    except Exception as exc:  # any store/network error: the files are written anyway
        return replace(
            report,
            mlflow_failed=True,
            mlflow_note=f"could not log to MLflow run {run_id} at {uri}: {exc}",
        )
    return replace(
        report,
        mlflow_run_id=str(run_id),
        mlflow_note=f"logged to MLflow run {run_id} under report/ ({where})",
    )


# -- CLI -----------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="distillery report",
        description="Tables with 95 % CIs, McNemar tests, plots and costs of a sweep.",
    )
    parser.add_argument(
        "path",
        nargs="?",
        default="distillery_runs",
        help="a sweep directory (<output_dir>/sweeps/<id>) or an output root, whose most "
        "recent sweep is reported (default: distillery_runs)",
    )
    parser.add_argument("--out", default=None, help="where to write (default: SWEEP_DIR/report)")
    parser.add_argument(
        "--no-mlflow",
        action="store_true",
        help="do not log the report to the sweep's MLflow parent run",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        report = build_report(args.path, args.out, log_to_mlflow=not args.no_mlflow)
    except ReportError as exc:
        print(f"distillery report: {exc}", file=sys.stderr)
        return 2
    print(report.console())
    if report.mlflow_failed:
        print(f"distillery report: {report.mlflow_note}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
