"""The three tables a sweep leaves for `distillery report`: one typed statement of their
columns, written by the runner (`results.py`) and read back by the report
(`report/load.py`) through the same specs, so the two cannot drift apart.

- `points.parquet`: one row per evaluation point: what it is (method, agent, student,
  teacher, benchmark, protocol, seed, ...), its upstream stage hashes, its MLflow run and
  its scored/unscored counts, plus the memory method's own report columns
  (`MemoryMethod.report_columns`), listed per row in `method_columns`;
- `episodes.parquet`: one row per (point, task): the episode's numbers, typed as the
  episode files' columns of the same name (`EpisodeRecord`);
- `stages.parquet`: one row per distinct stage: kind, model, tokens, time (see `costs.py`);
- `stage_figures.parquet` (where a stage reports figures of its own, `stages.StageReport`:
  a brew's training statistics): one row per figure.

A method's report columns are cell descriptors of the report. What the report does with
each follows from its values: integers are numbers of entries read per query (success is
plotted against each one that varies), texts say how entries are shown to the agent (the
representation table pivots by their combination), anything else (a float threshold) is
a plain setting. A column named `<setting>_<collection>`, for a collection the method
declares (`MemoryMethod.collections`), is labelled by that collection in those views; one
no point set takes the role of the same setting of another collection.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from distillery.workers.trajectories import EPISODE_SCHEMA

METHOD_COLUMNS = "method_columns"
# The MLflow tag of an evaluation point's child run listing its method's report columns.
METHOD_COLUMNS_TAG = "distillery.method_columns"


class SweepTableError(ValueError):
    """A sweep table does not match its schema; the message names the file and column."""


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    # Written by every version of distillery: a file without it is not this table. Any
    # other column an older file lacks reads as null.
    required: bool = False


@dataclass(frozen=True)
class TableSpec:
    file: str
    columns: tuple[Column, ...]
    # points: the memory methods' own report columns follow the fixed ones.
    method_columns: bool = False

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.required)

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([(c.name, c.type) for c in self.columns])


def _episode(name: str, required: bool = False) -> Column:
    """A column holding an episode's field: typed as the episode files hold it."""
    return Column(name, EPISODE_SCHEMA.field(name).type, required)


