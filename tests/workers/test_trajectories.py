from distillery.workers.trajectories import (
    CallRecord,
    StepRecord,
    read_episode_table,
    read_episodes,
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
