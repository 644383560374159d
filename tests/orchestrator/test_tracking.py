"""MLflow tracking of a resumable sweep, against a real SQLite tracking store."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import uuid
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from mlflow.entities import SpanType
from mlflow.tracking import MlflowClient

from distillery.orchestrator.tracking.traces import episode_trace, sample_episodes
from distillery.orchestrator.tracking.tracker import (
    CHANGED_PARAM_TAG,
    POINT_ID_TAG,
    EvalDataset,
    Tracker,
    safe_params,
)
from distillery.workers.trajectories import (
    CallRecord,
    EpisodeRecord,
    InjectionRecord,
    ModelCallRecord,
    StepRecord,
)
from tests.support.records import episode_record

T0 = 1_700_000_000.0  # episode start, epoch seconds


@pytest.fixture(scope="module")
def uri(tmp_path_factory: pytest.TempPathFactory):
    # One database for the module (creating one runs MLflow's migrations, seconds);
    # each test gets its own experiment instead.
    previous = mlflow.get_tracking_uri()
    db = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    yield f"sqlite:///{db}"
    mlflow.flush_trace_async_logging(terminate=True)
    mlflow.set_tracking_uri(previous)


@pytest.fixture
def tracker(uri: str) -> Tracker:
    return Tracker(uri, f"test-{uuid.uuid4().hex[:8]}")


def _step(turn: int, step: int, text: str, calls: list[CallRecord], latency: float) -> StepRecord:
    return StepRecord(turn, step, text, calls, 10 + step, 3, latency, "http://llm/v1")


def _episode(task_id: str, success: bool | None, steps: list[StepRecord]) -> EpisodeRecord:
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": f"Please solve {task_id}."},
    ]
    return episode_record(
        task_id,
        success,
        steps,
        agent="qwen3_4b",
        model="Qwen/Qwen3-4B",
        backend="openai",
        group_id="GorillaFileSystem",
        error_type=None if success is not None else "infra",
        wall_s=10.0,
        started_at=T0,
        finished_at=T0 + 10.0,
        episode_id=f"ep-{task_id}",
        messages_json=json.dumps(messages),
    )


def _success() -> EpisodeRecord:
    ls = CallRecord("ls()", "ls", '{"current_directory_content": ["a"]}', None, False)
    cd = CallRecord("cd(folder='a')", "cd", '{"current_working_directory": "a"}', None, False)
    return _episode(
        "multi_turn_base_1",
        True,
        [_step(0, 0, "[ls(), cd(folder='a')]", [ls, cd], 2.0), _step(0, 1, "done", [], 1.0)],
    )


def _failure() -> EpisodeRecord:
    bad = CallRecord("rm(x)", None, "could not parse", "syntax error", True)
    return _episode("multi_turn_base_2", False, [_step(0, 0, "[rm(x)]", [bad], 4.0)])


def _log(tracker: Tracker, metrics: dict[str, float], **kwargs) -> str:
    return tracker.log_agent(
        run_name="amd:qwen3_4b",
        params=kwargs.pop("params", {"method": "amd"}),
        tags={"student": "qwen3_4b"},
        metrics=metrics,
        results=pd.DataFrame({"task_id": ["a", "b"], "success": [True, False]}),
        episodes_dir=None,
        **kwargs,
    )


def _children(client: MlflowClient, tracker: Tracker, parent_id: str):
    return client.search_runs(
        [tracker.experiment_id], filter_string=f"tags.`mlflow.parentRunId` = '{parent_id}'"
    )


def test_parent_reopened_by_id_is_the_same_run(tracker: Tracker, uri: str) -> None:
    with tracker.parent("sweep", {"seed": "0"}, {"distillery.sweep_id": "s1"}) as first:
        pass
    # A resumed sweep passes the id it recorded; same params again must not raise.
    with tracker.parent("sweep", {"seed": "0"}, {"n_points": "2"}, run_id=first) as second:
        assert second == first
    run = MlflowClient(uri).get_run(first)
    assert run.data.params == {"seed": "0"}
    assert run.data.tags["distillery.sweep_id"] == "s1"
    assert run.data.tags["n_points"] == "2"
    assert run.info.status == "FINISHED"


def test_parent_with_unknown_run_id_starts_a_new_run(tracker: Tracker) -> None:
    with tracker.parent("sweep", {}, {}, run_id=uuid.uuid4().hex) as pid:
        assert tracker.client.get_run(pid).info.experiment_id == tracker.experiment_id


def test_parent_failure_is_marked_failed(tracker: Tracker) -> None:
    with pytest.raises(RuntimeError), tracker.parent("sweep", {}, {}) as pid:
        raise RuntimeError("boom")
    assert tracker.client.get_run(pid).info.status == "FAILED"


def test_child_logged_twice_for_a_point_is_one_run_with_latest_metrics(
    tracker: Tracker, uri: str, caplog: pytest.LogCaptureFixture
) -> None:
    client = MlflowClient(uri)
    with tracker.parent("sweep", {}, {}) as pid:
        assert tracker.find_child(pid, "p1") is None
        first = _log(tracker, {"success_rate": 0.25}, point_id="p1")
        assert tracker.find_child(pid, "p1") == first
        # As the driver does on resume: find the child, then log it again.
        again = _log(
            tracker, {"success_rate": 0.5}, point_id="p1", run_id=tracker.find_child(pid, "p1")
        )
        # Without run_id the point id alone finds it too; a changed param must not crash.
        with caplog.at_level(logging.WARNING, "distillery.orchestrator.tracking.tracker"):
            third = _log(tracker, {"success_rate": 0.75}, point_id="p1", params={"method": "amd2"})
        other = _log(tracker, {"success_rate": 0.0}, point_id="p2")
    assert first == again == third != other
    children = _children(client, tracker, pid)
    assert sorted(r.data.tags[POINT_ID_TAG] for r in children) == ["p1", "p2"]
    run = client.get_run(first)
    assert run.data.metrics["success_rate"] == 0.75
    assert run.data.params["method"] == "amd"  # MLflow params are immutable
    assert run.data.tags[CHANGED_PARAM_TAG + "method"] == "amd2"
    assert "changed value" in caplog.text
    assert run.info.status == "FINISHED"
    # The table artifact is replaced, not appended to (MlflowClient.log_table appends).
    table = json.loads(Path(client.download_artifacts(first, "results.json")).read_text())
    assert len(table["data"]) == 2


def test_more_params_and_metrics_than_one_batch(
    tracker: Tracker, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[int, int, int]] = []
    real = tracker.client.log_batch

    def spy(run_id, metrics=(), params=(), tags=(), **kw):
        calls.append((len(metrics), len(params), len(tags)))
        return real(run_id, metrics=metrics, params=params, tags=tags, **kw)

    monkeypatch.setattr(tracker.client, "log_batch", spy)
    params = {f"p{i:03d}": str(i) for i in range(250)}
    metrics = {f"m{i:04d}": float(i) for i in range(2500)}
    with tracker.parent("sweep", {}, {}):
        child = _log(tracker, metrics, params=params, point_id="big")
    run = MlflowClient(uri).get_run(child)
    assert run.data.params == params
    assert run.data.metrics == metrics
    for m, p, t in calls:
        assert m <= 1000 and p <= 100 and t <= 100 and m + p + t <= 1000
    assert len(calls) <= 4  # batched, not one call per value


def test_eval_split_is_a_dataset_input(tracker: Tracker, uri: str) -> None:
    sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    dataset = EvalDataset("bfcl_multi_turn_base", ["t1", "t2", "t3"], sha)
    metrics = {"success_rate": 0.625, "success_rate_ci_low": 0.427, "success_rate_ci_high": 0.788}
    with tracker.parent("sweep", {}, {}):
        child = _log(tracker, {**metrics, "n_scored": 24}, point_id="p", dataset=dataset)
        _log(tracker, {}, point_id="p", dataset=dataset)  # re-logged: still one input
    run = MlflowClient(uri).get_run(child)
    # An evaluation child is a GenAI evaluation run (the UI's Evaluations view lists it),
    # and one column of the runs table shows the rate with its interval.
    assert run.data.tags["mlflow.runType"] == "genai_evaluate"
    assert run.data.tags["success"] == "62.5% [42.7–78.8] n=24"
    (entry,) = run.inputs.dataset_inputs
    assert entry.dataset.name == "bfcl_multi_turn_base:0123456789ab"
    assert sha.startswith(entry.dataset.digest)  # MLflow caps digests at 36 chars
    assert {t.key: t.value for t in entry.tags}["mlflow.data.context"] == "evaluation"
    assert json.loads(entry.dataset.profile)["num_rows"] == 3


def test_episode_traces_are_linked_to_the_child_run(tracker: Tracker, uri: str) -> None:
    records = [_failure(), _success()]
    with tracker.parent("sweep", {}, {}) as pid:
        child = _log(tracker, {}, point_id="p", traces=records, trace_sample=3)
        sibling = _log(tracker, {}, point_id="q")
    client = MlflowClient(uri)
    found = client.search_traces(locations=[tracker.experiment_id], run_id=child)
    assert len(found) == 2
    assert not client.search_traces(locations=[tracker.experiment_id], run_id=sibling)
    assert not client.search_traces(locations=[tracker.experiment_id], run_id=pid)
    by_task = {t.info.tags["distillery.task_id"]: t for t in found}

    ok = by_task["multi_turn_base_1"]
    assert ok.info.request_metadata["mlflow.sourceRun"] == child
    # The task is the session (a task's episodes group across methods); the agent the user.
    assert ok.info.request_metadata["mlflow.trace.session"] == "multi_turn_base_1"
    assert ok.info.request_metadata["mlflow.trace.user"] == "qwen3_4b"
    names = [s.name for s in sorted(ok.data.spans, key=lambda s: (s.start_time_ns, s.name))]
    assert names == [
        "episode multi_turn_base_1",
        "llm 0.0",
        "turn 0",
        "tool ls 0.0.0",
        "tool cd 0.0.1",
        "llm 0.1",
    ]
    root = next(s for s in ok.data.spans if s.parent_id is None)
    assert root.span_type == SpanType.AGENT
    assert root.inputs["user"] == "Please solve multi_turn_base_1."
    assert root.outputs == {"verdict": "success", "success": True, "termination": "done"}
    assert root.start_time_ns == int(T0 * 1e9)
    assert root.end_time_ns == int((T0 + 10) * 1e9)
    turn = next(s for s in ok.data.spans if s.name == "turn 0")
    assert turn.span_type == SpanType.CHAIN and turn.parent_id == root.span_id
    assert turn.inputs == {"user": "Please solve multi_turn_base_1."}
    assert (turn.start_time_ns, turn.end_time_ns) == (root.start_time_ns, root.end_time_ns)
    llm = next(s for s in ok.data.spans if s.name == "llm 0.0")
    assert llm.span_type == SpanType.CHAT_MODEL
    assert llm.parent_id == turn.span_id
    assert llm.end_time_ns - llm.start_time_ns == 2_000_000_000
    assert llm.attributes["tokens_in"] == 10
    assert llm.outputs["assistant_text"] == "[ls(), cd(folder='a')]"
    tool = next(s for s in ok.data.spans if s.name == "tool ls 0.0.0")
    assert tool.span_type == SpanType.TOOL
    assert tool.inputs == {"call": "ls()"}
    assert tool.start_time_ns == llm.end_time_ns

    # The benchmark's verdict is feedback on the trace, from the checker (code).
    verdict = {a.name: a for a in ok.info.assessments}
    assert {n: a.value for n, a in verdict.items()} == {
        "success": True,
        "error_type": "none",
        "steps": 2,
        "tokens": 21 + 6,
    }
    assert verdict["success"].source.source_type == "CODE"

    bad = by_task["multi_turn_base_2"]
    assert {a.name: a.value for a in bad.info.assessments}["success"] is False
    # A failed task is never shown as a success: the trace's state and its verdict tag.
    assert (ok.info.state, bad.info.state) == ("OK", "ERROR")
    assert (ok.info.tags["verdict"], bad.info.tags["verdict"]) == ("success", "failure")
    assert len(bad.data.spans) == 4
    rejected = next(s for s in bad.data.spans if s.span_type == SpanType.TOOL)
    assert rejected.attributes["rejected"] is True
    assert rejected.status.status_code == "ERROR"

    # Logged again on resume: the same traces, none duplicated.
    with tracker.parent("sweep", {}, {}, run_id=pid):
        _log(tracker, {}, point_id="p", traces=records, trace_sample=3)
    again = client.search_traces(locations=[tracker.experiment_id], run_id=child)
    assert sorted(t.info.trace_id for t in again) == sorted(t.info.trace_id for t in found)
    assert json.loads(ok.info.request_metadata["mlflow.trace.tokenUsage"])["input_tokens"] == 21

    # A smaller sample drops the traces of episodes no longer sampled.
    with tracker.parent("sweep", {}, {}, run_id=pid):
        _log(tracker, {}, point_id="p", traces=records, trace_sample=1)
    (kept,) = client.search_traces(locations=[tracker.experiment_id], run_id=child)
    assert kept.info.trace_id == ok.info.trace_id


def test_tracing_failure_only_warns(
    tracker: Tracker, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("trace store down")

    monkeypatch.setattr(tracker.client, "start_trace", broken)
    with (
        caplog.at_level(logging.WARNING, "distillery.orchestrator.tracking.tracker"),
        tracker.parent("sweep", {}, {}),
    ):
        child = _log(tracker, {"success_rate": 1.0}, point_id="p", traces=[_success()])
    assert tracker.client.get_run(child).info.status == "FINISHED"
    assert "trace store down" in caplog.text


def test_sample_mixes_successes_and_failures_deterministically() -> None:
    ok = [_episode(f"s{i}", True, []) for i in range(3)]
    ko = [_episode(f"f{i}", False, []) for i in range(2)]
    infra = _episode("x0", None, [])
    records = [*ok, infra, *ko]
    picked = [r.task_id for r in sample_episodes(records, 3)]
    assert picked == ["s0", "f0", "s1"]
    assert [r.task_id for r in sample_episodes(reversed(records), 3)] == picked
    assert [r.task_id for r in sample_episodes(records, 10)][-1] == "x0"
    assert sample_episodes(records, 0) == []


def test_timeline_spreads_non_llm_time_over_tool_calls() -> None:
    plan = episode_trace(_success())
    tools = [c for c in plan.children if c.span_type == SpanType.TOOL]
    # 10 s wall, 3 s in the model: 7 s over the two calls.
    assert [(t.end_ns - t.start_ns) / 1e9 for t in tools] == [3.5, 3.5]
    assert plan.children[-1].end_ns == plan.root.end_ns


def test_secrets_are_redacted(tracker: Tracker, uri: str) -> None:
    config = {"student": {"api_key": "sk-secret", "api_key_env": "OPENAI_API_KEY"}}
    with tracker.parent("sweep", safe_params(config), {}):
        child = _log(tracker, {}, params=safe_params(config), point_id="p")
    params = MlflowClient(uri).get_run(child).data.params
    assert params["student.api_key"] == "<redacted>"
    assert params["student.api_key_env"] == "OPENAI_API_KEY"


def test_every_task_is_traced_by_default_and_unscored_is_an_error(
    tracker: Tracker, uri: str
) -> None:
    infra = _episode("multi_turn_base_3", None, [])
    records = [_failure(), _success(), infra]
    with tracker.parent("sweep", {}, {}):
        child = _log(tracker, {}, point_id="p", traces=records)
    found = MlflowClient(uri).search_traces(locations=[tracker.experiment_id], run_id=child)
    assert len(found) == 3
    by_task = {t.info.tags["distillery.task_id"]: t for t in found}
    verdict = {a.name: a for a in by_task["multi_turn_base_3"].info.assessments}
    assert verdict["success"].value is None
    assert "not scored (infra_error)" in verdict["success"].error.error_message
    assert verdict["error_type"].value == "infra"


def _call(turn: int, step: int, at: float, outcome: str, text: str, **kw) -> ModelCallRecord:
    values = dict(
        turn=turn,
        step=step,
        started_at=T0 + at,
        latency_s=1.0,
        attempts=1,
        endpoint="http://llm/v1",
        request_messages=2,
        request_chars=40,
        n_tools=3,
        outcome=outcome,
        text=text,
        tool_calls_json="[]",
        finish_reason="stop",
        tokens_in=100,
        tokens_out=7,
        tokens_reasoning=0,
        error=None,
    )
    return ModelCallRecord(**{**values, **kw})


def test_a_failing_students_trace_shows_every_model_call(tracker: Tracker, uri: str) -> None:
    """A student that answers in prose decodes to no action: its trace still has one
    span per turn and per model call (request, reply, tokens, latency, retries), its
    memory injection, and says the checker failed it; the traces list filters by the
    point's tags and MLflow's token columns are filled."""
    import dataclasses

    calls = [
        _call(0, 0, 1.0, "action", "", tool_calls_json='[{"id": "c1", "name": "ls"}]',
              action_s=0.5, attempts=2),
        _call(0, 1, 3.0, "no_action", "I would list the files first.", request_messages=4),
        _call(1, 0, 5.0, "no_action", "Sure, moving it now!", request_messages=6),
        _call(1, 1, 7.0, "invalid_reply", "", error="content is a number"),
    ]  # fmt: skip
    injection = InjectionRecord(0, -1, T0 + 0.5, "system_prompt", "Workflow: use ls.", 17)
    ls = CallRecord("ls()", "ls", '{"current_directory_content": ["a"]}', None, False)
    record = dataclasses.replace(
        _episode("multi_turn_base_9", False, [_step(0, 0, "", [ls], 1.0)]),
        model_calls=calls,
        injections=[injection],
        messages_json=json.dumps(
            [
                {"role": "system", "content": "Workflow: use ls.\n\nYou are an agent."},
                {"role": "user", "content": "List the files."},
                {"role": "assistant", "content": None},
                {"role": "tool", "content": "a"},
                {"role": "assistant", "content": "I would list the files first."},
                {"role": "user", "content": "Now move a."},
                {"role": "assistant", "content": "Sure, moving it now!"},
            ]
        ),
        tokens_in=400,
        tokens_out=28,
        error_type="multi_turn:state_mismatch",
        error_message="the file system differs",
    )
    with tracker.parent("sweep", {}, {}):
        child = _log(
            tracker,
            {},
            point_id="p",
            traces=[record],
            trace_tags={"method": "amd_wf", "student": "qwen3_4b"},
        )
    client = MlflowClient(uri)
    (trace,) = client.search_traces(locations=[tracker.experiment_id], run_id=child)
    assert trace.info.state == "ERROR"  # not "Success": the checker failed the task
    root = next(s for s in trace.data.spans if s.parent_id is None)
    assert root.status.description.startswith("task failed (multi_turn:state_mismatch)")
    tags = trace.info.tags
    assert (tags["verdict"], tags["method"], tags["student"]) == ("failure", "amd_wf", "qwen3_4b")
    assert (tags["run_id"], tags["task_id"]) == (child, "multi_turn_base_9")
    depth = {"episode": 0, "turn": 1}
    ordered = sorted(
        trace.data.spans, key=lambda s: (s.start_time_ns, depth.get(s.name.split()[0], 2))
    )
    assert [s.name for s in ordered] == [
        "episode multi_turn_base_9",
        "turn 0",
        "memory -> system prompt 0",
        "llm 0.0",
        "tool ls 0.0.0",
        "llm 0.1 (no action)",
        "turn 1",
        "llm 1.0 (no action)",
        "llm 1.1 (invalid reply)",
    ]
    spans = {s.name: s for s in trace.data.spans}
    prose = spans["llm 0.1 (no action)"]
    assert prose.span_type == SpanType.CHAT_MODEL
    assert prose.outputs["text"] == "I would list the files first."
    assert prose.attributes["tokens_in"] == 100 and prose.attributes["latency_s"] == 1.0
    # Its request's new messages: the tool result the model answered (not its own reply).
    assert [m["role"] for m in prose.inputs["messages"]] == ["tool"]
    assert spans["llm 0.0"].attributes["retries"] == 1
    assert spans["llm 1.1 (invalid reply)"].status.status_code == "ERROR"
    memory = spans["memory -> system prompt 0"]
    assert memory.span_type == SpanType.RETRIEVER
    assert memory.outputs["injected"] == "Workflow: use ls."
    tool = spans["tool ls 0.0.0"]
    assert (tool.end_time_ns - tool.start_time_ns) == 500_000_000  # the action's time
    # Every call's tokens in MLflow's token columns (the trace's token usage).
    usage = json.loads(trace.info.request_metadata["mlflow.trace.tokenUsage"])
    assert usage == {"input_tokens": 400, "output_tokens": 28, "total_tokens": 428}
    # The traces list filters by the point's tags.
    assert client.search_traces(
        locations=[tracker.experiment_id], filter_string="tag.method = 'amd_wf'"
    )


def test_points_logged_at_once_keep_every_trace_past_the_export_queue(
    tracker: Tracker, uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow discards a trace its export queue has no room for (a task per span): two
    points logging 8 traces each at once through a queue of 4 keep all 16."""
    import threading

    from mlflow.tracing.provider import reset

    monkeypatch.setenv("MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE", "4")
    mlflow.flush_trace_async_logging(terminate=True)
    reset()  # the exporter and its queue are made again, of that size
    records = [
        dataclasses.replace(_success(), task_id=f"multi_turn_base_{i}", episode_id=f"e{i}")
        for i in range(8)
    ]
    children: dict[str, str] = {}
    with tracker.parent("sweep", {}, {}):

        def point(name: str) -> None:
            children[name] = _log(tracker, {}, point_id=name, traces=records)

        threads = [threading.Thread(target=point, args=(n,)) for n in ("p", "q")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    client = MlflowClient(uri)
    for name in ("p", "q"):
        found = client.search_traces(locations=[tracker.experiment_id], run_id=children[name])
        assert len(found) == 8, name
    mlflow.flush_trace_async_logging(terminate=True)
    monkeypatch.delenv("MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE")
    reset()


def test_a_sweeps_traces_are_exported_by_a_child_process_and_none_is_lost(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's tracker hands each point's traces to a child process (the driver goes
    on at once); closing waits for all of them, with one export in flight at a time."""
    from distillery.orchestrator.tracking import trace_export

    monkeypatch.setattr(trace_export, "MAX_PENDING", 1)  # each point waits for the last
    tracker = Tracker(uri, f"test-{uuid.uuid4().hex[:8]}", trace_process=True)
    records = [
        dataclasses.replace(_success(), task_id=f"multi_turn_base_{i}", episode_id=f"e{i}")
        for i in range(4)
    ]
    exported_here: list[str] = []
    monkeypatch.setattr(
        tracker.trace_log, "log", lambda run_id, *a, **k: exported_here.append(run_id)
    )
    with tracker.exporting_traces(), tracker.parent("sweep", {}, {}):
        children = [_log(tracker, {}, point_id=p, traces=records) for p in ("p", "q", "r")]
    assert not exported_here  # never by the driver's own client
    assert isinstance(tracker.traces, trace_export.TraceExporter)
    assert tracker.traces.settings == trace_export.writer_settings()
    client = MlflowClient(uri)
    for child in children:
        found = client.search_traces(locations=[tracker.experiment_id], run_id=child)
        assert sorted(t.info.tags["distillery.task_id"] for t in found) == sorted(
            r.task_id for r in records
        )


def test_the_trace_writers_settings_keep_what_the_user_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import queue

    from distillery.orchestrator.tracking.trace_export import _serve, writer_settings

    monkeypatch.delenv("MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE", raising=False)
    monkeypatch.setenv("MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS", "3")
    settings = writer_settings()
    assert settings["MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS"] == "3"
    assert settings["MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE"] == "1000"
    # The writer's process runs with them: set before MLflow makes its exporter.
    jobs: queue.SimpleQueue[object] = queue.SimpleQueue()
    jobs.put(None)  # no point to write: the process stops at once
    for name in settings:
        monkeypatch.setenv(name, "unset")  # restored after the test
    _serve(jobs, queue.SimpleQueue(), settings)  # type: ignore[arg-type]
    assert {name: os.environ[name] for name in settings} == settings


def test_an_export_that_hangs_is_given_up_with_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tracking server that accepts and never answers: the driver stops waiting after
    the stall deadline, says for what, and stops the child."""
    import socket

    from distillery.orchestrator.tracking.trace_export import TraceExporter

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections queue; nothing is ever read or answered
    try:
        port = silent.getsockname()[1]
        exporter = TraceExporter(f"http://127.0.0.1:{port}", "0", stall_s=2.0)
        exporter.log("run-1", [_success()])
        with caplog.at_level(logging.WARNING, "distillery.orchestrator.tracking.trace_export"):
            exporter.close()
    finally:
        silent.close()
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith("traces: stopped waiting after 2 s for the export of run run-1's 1")
    assert "the next run of the same command logs the traces it lacks" in line
    assert exporter._writer is None  # the stuck child is gone


def test_a_trace_writer_killed_mid_export_is_one_line_and_the_next_point_starts_another(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The writer's process is killed (out of memory, by hand) while a point's export is
    in flight: the driver says so in one line at once, not after the stall deadline."""
    import signal
    import socket

    from distillery.orchestrator.tracking.trace_export import TraceExporter

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # the export waits here: in flight until the kill
    try:
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        exporter = TraceExporter(uri, "0", stall_s=600.0)
        exporter.log("run-1", [_success()])
        writer = exporter._writer
        assert writer is not None
        assert writer.process.pid is not None
        os.kill(writer.process.pid, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, "distillery.orchestrator.tracking.trace_export"):
            exporter.drain()
        (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert line.startswith("run run-1: exporting its traces failed (the trace writer: exit")
        assert exporter._writer is None and not exporter._pending
        exporter.log("run-2", [_success()])  # another child takes the next point
        assert exporter._writer is not None and exporter._writer.process.is_alive()
        exporter.close(wait=False)
    finally:
        silent.close()
