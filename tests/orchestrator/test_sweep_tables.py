"""The sweep tables' one schema: what the runner writes is what the report reads; files
of other versions are read or refused by name; a method of another package gets its
own report columns (no AMD names in the report)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distillery.orchestrator.report import ReportError, build_report, load_sweep
from distillery.orchestrator.state import sweep_tables
from distillery.orchestrator.state.sweep_tables import (
    EPISODES,
    POINTS,
    MethodColumns,
    SweepTableError,
    read_sweep_table,
    sweep_table,
)
from distillery.workers.trajectories import EPISODE_SCHEMA
from tests.orchestrator.test_report import sweep_rows, write_sweep, write_tables


def _bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return sink.getvalue().to_pybytes()


def test_written_tables_read_back_with_their_method_columns():
    points, episodes = sweep_rows()
    table = read_sweep_table(POINTS, _bytes(sweep_table(POINTS, points)), "points.parquet")
    assert table.schema.field("seed").type == pa.int64()
    rows = {r["point_id"]: r for r in table.to_pylist()}
    assert rows["pA0"]["method_columns"][:3] == ["k_wf", "delta_wf", "repr_wf"]
    assert rows["pZ0"]["method_columns"] == [] and rows["pZ0"]["k_wf"] is None
    columns = MethodColumns.of(table)
    assert columns.depth == ("k_wf", "k_st", "k_fn")  # integers
    assert columns.settings == ("delta_wf", "delta_st", "delta_fn")
    assert columns.representation == ("repr_wf", "repr_st", "repr_fn")  # texts
    assert (columns.collection("k_wf"), columns.setting("k_wf")) == (None, "k_wf")
    # Labelled by the collections the method declares (AmdMethod.collections).
    labelled = MethodColumns.of(table, ["wf", "st", "fn"])
    assert (labelled.collection("repr_st"), labelled.setting("repr_st")) == ("st", "repr")
    # The episodes table holds an episode's numbers typed as the episode files do.
    back = read_sweep_table(EPISODES, _bytes(sweep_table(EPISODES, episodes)), "e")
    assert back.schema.field("total_steps").type == EPISODE_SCHEMA.field("total_steps").type


def test_a_column_no_point_set_takes_the_role_of_its_setting():
    """A Workflow-only sweep: AMD's Subtask and Function columns are null everywhere,
    yet k_st is a k like k_wf (cells keep their columns in the same order)."""
    points, _ = sweep_rows()
    for row in (p for p in points if p["method_kind"] == "amd"):
        for name in ("k_st", "k_fn", "delta_st", "delta_fn", "repr_st", "repr_fn"):
            row[name] = None
    table = sweep_table(POINTS, points)
    assert table.schema.field("k_st").type == pa.null()
    columns = MethodColumns.of(table, ["wf", "st", "fn"])
    assert columns.depth == ("k_wf", "k_st", "k_fn")
    assert columns.settings == ("delta_wf", "delta_st", "delta_fn")
    assert columns.representation == ("repr_wf", "repr_st", "repr_fn")
    # Without the method's collections nothing tells their role: plain settings.
    assert "k_st" in MethodColumns.of(table).settings


def test_the_writer_refuses_a_column_its_schema_lacks():
    with pytest.raises(SweepTableError, match="episodes.parquet: no column steps"):
        sweep_table(EPISODES, [{"point_id": "p", "task_id": "t", "success": True, "steps": 3}])


def test_a_missing_or_unknown_column_is_named_with_the_file(tmp_path):
    sweep = write_sweep(tmp_path)
    points, episodes = sweep_rows()
    table = sweep_table(POINTS, points).drop(["upstream"])
    pq.write_table(table, sweep / "points.parquet")
    with pytest.raises(ReportError, match=r"points\.parquet lacks column\(s\) upstream"):
        load_sweep(sweep)
    write_tables(sweep, points, episodes)
    extra = sweep_table(EPISODES, episodes).append_column("steps", pa.array([1] * len(episodes)))
    pq.write_table(extra, sweep / "episodes.parquet")
    with pytest.raises(ReportError, match=r"episodes\.parquet has column\(s\) steps"):
        load_sweep(sweep)
    # In the points table a column no point lists among its method columns is unknown.
    write_tables(sweep, points, episodes)
    stray = sweep_table(POINTS, points).append_column("n_tasks", pa.array([1] * len(points)))
    pq.write_table(stray, sweep / "points.parquet")
    with pytest.raises(ReportError, match=r"has column\(s\) n_tasks .*method columns"):
        load_sweep(sweep)


def test_an_old_points_table_without_method_columns_still_reports(tmp_path):
    """Tables written before the shared schema: rows as pyarrow inferred them, no
    `method_columns`, no optional columns of later versions (n_scored, stage, ...)."""
    sweep = write_sweep(tmp_path)
    new = build_report(sweep, out_dir=tmp_path / "new", log_to_mlflow=False)
    points, episodes = sweep_rows()
    later = {"method_columns", "n_scored", "n_unscored", "success_rate", "stage", "temperature"}
    old_points = [{k: v for k, v in row.items() if k not in later} for row in points]
    # every row gets every column, as the old writer did
    names = list(dict.fromkeys(k for row in old_points for k in row))
    old_points = [{k: row.get(k) for k in names} for row in old_points]
    pq.write_table(pa.Table.from_pylist(old_points), sweep / "points.parquet")
    pq.write_table(pa.Table.from_pylist(episodes), sweep / "episodes.parquet")
    old = build_report(sweep, out_dir=tmp_path / "old", log_to_mlflow=False)
    for name in ("cells", "table1", "table_memory", "mcnemar"):
        assert old.tables[name].equals(new.tables[name]), name
    assert set(old.plots) == set(new.plots)


def test_a_method_of_another_package_gets_its_own_columns(tmp_path):
    """A toy method's report columns (an integer k and a text style of its `notes`
    collection): its own cells, k plot and representation table, no AMD column."""
    sweep = write_sweep(tmp_path)
    points, episodes = sweep_rows()
    base = [p for p in points if p["method_kind"] != "amd"]
    base_episodes = [e for e in episodes if e["point_id"] in {p["point_id"] for p in base}]
    (zero,) = [p for p in base if p["point_id"] == "pZ0"]
    toy, toy_episodes = [], []
    for i, (k, style) in enumerate([(1, "text"), (2, "text"), (3, "text"), (2, "bullets")]):
        pid = f"pN{i}"
        toy.append(
            {**zero, "point_id": pid, "method": "toy_notes", "method_kind": "toy_notes",
             "memory_types": "notes", "k_notes": k, "style_notes": style}
        )  # fmt: skip
        outcomes = [True] * (i + 2) + [False] * (4 - i)
        toy_episodes += [
            {**e, "point_id": pid, "success": won}
            for e, won in zip(
                [e for e in episodes if e["point_id"] == "pZ0"], outcomes, strict=True
            )
        ]
    write_tables(sweep, [*base, *toy], [*base_episodes, *toy_episodes])
    data, _ = load_sweep(sweep)
    # toy_notes is no installed method: its columns name no collection.
    assert data.columns == MethodColumns(depth=("k_notes",), representation=("style_notes",))
    assert not any(c.startswith(("k_w", "delta", "repr")) for c in data.points.columns)
    report = build_report(sweep, log_to_mlflow=False)
    cells = report.tables["cells"]
    assert "k_notes" in cells.columns and "style_notes" in cells.columns
    toy_cells = cells[cells["method"] == "toy_notes"]
    assert sorted(toy_cells["k_notes"]) == ["1", "2", "2", "3"]
    assert "success_vs_k" in report.plots
    representation = report.views["table_representation"]
    assert set(representation["representation"]) == {"style_notes=text", "style_notes=bullets"}
    assert "style_notes" not in representation.columns
    main = report.views["table1"]
    assert "k_notes" in main.columns  # k tells the toy's cells apart
    assert sweep_tables.METHOD_COLUMNS not in data.points.columns
