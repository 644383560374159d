"""Episode records and their Parquet storage, one schema for teacher and student.

Every finished episode is written at once as its own Parquet file (written to a
temporary name, then renamed; one object PUT on object stores), so a crash loses at
most the episodes in flight and a reader never sees half a file. A stage's episodes
form one Parquet dataset directory, local or on any filesystem `Location` knows.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any

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


@dataclass(frozen=True)
class CallRecord:
    call: str  # canonical source, or raw text of a rejected call
    function: str | None
    content: str  # observation returned to the model
    error: str | None
    rejected: bool


@dataclass(frozen=True)
class StepRecord:
    turn: int
    step: int  # index within the turn
    assistant_text: str
    calls: list[CallRecord]
    tokens_in: int
    tokens_out: int
    latency_s: float
    endpoint: str | None


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
    n_turns: int
    success: bool | None  # None when not scored (infra failure)
    error_type: str | None
    error_message: str | None
    termination: str
    steps_per_turn: list[int]
    total_steps: int
    n_llm_calls: int
    tokens_in: int
    tokens_out: int
    llm_latency_s: float
    wall_s: float
    started_at: float
    finished_at: float
    attempts: int
    episode_id: str
    steps: list[StepRecord] = field(default_factory=list)
    messages_json: str = "[]"  # the full chat transcript, as sent to the model
    extra_json: str = "{}"  # method-specific details (e.g. memory retrievals)
    tokens_reasoning: int = 0  # of tokens_out, thinking tokens (as the server reports)

    @property
    def scored(self) -> bool:
        return self.success is not None


_CALL = pa.struct(
    [
        ("call", pa.string()),
        ("function", pa.string()),
        ("content", pa.string()),
        ("error", pa.string()),
        ("rejected", pa.bool_()),
    ]
)
_STEP = pa.struct(
    [
        ("turn", pa.int32()),
        ("step", pa.int32()),
        ("assistant_text", pa.string()),
        ("calls", pa.list_(_CALL)),
        ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()),
        ("latency_s", pa.float64()),
        ("endpoint", pa.string()),
    ]
)
EPISODE_SCHEMA = pa.schema(
    [
        ("run_id", pa.string()),
        ("stage", pa.string()),
        ("role", pa.string()),
        ("agent", pa.string()),
        ("model", pa.string()),
        ("backend", pa.string()),
        ("action_format", pa.string()),
        ("benchmark", pa.string()),
        ("task_id", pa.string()),
        ("group_id", pa.string()),
        ("n_turns", pa.int32()),
        ("success", pa.bool_()),
        ("error_type", pa.string()),
        ("error_message", pa.string()),
        ("termination", pa.string()),
        ("steps_per_turn", pa.list_(pa.int32())),
        ("total_steps", pa.int32()),
        ("n_llm_calls", pa.int32()),
        ("tokens_in", pa.int64()),
        ("tokens_out", pa.int64()),
        ("llm_latency_s", pa.float64()),
        ("wall_s", pa.float64()),
        ("started_at", pa.float64()),
        ("finished_at", pa.float64()),
        ("attempts", pa.int32()),
        ("episode_id", pa.string()),
        ("steps", pa.list_(_STEP)),
        ("messages_json", pa.string()),
        ("extra_json", pa.string()),
        ("tokens_reasoning", pa.int64()),
    ]
)

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def episode_file_name(task_id: str) -> str:
    return f"{_SAFE.sub('_', task_id)}.parquet"


@dataclass(frozen=True)
class EpisodeFile:
    """Where an episode was written and the sha256 of its bytes (for the ledger)."""

    uri: str
    sha256: str


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
    steps = [
        StepRecord(**{**s, "calls": [CallRecord(**c) for c in s["calls"]]}) for s in row["steps"]
    ]
    # Files written before a column existed read it as null.
    reasoning = row.get("tokens_reasoning") or 0
    return EpisodeRecord(**{**row, "steps": steps, "tokens_reasoning": reasoning})


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
    wrong type become text, 0 or null."""
    row = asdict(record)
    fixed = {f.name: _storable(row.get(f.name), f.type) for f in EPISODE_SCHEMA}
    for name in ("steps_per_turn", "steps"):
        fixed[name] = fixed[name] or []
    for name in ("messages_json", "extra_json"):
        fixed[name] = fixed[name] or ("[]" if name == "messages_json" else "{}")
    for name in ("run_id", "stage", "role", "agent", "model", "backend", "action_format",
                 "benchmark", "task_id", "termination", "episode_id"):  # fmt: skip
        fixed[name] = fixed[name] or ""
    return record_from_row(fixed)