_TEXT = pa.string()
POINTS = TableSpec(
    "points.parquet",
    (
        Column("point_id", _TEXT, required=True),
        Column("method", _TEXT, required=True),
        Column("method_kind", _TEXT),
        Column("role", _TEXT, required=True),
        Column("agent", _TEXT),
        Column("student", _TEXT, required=True),
        Column("teacher", _TEXT, required=True),
        Column("student_params_b", pa.float64()),
        Column("benchmark", _TEXT, required=True),
        # Its options off their defaults that decide what is played ("split=test_challenge",
        # "variant=plus"): "" for the benchmark's defaults; two splits are two cells.
        Column("benchmark_variant", _TEXT),
        Column("protocol", _TEXT, required=True),
        # The method's memory configuration in one text (a method's report column of
        # the same name sets it); "" for points without memory.
        Column("memory_types", _TEXT),
        Column("seed", pa.int64(), required=True),
        # The scored agent's sampling: the report tells repeated runs at temperature 0
        # (the same greedy requests) from sampled ones.
        Column("temperature", pa.float64()),
        Column("sampling_seed", pa.int64()),
        Column("eval_task_ids_sha", _TEXT),
        Column("upstream", pa.list_(_TEXT), required=True),  # its own stage included
        Column("stage", _TEXT),
        Column("mlflow_run_id", _TEXT),
        Column("success_rate", pa.float64()),  # null when no episode was scored
        Column("n_scored", pa.int64()),
        Column("n_unscored", pa.int64()),
        # What the point spends at test time (its scoring stage's `test_time`): the
        # plays a task may get and whether the environment's verdict is fed back
        # between them; and whether a stage it depends on plays or calls the teacher
        # (the AgentBrew paper's Table 1 groups). Null in a sweep written before them.
        Column("uses_teacher", pa.bool_()),
        Column("test_time_rollouts", pa.int64()),
        Column("test_time_feedback", pa.bool_()),
        Column(METHOD_COLUMNS, pa.list_(_TEXT)),
    ),
    method_columns=True,
)
EPISODES = TableSpec(
    "episodes.parquet",
    (
        Column("point_id", _TEXT, required=True),
        _episode("task_id", required=True),
        _episode("group_id"),  # the scenario (AppWorld: scenario goal completion)
        _episode("success", required=True),  # null: an infrastructure failure, not scored
        _episode("termination"),
        _episode("error_type"),
        _episode("total_steps"),
        _episode("n_llm_calls"),
        _episode("tokens_in"),
        _episode("tokens_out"),
        _episode("wall_s"),
        _episode("attempt"),  # plays of the task (an outcome-driven stage's), else 1
    ),
)
STAGES = TableSpec(
    "stages.parquet",
    (
        Column("stage_hash", _TEXT, required=True),
        Column("kind", _TEXT, required=True),
        Column("label", _TEXT),
        # One row per model and role a stage used (a brew stage: student, teacher,
        # curator); "oracle" / "none" for stages that call no LLM.
        Column("role", _TEXT),
        Column("model", _TEXT),
        Column("tokens_in", pa.int64()),
        Column("tokens_out", pa.int64()),
        Column("n_llm_calls", pa.int64()),
        Column("embed_tokens", pa.int64()),
        Column("wall_s", pa.float64()),
        Column("gpu_s", pa.float64()),
        Column("ran", pa.bool_()),
    ),
)
TABLES = (POINTS, EPISODES, STAGES)
# What stages report of themselves (`stages.StageReport`, e.g. a brew's training
# statistics): one row per figure. Optional: a sweep whose stages report nothing, or one
# written before it existed, has no such file.
STAGE_FIGURES = TableSpec(
    "stage_figures.parquet",
    (
        Column("stage_hash", _TEXT, required=True),
        Column("kind", _TEXT, required=True),
        Column("label", _TEXT),
        Column("title", _TEXT, required=True),
        Column("position", pa.int64()),  # the figure's row in its stage's table
        Column("metric", _TEXT, required=True),
        Column("name", _TEXT),
        Column("value", pa.float64()),
        Column("unit", _TEXT),
        Column("mlflow_run_id", _TEXT),
    ),
)


def _method_array(values: list[Any]) -> pa.Array:
    """One method column: its type as the values say; mixed types are kept as text."""
    try:
        return pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return pa.array([None if v is None else str(v) for v in values], pa.string())


