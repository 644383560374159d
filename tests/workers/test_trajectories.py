from distillery.workers.trajectories import (
    CallRecord,
    EpisodeRecord,
    StepRecord,
    read_episode_table,
    read_episodes,
    write_episode,
)


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
    return EpisodeRecord(
        run_id="r",
        stage="collect",
        role="teacher",
        agent="oracle",
        model="oracle",
        backend="oracle",
        action_format="prompt",
        benchmark="bfcl_multi_turn_base",
        task_id=task_id,
        group_id="GorillaFileSystem",
        n_turns=1,
        success=success,
        error_type=None,
        error_message=None,
        termination="done",
        steps_per_turn=[1],
        total_steps=1,
        n_llm_calls=2,
        tokens_in=5,
        tokens_out=2,
        llm_latency_s=0.1,
        wall_s=0.2,
        started_at=1.0,
        finished_at=1.2,
        attempts=1,
        episode_id="e",
        steps=[step],
        messages_json="[]",
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
