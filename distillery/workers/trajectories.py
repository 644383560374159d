"""Episode records and their Parquet storage, one schema for teacher and student.

Every finished episode is written at once as its own Parquet file (written to a
temporary name, then renamed), so a crash loses at most the episodes in flight and a
reader never sees half a file. A stage's episodes form one Parquet dataset directory.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Termination reasons. Only `done`, `step_limit` and `request_rejected` episodes are
# scored; `infra_error` and `timeout` are infrastructure failures, never student ones.
SCORED_TERMINATIONS = ("done", "step_limit", "request_rejected")
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
    ]
)

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def episode_file_name(task_id: str) -> str:
    return f"{_SAFE.sub('_', task_id)}.parquet"


def write_episode(directory: str | os.PathLike[str], record: EpisodeRecord) -> Path:
    """Persist one finished episode atomically; returns the file written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / episode_file_name(record.task_id)
    tmp = directory / f".{final.name}.{uuid.uuid4().hex}.tmp"
    table = pa.Table.from_pylist([asdict(record)], schema=EPISODE_SCHEMA)
    pq.write_table(table, tmp)
    os.replace(tmp, final)
    return final


def read_episodes(directory: str | os.PathLike[str]) -> list[EpisodeRecord]:
    """Every complete episode file in a stage directory (temporary files are ignored)."""
    directory = Path(directory)
    if not directory.exists():
        return []
    records = []
    for path in sorted(directory.glob("*.parquet")):
        for row in pq.read_table(path, schema=EPISODE_SCHEMA).to_pylist():
            records.append(record_from_row(row))
    return records


def read_episode_table(directory: str | os.PathLike[str]) -> pa.Table:
    """All episodes of a stage directory as one Arrow table."""
    files = sorted(Path(directory).glob("*.parquet"))
    if not files:
        return EPISODE_SCHEMA.empty_table()
    return pa.concat_tables(pq.read_table(f, schema=EPISODE_SCHEMA) for f in files)


def record_from_row(row: dict[str, Any]) -> EpisodeRecord:
    steps = [
        StepRecord(**{**s, "calls": [CallRecord(**c) for c in s["calls"]]}) for s in row["steps"]
    ]
    return EpisodeRecord(**{**row, "steps": steps})


def messages_to_json(messages: list[dict[str, Any]]) -> str:
    return json.dumps(messages, ensure_ascii=False, default=str)
