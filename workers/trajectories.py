"""Episode records and their Parquet storage, one schema for teacher and student.

Every finished episode is written at once as its own Parquet file (written to a
temporary name, then renamed; one object PUT on object stores), so a crash loses at
most the episodes in flight and a reader never sees half a file. A stage's episodes
form one Parquet dataset directory, local or on any filesystem `Location` knows.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import MISSING, asdict, dataclass, field, fields, is_dataclass
from types import UnionType
from typing import Annotated, Any, Union, get_args, get_origin, get_type_hints

import pyarrow as pa
import pyarrow.parquet as pq

from distillery.redaction import redact_obj
from distillery.workers.storage import Location

# Termination reasons. `done`, `step_limit`, `context_overflow` (the conversation
# outgrew the model's context window), `request_rejected` and `invalid_reply` (a reply
# the client could not use: the model's failure) episodes are scored; `infra_error` and
# `timeout` are infrastructure failures, never student ones.
SCORED_TERMINATIONS = (
    "done",
    "step_limit",
    "context_overflow",
    "request_rejected",
    "invalid_reply",
)
INFRA_TERMINATIONS = ("infra_error", "timeout")


# Arrow widths of the integer fields (a plain `int` is int64): the record's annotations
# are the one statement of the episode files' schema (see `arrow_schema`).
Int32 = Annotated[int, pa.int32()]
Int64 = Annotated[int, pa.int64()]


@dataclass(frozen=True)
class CallRecord:
    call: str  # canonical source, or raw text of a rejected call
    function: str | None
    content: str  # observation returned to the model
    error: str | None
    rejected: bool


@dataclass(frozen=True)
class StepRecord:
    turn: Int32
    step: Int32  # index within the turn
    assistant_text: str
    calls: list[CallRecord]
    tokens_in: Int64
    tokens_out: Int64
    latency_s: float
    endpoint: str | None


@dataclass(frozen=True)
class ModelCallRecord:
    """One request of the agent loop to the agent's model and what came back: every
    call, also one whose reply decodes to no action (prose, the usual failure of a small
    model), was refused, or could not be used. The request itself is the transcript's
    first `request_messages` messages (`EpisodeRecord.messages_json`)."""

    turn: Int32
    step: Int32  # the turn's step this reply starts (a reply with no action ends the turn)
    started_at: float  # epoch seconds when the request was sent
    latency_s: float
    attempts: Int32  # tries the client needed (retries: attempts - 1)
    endpoint: str | None
    request_messages: Int32
    request_chars: Int64  # characters of the request's message contents
    n_tools: Int32
    # action | no_action | request_rejected | context_overflow | invalid_reply
    outcome: str
    text: str  # the reply's text, cut at MAX_CALL_TEXT
    tool_calls_json: str  # the reply's tool calls as the client returned them, cut
    finish_reason: str | None
    tokens_in: Int64
    tokens_out: Int64
    tokens_reasoning: Int64
    error: str | None  # why the server refused the request or the reply was unusable
    action_s: float = 0.0  # running the reply's action (environment, then memory hooks)


@dataclass(frozen=True)
class InjectionRecord:
    """What episode hooks (a memory method) added to what the model sees, as the loop
    saw it: method-agnostic (the method's own account is in `extra_json`)."""

    turn: Int32
    step: Int32  # the step whose observations (or reply) it follows; -1: before the turn
    at: float  # epoch seconds
    # system_prompt | user_message | observation | message (a user message of the
    # hooks' own) | message_withdrawn (one taken out of the history: agents/hook_messages.py)
    where: str
    text: str  # what was added, cut at MAX_CALL_TEXT
    chars: Int64  # its full length


# What a model call or injection record keeps of a text (the transcript has it whole).
MAX_CALL_TEXT = 8000


@dataclass(frozen=True)
class EpisodeRecord:
    run_id: str
    stage: str  # collect | evaluate
    role: str  # teacher | student
    agent: str  # model config name
    model: str
    backend: str
    action_format: str
    benchmark: str
    task_id: str
    group_id: str | None
    n_turns: Int32
    success: bool | None  # None when not scored (infra failure)
    error_type: str | None
    error_message: str | None
    termination: str
    steps_per_turn: list[Int32]
    total_steps: Int32
    n_llm_calls: Int32
    tokens_in: Int64
    tokens_out: Int64
    llm_latency_s: float
    wall_s: float
    started_at: float
    finished_at: float
    attempts: Int32
    episode_id: str
    steps: list[StepRecord] = field(default_factory=list)
    messages_json: str = "[]"  # the full chat transcript, as sent to the model
    extra_json: str = "{}"  # method-specific details (e.g. memory retrievals)
    tokens_reasoning: Int64 = 0  # of tokens_out, thinking tokens (as the server reports)
    # Which play of the task this is in an outcome-driven stage, whose re-plays are
    # decided at run time (1: the first play; 2: the first re-play, ...); `attempts`
    # counts the infrastructure tries of this one play.
    attempt: Int32 = 1
    # Every model call of the loop and every injection by its hooks, in order (empty in
    # files written before they were recorded).
    model_calls: list[ModelCallRecord] = field(default_factory=list)
    injections: list[InjectionRecord] = field(default_factory=list)

    @property
    def scored(self) -> bool:
        return self.success is not None


def _arrow_type(hint: Any) -> pa.DataType:
    """The Arrow type of one field annotation (`X | None` is nullable X: every Arrow
    field is nullable)."""
    if get_origin(hint) is Annotated:
        return get_args(hint)[1]
    if get_origin(hint) in (UnionType, Union):
        (inner,) = [a for a in get_args(hint) if a is not type(None)]
        return _arrow_type(inner)
    if get_origin(hint) is list:
        return pa.list_(_arrow_type(get_args(hint)[0]))
    if is_dataclass(hint):
        return pa.struct(list(arrow_schema(hint)))
    scalars = {str: pa.string(), bool: pa.bool_(), int: pa.int64(), float: pa.float64()}
    if hint in scalars:
        return scalars[hint]
    raise TypeError(f"no Arrow type for field annotation {hint!r}")


@functools.cache
def arrow_schema(record_type: type) -> pa.Schema:
    """The Arrow schema of a record dataclass, field by field in declaration order
    (nested records are structs, lists are lists): derived, so a new field of the record
    is a new column without a second, hand-kept schema to forget."""
    hints = get_type_hints(record_type, include_extras=True)
    return pa.schema([(f.name, _arrow_type(hints[f.name])) for f in fields(record_type)])


EPISODE_SCHEMA = arrow_schema(EpisodeRecord)


@functools.cache
def _hints(record_type: type) -> dict[str, Any]:
    """A record type's resolved field annotations, once per type: resolving them is
    most of the cost of reading a row (`distillery report` spent 43 of its 78 s on a
    full-size bfcl_table1 in `get_type_hints`, called once per row and nested record)."""
    return get_type_hints(record_type)


def _from_row(record_type: type, row: dict[str, Any]) -> Any:
    """`record_type` from one row of its schema; nested records are built from their
    structs, and a field an older file lacks (null) takes the field's default."""
    hints = _hints(record_type)
    values: dict[str, Any] = {}
    for f in fields(record_type):
        value = row.get(f.name)
        if value is None and f.default is not MISSING:
            value = f.default
        elif value is None and f.default_factory is not MISSING:
            value = f.default_factory()
        hint = hints[f.name]
        if get_origin(hint) is list and is_dataclass(get_args(hint)[0]) and value is not None:
            value = [_from_row(get_args(hint)[0], item) for item in value]
        values[f.name] = value
    return record_type(**values)


_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def episode_file_name(task_id: str) -> str:
    return f"{_SAFE.sub('_', task_id)}.parquet"


@dataclass(frozen=True)
class EpisodeFile:
    """Where an episode was written and the sha256 of its bytes (for the ledger)."""

    uri: str
    sha256: str


@dataclass(frozen=True)
class EpisodeSummary:
    """The per-episode numbers the driver, the ledger and the results tables use (the
    full record is on disk): fields named as the record's are the record's values."""

    task_id: str
    success: bool | None
    termination: str
    total_steps: int
    n_llm_calls: int
    tokens_in: int
    tokens_out: int
    wall_s: float
    attempts: int
    error_type: str | None
    error_message: str | None
    file: str = ""  # where the full record was written, and its checksum: the ledger's
    sha256: str = ""  # proof that this episode is finished and intact
    tokens_reasoning: int = 0  # of tokens_out, thinking tokens (server-reported)
    # The task's scenario/group (the record's): the report's scenario goal completion
    # needs it; None in ledger records written before it was kept.
    group_id: str | None = None
    attempt: int = 1  # which play of the task (outcome-driven stages; see the record's)

    @property
    def finished(self) -> bool:
        """A result worth keeping on resume: scored (infra failures are re-run)."""
        return self.success is not None

    @classmethod
    def of(cls, record: EpisodeRecord, written: EpisodeFile | None = None) -> EpisodeSummary:
        """The summary of `record` (and of where it was `written`): every field but the
        file's is the record's field of the same name."""
        values = {name: getattr(record, name) for name in _SUMMARY_FROM_RECORD}
        if written is not None:
            values.update(file=written.uri, sha256=written.sha256)
        return cls(**values)


# A summary field the record lacks is a typo or a rename: fail at import, not later.
_SUMMARY_FROM_RECORD = tuple(
    f.name for f in fields(EpisodeSummary) if f.name not in ("file", "sha256")
)
if not set(_SUMMARY_FROM_RECORD) <= set(EpisodeRecord.__dataclass_fields__):
    raise TypeError("EpisodeSummary names a field EpisodeRecord lacks")


def _as_location(directory: str | os.PathLike[str] | Location) -> Location:
    return directory if isinstance(directory, Location) else Location.of(directory)


def episode_bytes(record: EpisodeRecord) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist([asdict(record)], schema=EPISODE_SCHEMA), sink)
    return sink.getvalue().to_pybytes()


