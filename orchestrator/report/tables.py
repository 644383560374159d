"""Paper-style tables: cells pivoted by method, memory, representation and protocol."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, cast

import pandas as pd

from distillery.orchestrator.report.load import _text, kind_rank
from distillery.orchestrator.report.stats import _NA
from distillery.orchestrator.state.sweep_tables import MethodColumns
from distillery.orchestrator.tracking.links import markdown_link, run_url

# Keys a table may add to its rows to tell apart cells that its focus keys would merge;
# a sweep's memory methods' columns go after the student (`disambiguators`).
DISAMBIGUATORS: tuple[str, ...] = (
    "method",
    "memory_types",
    "teacher",
    "student",
    "protocol",
    "benchmark",
    "benchmark_variant",
)


def disambiguators(columns: MethodColumns | None = None) -> tuple[str, ...]:
    """DISAMBIGUATORS with the methods' report columns after the student."""
    split = DISAMBIGUATORS.index("student") + 1
    own = columns.distinguishing_order if columns else ()
    return (*DISAMBIGUATORS[:split], *own, *DISAMBIGUATORS[split:])


_PREFERRED_PROTOCOL = "main"


def _display(column: str, value: str) -> str:
    if column == "memory_types":
        return value or "none"
    return value or _NA


def pivot(
    cells: pd.DataFrame,
    rows: Sequence[str],
    column: str,
    value: str = "label",
    candidates: Sequence[str] = DISAMBIGUATORS,
) -> pd.DataFrame:
    """A paper-style table: `rows` keys down, one column per value of `column`. Keys
    that differ between cells the row keys would merge (e.g. k in a table by method)
    are added to the rows, in `candidates` order (see `disambiguators`), so no two
    cells collapse."""
    index = distinguishing(cells, [*rows, column], [k for k in candidates if k != column])
    index.remove(column)
    # Rows in reading order (zero-shot before memory methods), whatever column has them.
    sort_by = [("_kind" if k == "method" else k) for k in index]
    if "method" in index:
        sort_by.insert(sort_by.index("_kind") + 1, "method")
    kinds = cells["method_kind"].map(kind_rank)
    ordered = (
        cells.assign(_kind=kinds).sort_values(sort_by, kind="stable").drop_duplicates(index)[index]
    )
    columns = sorted(cells[column].unique())
    lookup: dict[tuple[str, ...], list[str]] = {}
    for row in cells.to_dict("records"):  # a method's column need not be an identifier
        key = (*(row[k] for k in index), row[column])
        lookup.setdefault(key, []).append(str(row[value]))
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


def representation_label(row: Mapping[Any, Any], columns: MethodColumns) -> str:
    """ "<collection>=<representation> ..." over the collections a point reads (its
    methods' text columns that are set), e.g. "notes=text" for a `style_notes` column
    of a collection "notes" (a column of no collection is named as it is)."""
    parts = [f"{columns.collection(c) or c}={row[c]}" for c in columns.representation if row.get(c)]
    return " ".join(parts)


@dataclass(frozen=True)
class Table:
    name: str  # CSV file stem
    title: str
    frame: pd.DataFrame
    caption: str = ""
    # The same table with each cell linked to its MLflow child run(s), for report.md.
    linked: pd.DataFrame | None = None
    # The numbers behind the table, one row per cell (its descriptors, then rates,
    # interval, n, ...): what the CSV holds. The formatted labels are report.md's only.
    numbers: pd.DataFrame | None = None

    @property
    def csv(self) -> pd.DataFrame:
        return self.frame if self.numbers is None else self.numbers

    @property
    def markdown(self) -> pd.DataFrame:
        return self.frame if self.linked is None else self.linked


def link_cells(
    cells: pd.DataFrame, stats: pd.DataFrame, meta: Mapping[str, Any], ui_url: str | None = None
) -> pd.DataFrame:
    """`cells` plus `label_md`: the label as a link to the cell's MLflow child run, or,
    for a cell of several seeds, followed by one link per seed's run. Cells of points
    without a run (a sweep run without tracking) keep the plain label."""
    if cells.empty:
        return cells.assign(label_md=pd.Series(dtype=object))
    uri = meta.get("tracking_uri")
    experiment_id = meta.get("mlflow_experiment_id")
    by_point = stats.set_index("point_id")
    linked = []
    for label, point_ids in zip(cells["label"], cells["point_ids"], strict=True):
        runs = []
        for pid in str(point_ids).split(","):
            run_id = by_point.at[pid, "mlflow_run_id"] if pid in by_point.index else None
            url = run_url(uri, _text(run_id) or None, experiment_id, ui_url)
            if url:
                runs.append((int(cast(Any, by_point.at[pid, "seed"])), url))
        if len(runs) == 1:
            linked.append(markdown_link(label, runs[0][1]))
        elif runs:
            seeds = " ".join(markdown_link(f"s{seed}", url) for seed, url in sorted(runs))
            linked.append(f"{label} · runs {seeds}")
        else:
            linked.append(label)
    return cells.assign(label_md=linked)


