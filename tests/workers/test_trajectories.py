from dataclasses import asdict, replace

import pyarrow as pa
import pyarrow.parquet as pq

from distillery.workers.trajectories import (
    EPISODE_SCHEMA,
    CallRecord,
    EpisodeFile,
    EpisodeRecord,
    EpisodeSummary,
    StepRecord,
    read_episode_file_bytes,
    read_episode_table,
    read_episodes,
    storable_record,
    write_episode,
)
from tests.support.records import episode_record


def _record(task_id="multi_turn_base_1", success=True):
    step = StepRecord(
        turn=0,
        step=0,
        assistant_text="[ls()]",
        calls=[CallRecord("ls()", "ls", '{"current_directory_content": []}', None, False)],
        tokens_in=5,
        tokens_out=2,
        latency_s=0.1,
        endpoint="http://x/v1",
    )
    return episode_record(
        task_id,
        success,
        [step],
        stage="collect",
        role="teacher",
        agent="oracle",
        model="oracle",
        backend="oracle",
        group_id="GorillaFileSystem",
        n_llm_calls=2,
        episode_id="e",
    )


def test_round_trip_keeps_nested_steps(tmp_path):
    write_episode(tmp_path, _record())
    (back,) = read_episodes(tmp_path)
    assert back == _record()


def test_round_trip_keeps_model_calls_and_injections(tmp_path):
    from dataclasses import replace

    from distillery.workers.trajectories import InjectionRecord, ModelCallRecord

    call = ModelCallRecord(
        0, 1, 1.5, 0.2, 2, "http://x/v1", 3, 120, 4, "no_action", "prose", "[]", "stop",
        30, 5, 0, None, 0.0,
    )  # fmt: skip
    record = replace(
        _record(),
        model_calls=[call],
        injections=[InjectionRecord(0, -1, 1.0, "system_prompt", "memory", 6)],
    )
    write_episode(tmp_path, record)
    (back,) = read_episodes(tmp_path)
    assert back == record


def test_partial_files_are_never_read(tmp_path):
    write_episode(tmp_path, _record("a"))
    (tmp_path / ".b.parquet.123.tmp").write_bytes(b"half a file")
    assert [r.task_id for r in read_episodes(tmp_path)] == ["a"]
    assert read_episode_table(tmp_path).num_rows == 1


def test_rewriting_an_episode_replaces_it(tmp_path):
    write_episode(tmp_path, _record("a", success=False))
    write_episode(tmp_path, _record("a", success=True))
    (back,) = read_episodes(tmp_path)
    assert back.success is True


def test_empty_directory_reads_as_empty(tmp_path):
    assert read_episodes(tmp_path / "missing") == []
    assert read_episode_table(tmp_path).num_rows == 0


# The episode files' schema as it was hand-kept before it was derived from the record
# (tokens_reasoning came later): files written with it must keep reading the same.
_OLD_CALL = pa.struct(
    [("call", pa.string()), ("function", pa.string()), ("content", pa.string()),
     ("error", pa.string()), ("rejected", pa.bool_())]
)  # fmt: skip
_OLD_STEP = pa.struct(
    [("turn", pa.int32()), ("step", pa.int32()), ("assistant_text", pa.string()),
     ("calls", pa.list_(_OLD_CALL)), ("tokens_in", pa.int64()), ("tokens_out", pa.int64()),
     ("latency_s", pa.float64()), ("endpoint", pa.string())]
)  # fmt: skip
_OLD_SCHEMA = pa.schema(
    [("run_id", pa.string()), ("stage", pa.string()), ("role", pa.string()),
     ("agent", pa.string()), ("model", pa.string()), ("backend", pa.string()),
     ("action_format", pa.string()), ("benchmark", pa.string()), ("task_id", pa.string()),
     ("group_id", pa.string()), ("n_turns", pa.int32()), ("success", pa.bool_()),
     ("error_type", pa.string()), ("error_message", pa.string()),
     ("termination", pa.string()), ("steps_per_turn", pa.list_(pa.int32())),
     ("total_steps", pa.int32()), ("n_llm_calls", pa.int32()), ("tokens_in", pa.int64()),
     ("tokens_out", pa.int64()), ("llm_latency_s", pa.float64()), ("wall_s", pa.float64()),
     ("started_at", pa.float64()), ("finished_at", pa.float64()), ("attempts", pa.int32()),
     ("episode_id", pa.string()), ("steps", pa.list_(_OLD_STEP)),
     ("messages_json", pa.string()), ("extra_json", pa.string())]
)  # fmt: skip


def test_schema_is_derived_from_the_record_and_matches_the_hand_kept_one():
    assert [f.name for f in EPISODE_SCHEMA] == list(EpisodeRecord.__dataclass_fields__)
    # Fields added since, each with a default an older file reads as: the thinking
    # tokens, which play of the task an episode is (outcome-driven stages), every model
    # call and what hooks injected.
    grown = _OLD_SCHEMA.append(pa.field("tokens_reasoning", pa.int64())).append(
        pa.field("attempt", pa.int32())
    )
    later = EPISODE_SCHEMA.names[len(grown.names) :]
    assert later == ["model_calls", "injections"]
    assert (
        EPISODE_SCHEMA.remove(EPISODE_SCHEMA.get_field_index("injections"))
        .remove(EPISODE_SCHEMA.get_field_index("model_calls"))
        .equals(grown)
    )
    step = EPISODE_SCHEMA.field("steps").type.value_type
    assert [f.name for f in step] == list(StepRecord.__dataclass_fields__)


def test_a_file_written_with_the_old_schema_reads_back(tmp_path):
    record = _record()
    row = {k: v for k, v in asdict(record).items() if k not in ("tokens_reasoning", "attempt")}
    pq.write_table(pa.Table.from_pylist([row], schema=_OLD_SCHEMA), tmp_path / "a.parquet")
    (back,) = read_episodes(tmp_path)
    assert back == record  # tokens_reasoning and attempt, absent then, read as 0 and 1
    assert read_episode_file_bytes((tmp_path / "a.parquet").read_bytes()) == [record]


def test_summary_numbers_are_the_records():
    record = _record(success=False)
    written = EpisodeFile("file:///x/a.parquet", "ab" * 32)
    summary = EpisodeSummary.of(record, written)
    for name in ("task_id", "success", "termination", "total_steps", "n_llm_calls",
                 "tokens_in", "tokens_out", "wall_s", "attempts", "error_type",
                 "error_message", "tokens_reasoning", "attempt"):  # fmt: skip
        assert getattr(summary, name) == getattr(record, name), name
    assert (summary.file, summary.sha256) == (written.uri, written.sha256)
    assert EpisodeSummary.of(record).file == ""


def test_storable_record_fills_what_may_not_be_null():
    broken = replace(_record(), model=None, steps_per_turn=None, messages_json="", n_turns="x")
    fixed = storable_record(broken)
    assert (fixed.model, fixed.steps_per_turn, fixed.messages_json) == ("", [], "[]")
    assert fixed.n_turns == 0 and fixed.group_id == "GorillaFileSystem"
