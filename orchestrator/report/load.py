"""Reading a sweep's files (sweep.json and its three Parquet tables, checked against
`sweep_tables.py`, the schema the runner writes them with) into normalized frames."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from distillery.orchestrator.report.costs import PriceTable
from distillery.orchestrator.state.sweep_tables import (
    METHOD_COLUMNS,
    POINTS,
    TABLES,
    MethodColumns,
    SweepTableError,
    TableSpec,
    read_sweep_table,
)
from distillery.workers.memory.registry import bank_origin, is_memory_method, memory_method
from distillery.workers.storage import Location

# Descriptors that define a cell (everything but the seed), in display order; a sweep's
# memory methods add their own report columns (`SweepData.cell_keys`).
BASE_CELL_KEYS: tuple[str, ...] = (
    "benchmark",
    "benchmark_variant",
    "protocol",
    "teacher",
    "student",
    "method",
    "method_kind",
    "role",
    "memory_types",
)


class ReportError(Exception):
    """A problem the user fixes (a missing sweep, an unfinished one): message only."""


def _run_hint(root: str) -> str:
    return (
        "run the sweep first: distillery [experiment=... | -m ...] "
        f"output_dir={root} (re-running the same command finishes an interrupted sweep)"
    )


@dataclass(frozen=True)
class SweepData:
    """A sweep's files, loaded and normalized (see `load_sweep`)."""

    location: Location
    meta: Mapping[str, Any]
    points: pd.DataFrame
    episodes: pd.DataFrame
    stages: pd.DataFrame
    notes: tuple[str, ...] = ()
    columns: MethodColumns = MethodColumns()  # the memory methods' report columns

    @property
    def cell_keys(self) -> tuple[str, ...]:
        """What a cell is told apart by: the base keys, then the methods' columns."""
        return cell_keys(self.columns)

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
    if loc.name in ("sweep.json", *(spec.file for spec in TABLES)):
        loc = Location(loc.uri.rsplit("/", 1)[0])  # a file of the sweep: its folder
    if not loc.exists():
        raise ReportError(f"{loc} does not exist; {_run_hint(str(path))}")
    if loc.is_local and not loc.local_path.is_dir():
        raise ReportError(
            f"{loc} is a file, not a folder: give a sweep directory "
            "(<output_dir>/sweeps/<sweep_id>) or an output root"
        )
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


def cell_keys(columns: MethodColumns) -> tuple[str, ...]:
    return (*BASE_CELL_KEYS, *columns.cell_order)


def _read_table(loc: Location, spec: TableSpec, root_hint: str) -> pa.Table:
    target = loc / spec.file
    if not target.exists():
        raise ReportError(
            f"{target} is missing: a sweep writes its tables when its run ends; "
            f"{_run_hint(root_hint)}"
        )
    try:
        return read_sweep_table(spec, target.read_bytes(), str(target))
    except SweepTableError as exc:
        raise ReportError(f"{exc}; re-run the sweep's command to rewrite it") from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise ReportError(
            f"{target} is not a readable Parquet file ({exc}); re-run the sweep's command "
            "to rewrite it"
        ) from None


def _text(value: Any) -> str:
    """A descriptor as a cell key / display string; "" for not applicable."""
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    if isinstance(value, float | np.floating):
        return str(int(value)) if float(value).is_integer() else f"{float(value):g}"
    return str(value)


def normalize_points(points: pd.DataFrame, columns: MethodColumns | None = None) -> pd.DataFrame:
    """Descriptors (the cell keys of `columns`) as strings ("" = not applicable) so
    cells group without NA pitfalls; `student_params_b` stays numeric. Teacher rows are
    keyed by the teacher that played (a teacher point is shared by every config of the
    sweep, whichever student it was written with); zero-shot and student-memory rows
    have no teacher (the teacher does not change them)."""
    out = points.drop(columns=[METHOD_COLUMNS], errors="ignore")
    keys = cell_keys(columns or MethodColumns())
    for column in keys:
        if column not in out.columns:
            out[column] = None
    for column in ("agent", "eval_task_ids_sha", "mlflow_run_id"):
        if column not in out.columns:
            out[column] = None
    if "student_params_b" not in out.columns:
        out["student_params_b"] = np.nan
    out["student_params_b"] = pd.to_numeric(out["student_params_b"], errors="coerce")
    for column in (*keys, "agent", "eval_task_ids_sha"):
        out[column] = out[column].map(_text).astype(object)
    out["seed"] = pd.to_numeric(out["seed"], errors="coerce").fillna(0).astype("int64")
    kind = out["method_kind"].where(out["method_kind"] != "", out["method"])
    out["method_kind"] = kind
    teacher_rows = out["role"] == "teacher"
    agent_or_teacher = out["agent"].where(out["agent"] != "", out["teacher"])
    out.loc[teacher_rows, "teacher"] = agent_or_teacher[teacher_rows]
    out.loc[teacher_rows, "student"] = agent_or_teacher[teacher_rows]
    out.loc[teacher_rows, "student_params_b"] = np.nan
    no_teacher = out["method_kind"].map(lambda k: kind_rank(str(k)) in (1, 2)).astype(bool)
    out.loc[no_teacher, "teacher"] = ""
    return out.drop_duplicates("point_id", keep="last").reset_index(drop=True)


def kind_rank(kind: str) -> int:
    """Reading order of a method kind: the teacher, zero-shot, memory built from the
    student's own runs, memory from the teacher's (a kind no longer registered last)."""
    if kind in ("teacher", "zero_shot"):
        return {"teacher": 0, "zero_shot": 1}[kind]
    if not is_memory_method(kind):
        return 3
    try:
        return 2 if bank_origin(kind) == "student" else 3
    except Exception:  # a broken plugin must not break the report of its old sweeps
        return 3


def _collections(kinds: set[str | None]) -> list[str]:
    """The collection names the sweep's memory methods declare (for column labels); a
    method no longer installed, or broken, declares none."""
    names: list[str] = []
    for kind in sorted(k for k in kinds if k):
        if not is_memory_method(kind):
            continue
        try:
            names += [spec.name for spec in memory_method(kind).collections]
        except Exception:  # a broken plugin must not break the report of its old sweeps
            continue
    return names


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
    try:
        PriceTable.from_dict(meta.get("prices"))
    except (ValueError, TypeError, AttributeError) as exc:
        raise ReportError(
            f"{loc}/sweep.json: prices is not a price table ({type(exc).__name__}: {exc}); "
            "it holds the sweep's cost.prices: re-run the sweep's command to rewrite it"
        ) from None
    tables = {spec.file: _read_table(loc, spec, root_hint) for spec in TABLES}
    points_table = tables[POINTS.file]
    kinds = set(points_table.column("method_kind").to_pylist())
    columns = MethodColumns.of(points_table, _collections(kinds))
    points, episodes, stages = (tables[spec.file].to_pandas() for spec in TABLES)
    notes: list[str] = []
    points = normalize_points(points, columns)
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
        columns,
    )
    return data, picked