def write_episode(
    directory: str | os.PathLike[str] | Location, record: EpisodeRecord
) -> EpisodeFile:
    """Persist one finished episode atomically (one file per task: a re-run replaces
    it); returns where it went and its checksum. Secrets are redacted first (an
    endpoint URL with a key in it, an error message quoting one)."""
    record = redact_obj(record)
    target = _as_location(directory) / episode_file_name(record.task_id)
    digest = target.write_bytes(episode_bytes(record))
    return EpisodeFile(target.uri, digest)


def read_episode_file(location: str | Location) -> pa.Table:
    loc = _as_location(location)
    return pq.read_table(pa.BufferReader(loc.read_bytes()), schema=EPISODE_SCHEMA)


def read_episode_file_bytes(data: bytes) -> list[EpisodeRecord]:
    """The episode records of one file's bytes (raises on a damaged file)."""
    table = pq.read_table(pa.BufferReader(data), schema=EPISODE_SCHEMA)
    return [record_from_row(row) for row in table.to_pylist()]


def read_episodes(directory: str | os.PathLike[str] | Location) -> list[EpisodeRecord]:
    """Every complete episode file in a stage directory (temporary files are ignored)."""
    return [record_from_row(row) for row in read_episode_table(directory).to_pylist()]


def read_episode_table(directory: str | os.PathLike[str] | Location) -> pa.Table:
    """All episodes of a stage directory as one Arrow table."""
    files = _as_location(directory).listdir(".parquet")
    if not files:
        return EPISODE_SCHEMA.empty_table()
    return pa.concat_tables(read_episode_file(f) for f in files)