def sweep_table(spec: TableSpec, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """`rows` as `spec`'s table. A key the spec lacks is a method's report column in
    the points table (each row lists its own in `method_columns`; every row gets every
    column, null where it has none) and an error anywhere else: writer and schema agree."""
    fixed = set(spec.names)
    extra = list(dict.fromkeys(k for row in rows for k in row if k not in fixed))
    if extra and not spec.method_columns:
        raise SweepTableError(f"{spec.file}: no column {', '.join(extra)} in its schema")
    data: dict[str, pa.Array] = {}
    for column in spec.columns:
        if column.name == METHOD_COLUMNS:
            values: list[Any] = [[k for k in row if k not in fixed] for row in rows]
        else:
            values = [row.get(column.name) for row in rows]
        data[column.name] = pa.array(values, column.type)
    for name in extra:
        data[name] = _method_array([row.get(name) for row in rows])
    return pa.table(data)


def write_sweep_table(target: Any, spec: TableSpec, rows: Sequence[Mapping[str, Any]]) -> None:
    """Write `rows` as `spec`'s table to `target` (a `Location`: local or remote)."""
    sink = pa.BufferOutputStream()
    pq.write_table(sweep_table(spec, rows), sink)
    target.write_bytes(sink.getvalue().to_pybytes())


def read_sweep_table(spec: TableSpec, data: bytes, where: str) -> pa.Table:
    """Parse and check one table's bytes (`where`: the file, for messages). A missing
    required column, a column of a type that cannot be read as the spec's, or a column
    nobody declared is an error naming it; optional columns an older file lacks read as
    null. Old points tables (before `method_columns`) hold only method columns besides
    the fixed ones, so their extra columns are taken as such."""
    table = pq.read_table(pa.BufferReader(data))
    present = set(table.column_names)
    missing = [name for name in spec.required if name not in present]
    if missing and table.num_rows:
        raise SweepTableError(
            f"{where} lacks column(s) {', '.join(missing)}: it was written by another "
            "version of distillery"
        )
    declared = set(spec.names)
    if spec.method_columns and METHOD_COLUMNS in present:
        listed = table.column(METHOD_COLUMNS).to_pylist()
        declared |= {name for names in listed for name in names or ()}
    elif spec.method_columns:
        declared |= present
    unknown = [name for name in table.column_names if name not in declared]
    if unknown:
        raise SweepTableError(
            f"{where} has column(s) {', '.join(unknown)} that its schema does not know"
            + (" and no point lists among its method columns" if spec.method_columns else "")
        )
    out: dict[str, pa.Array | pa.ChunkedArray] = {}
    for column in spec.columns:
        if column.name not in present:
            out[column.name] = pa.nulls(table.num_rows, column.type)
            continue
        try:
            out[column.name] = table.column(column.name).cast(column.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise SweepTableError(
                f"{where}: column {column.name} is {table.schema.field(column.name).type}, "
                f"not {column.type} ({exc})"
            ) from None
    for name in table.column_names:
        if name not in out:
            out[name] = table.column(name)
    return pa.table(out)


@dataclass(frozen=True)
class MethodColumns:
    """The memory methods' report columns of a points table, by what the report does
    with them (see the module docstring), each in the order the table has them."""

    depth: tuple[str, ...] = ()  # integer settings: success vs each that varies
    settings: tuple[str, ...] = ()  # plain settings
    representation: tuple[str, ...] = ()  # text settings: the representation table
    # column -> the method's collection it is a setting of (`<setting>_<collection>`).
    collections: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, points: pa.Table, collections: Iterable[str] = ()) -> MethodColumns:
        """The method columns of `points`; `collections`: the names of the collections
        its methods declare (`MemoryMethod.collections`), for labels."""
        fixed = set(POINTS.names)
        fields = [f for f in points.schema if f.name not in fixed]
        names = sorted(set(collections), key=len, reverse=True)  # longest suffix wins
        of = {f.name: c for f in fields if (c := _suffix(f.name, names))}

        def setting(name: str) -> str:
            return name[: -len(of[name]) - 1] if name in of else name

        roles = {f.name: _role(f.type) for f in fields}
        # A column no point set (a collection no method of the sweep read) has no values
        # to say its role: it takes the role of the same setting of another collection.
        known = {setting(n): r for n, r in roles.items() if r is not None}
        roles = {n: r or known.get(setting(n), "settings") for n, r in roles.items()}
        return cls(
            **{role: tuple(n for n, r in roles.items() if r == role) for role in _ROLES},
            collections=of,
        )

    @property
    def cell_order(self) -> tuple[str, ...]:
        """As cell descriptors: depths, settings, then representations."""
        return (*self.depth, *self.settings, *self.representation)

    @property
    def distinguishing_order(self) -> tuple[str, ...]:
        """As keys that tell merged cells apart, most telling first: depths, then
        representations, then the other settings."""
        return (*self.depth, *self.representation, *self.settings)

    def collection(self, column: str) -> str | None:
        """The collection `column` is a setting of, if it names one."""
        return self.collections.get(column)

    def setting(self, column: str) -> str:
        """What `column` sets, without its collection: `k` for `k_<collection>`."""
        of = self.collections.get(column)
        return column[: -len(of) - 1] if of else column


_ROLES = ("depth", "settings", "representation")


def _role(kind: pa.DataType) -> str | None:
    """A method column's role by its values' type (None: no value to tell)."""
    if pa.types.is_null(kind):
        return None
    if pa.types.is_integer(kind):
        return "depth"
    return "representation" if _is_text(kind) else "settings"


def _suffix(column: str, collections: Sequence[str]) -> str | None:
    return next((c for c in collections if column.endswith(f"_{c}") and column != f"_{c}"), None)


def _is_text(kind: pa.DataType) -> bool:
    return pa.types.is_string(kind) or pa.types.is_large_string(kind)