# The numbers of a cell a table's CSV carries (cells.csv has them all).
CELL_NUMBERS: tuple[str, ...] = (
    "n",
    "successes",
    "rate",
    "ci_low",
    "ci_high",
    "n_seeds",
    "seed_mean",
    "seed_std",
    "n_infra",
    "mean_steps",
    "zero_shot_rate",
    "gain_pp",
    "cost_usd",
    "cost_tokens",
    # What a method's own bound left out of its memory (memory_bounds.py).
    "bound_episodes",
    "bullets_cut",
    "examples_too_long",
)
# Text columns of the cells table for report.md only (formatted numbers, links).
CELL_LABELS: tuple[str, ...] = ("label", "label_md")


def cell_numbers(cells: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """One row per cell: its descriptors (`keys`, the table's rows and column first),
    then its numbers."""
    shown = [k for k in keys if k in cells.columns]
    numbers = [c for c in CELL_NUMBERS if c in cells.columns]
    return cells[[*shown, *numbers]].reset_index(drop=True)


def _pivots(
    name: str,
    title: str,
    cells: pd.DataFrame,
    rows: Sequence[str],
    column: str,
    candidates: Sequence[str],
) -> Table:
    frame = pivot(cells, rows, column, candidates=candidates)
    linked = (
        pivot(cells, rows, column, value="label_md", candidates=candidates)
        if "label_md" in cells
        else None
    )
    keys = list(dict.fromkeys([*rows, column, *candidates, "method_kind", "role"]))
    return Table(name, title, frame, linked=linked, numbers=cell_numbers(cells, keys))


def paper_tables(
    cells: pd.DataFrame, columns: MethodColumns | None = None
) -> tuple[list[Table], list[str]]:
    """Memory ablation, representation and protocol tables; a note for each one the
    sweep has nothing to show in (the method × student × benchmark table is Table 1,
    `references.table1`, with its tests). `columns`: the sweep's memory methods'
    report columns (`SweepData.columns`)."""
    columns = columns or MethodColumns()
    candidates = disambiguators(columns)
    tables: list[Table] = []
    notes: list[str] = []
    if cells.empty:
        return tables, ["no points in this sweep: no tables"]
    main, protocol = _preferred_protocol(cells)
    where = f" (protocol: {protocol})" if protocol else ""
    students = main[main["role"] == "student"]
    if students["memory_types"].nunique() > 1:
        tables.append(
            _pivots(
                "table_memory",
                f"Memory ablation{where}",
                students,
                ["student", "memory_types"],
                "benchmark",
                candidates,
            )
        )
    else:
        notes.append("memory ablation table: one memory configuration in this sweep")
    labels = pd.Series(
        [representation_label(r, columns) for r in students.to_dict("records")],
        index=students.index,
        dtype=object,
    )
    with_repr = students.assign(representation=labels).loc[labels != ""]
    if with_repr["representation"].nunique() > 1:
        table = _pivots(
            "table_representation",
            f"Representation{where}",
            with_repr,
            ["student", "memory_types", "representation"],
            "benchmark",
            candidates,
        )

        def no_repr(frame: pd.DataFrame) -> pd.DataFrame:
            return frame.drop(columns=[c for c in frame.columns if c in columns.representation])

        linked = None if table.linked is None else no_repr(table.linked)
        tables.append(replace(table, frame=no_repr(table.frame), linked=linked))
    else:
        notes.append("representation table: the representation does not vary in this sweep")
    if cells["protocol"].nunique() > 1:
        tables.append(
            _pivots(
                "table_protocol", "Protocols", cells, ["student", "method"], "protocol", candidates
            )
        )
    else:
        notes.append(f"protocol table: one protocol ({protocol}) in this sweep")
    return tables, notes