def record_from_row(row: dict[str, Any]) -> EpisodeRecord:
    return _from_row(EpisodeRecord, row)


def messages_to_json(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False, default=str)


def _storable(value: Any, kind: pa.DataType) -> Any:
    """`value` as a valid value of Arrow type `kind` (None where it has none)."""
    if value is None:
        return None
    if pa.types.is_string(kind):
        # NUL is fine in Parquet; lone surrogates cannot be encoded as UTF-8.
        text = value if isinstance(value, str) else str(value)
        return text.encode("utf-8", "replace").decode("utf-8")
    if pa.types.is_boolean(kind):
        return value if isinstance(value, bool) else None
    if pa.types.is_integer(kind):
        if not isinstance(value, int) or isinstance(value, bool):
            return 0
        bound = 2 ** (kind.bit_width - 1) - 1
        return max(-bound, min(bound, value))
    if pa.types.is_floating(kind):
        return float(value) if isinstance(value, (int, float)) and abs(value) < 1e300 else None
    if pa.types.is_list(kind):
        items = value if isinstance(value, (list, tuple)) else []
        return [_storable(item, kind.value_type) for item in items]
    if pa.types.is_struct(kind):
        row = value if isinstance(value, dict) else {}
        return {f.name: _storable(row.get(f.name), f.type) for f in kind}
    return value


def storable_record(record: EpisodeRecord) -> EpisodeRecord:
    """`record` with every value the episode schema cannot hold repaired: unencodable
    strings get U+FFFD, integers are clamped to their column's range, values of the
    wrong type become text, 0 or null; a field that may not be null gets its default
    (text fields without one: "")."""
    row = asdict(record)
    fixed = {f.name: _storable(row.get(f.name), f.type) for f in EPISODE_SCHEMA}
    hints = get_type_hints(EpisodeRecord)
    for f in fields(EpisodeRecord):
        if isinstance(f.default, str) and f.default and not fixed[f.name]:
            fixed[f.name] = f.default  # an empty JSON text is no JSON: its default
        elif fixed[f.name] is None and hints[f.name] is str:
            fixed[f.name] = ""
        elif fixed[f.name] is None and get_origin(hints[f.name]) is list:
            fixed[f.name] = []
    return record_from_row(fixed)
