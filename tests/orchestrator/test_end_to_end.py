"""The whole slice on local Ray: config -> episodes against a scripted OpenAI-compatible
server (real HTTP) -> Parquet -> MLflow."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.driver.run import run_experiment, run_sweep
from distillery.testing.answer_scripts import REPLIES_VARIABLE
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.envs.mathgrade.answers import gsm8k_gold
from distillery.workers.trajectories import SCORED_TERMINATIONS, read_episodes
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

pytestmark = pytest.mark.slow


def test_oracle_teacher_and_scripted_student_land_in_parquet_and_mlflow(tmp_path, ray_local):
    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as url:
        cfg = _config(
            tmp_path, "benchmark.limit=3", "methods=[teacher,zero_shot]", *_student(url, "native")
        )
        result = run_experiment(cfg, progress=False)

    assert result.task_ids == ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
    teacher, student = result.methods
    assert teacher.name == "teacher" and teacher.model.name == "oracle"
    assert student.name == "zero_shot" and student.role == "student"
    for agent in (teacher, student):
        records = read_episodes(agent.episodes_dir)
        assert sorted(r.task_id for r in records) == result.task_ids
        assert all(r.success for r in records), [r.error_message for r in records]
        assert all(r.termination == "done" for r in records)
        assert agent.metrics["success_rate"] == 1.0
        assert agent.metrics["n_tasks"] == 3

    student_records = read_episodes(student.episodes_dir)
    first = next(r for r in student_records if r.task_id == "multi_turn_base_0")
    assert first.stage == "evaluate" and first.role == "student"
    assert first.action_format == "native"
    assert first.steps_per_turn == [3, 2, 1, 4]  # one ground-truth call per step
    assert first.total_steps == 10
    assert first.n_llm_calls == 14  # each turn ends with one call-free answer
    assert first.tokens_in > 0 and first.tokens_out > 0
    assert first.steps[0].calls[0].call == "cd(folder='document')"
    messages = json.loads(first.messages_json)
    # Native mode sends no system prompt, as BFCL's function-calling handlers.
    assert [m["role"] for m in messages[:3]] == ["user", "assistant", "tool"]

    teacher_records = read_episodes(teacher.episodes_dir)
    assert all(r.tokens_in == 0 for r in teacher_records)  # the oracle is no model
    assert all(r.stage == "collect" and r.agent == "oracle" for r in teacher_records)

    client = MlflowClient(cfg.tracking_uri)
    exp = client.get_experiment_by_name("distillery")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.info.run_id == result.parent_run_id)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(c.data.tags["method"] for c in children) == ["teacher", "zero_shot"]
    child = next(c for c in children if c.data.tags["method"] == "zero_shot")
    for key in (
        "success_rate",
        "success_rate_ci_low",
        "success_rate_ci_high",
        "n_tasks",
        "mean_steps",
        "tokens_in",
        "tokens_out",
        "latency_p50_s",
        "latency_p95_s",
        "infra_errors",
    ):
        assert key in child.data.metrics, key
    assert child.data.metrics["success_rate"] == 1.0
    assert child.data.metrics["success_rate_ci_low"] < 1.0
    assert child.data.params["student.base_url"] == url
    artifacts = {a.path for a in client.list_artifacts(child.info.run_id)}
    assert {"results.csv", "results.json", "trajectories"} <= artifacts
    table = pd.read_csv(client.download_artifacts(child.info.run_id, "results.csv"))
    assert list(table["task_id"]) == result.task_ids


def test_text_format_failures_and_hostile_calls_are_scored_not_executed(tmp_path, ray_local):
    marker = Path("/tmp/distillery_pwned")
    marker.unlink(missing_ok=True)
    with run_stub_server(script="distillery.testing.bfcl_scripts:hostile_text") as url:
        cfg = _config(tmp_path, "benchmark.limit=2", "methods=[zero_shot]", *_student(url))
        result = run_experiment(cfg, progress=False)
    assert not marker.exists()
    (student,) = result.methods
    records = read_episodes(student.episodes_dir)
    assert len(records) == 2
    for record in records:
        assert record.success is False
        assert record.termination == "done"
        rejected = record.steps[0].calls[0]
        assert rejected.rejected and rejected.error
    assert student.metrics["success_rate"] == 0.0
    assert student.metrics["infra_errors"] == 0


def test_step_limit_ends_the_episode(tmp_path, ray_local):
    with run_stub_server(script="distillery.testing.bfcl_scripts:loop_forever_text") as url:
        cfg = _config(
            tmp_path,
            "benchmark.limit=1",
            "benchmark.max_steps_per_turn=3",
            "methods=[zero_shot]",
            *_student(url),
        )
        result = run_experiment(cfg, progress=False)
    (record,) = read_episodes(result.methods[0].episodes_dir)
    assert record.termination == "step_limit"
    assert record.steps_per_turn == [4]  # BFCL: the limit, then one more step
    assert record.success is False
    assert record.error_type == "multi_turn:force_terminated"


def test_a_server_that_stays_down_is_an_infra_error_not_a_failure(tmp_path, ray_local):
    with run_stub_server(script="distillery.testing.bfcl_scripts:server_error") as url:
        cfg = _config(
            tmp_path,
            "benchmark.limit=2",
            "methods=[zero_shot]",
            "agent.episode_retries=1",
            *_student(url),
        )
        result = run_experiment(cfg, progress=False)
    (student,) = result.methods
    records = read_episodes(student.episodes_dir)
    assert [r.termination for r in records] == ["infra_error", "infra_error"]
    assert all(r.success is None and r.attempts == 2 for r in records)
    assert student.metrics["infra_errors"] == 2
    assert student.metrics["n_scored"] == 0


def test_replies_that_used_to_abort_the_sweep_are_scored_and_the_run_finishes(
    tmp_path, ray_local, monkeypatch
):
    """Content as a number, a lone surrogate in the last turn, usage of 10**20: each
    aborted the whole sweep (parent run FAILED, the same crash on every re-run); the
    script bends the preflight request too, so an odd first reply is among them. A
    zero-shot sweep never starts the memory service (no stage of it needs memory)."""
    from distillery.orchestrator.execution.memory_stage import MemoryStage

    def no_service(self):
        raise AssertionError("a zero-shot sweep started the memory service")

    monkeypatch.setattr(MemoryStage, "service", property(no_service))
    with run_stub_server(script="tests.support.hostile:hostile") as url:
        for mode in ("content_number", "content_surrogate@9", "usage_huge"):
            student = [*_student(url, "native"), f"student.model={mode}"]
            cfg = _config(tmp_path / mode, "benchmark.limit=1", "methods=[zero_shot]", *student)
            result = run_experiment(cfg, progress=False)
            (record,) = read_episodes(result.methods[0].episodes_dir)
            assert record.success is not None, (mode, record.error_message)
            assert result.methods[0].metrics["infra_errors"] == 0
            parent = MlflowClient(cfg.tracking_uri).get_run(result.parent_run_id)
            assert parent.info.status == "FINISHED", mode
            if mode == "content_number":
                assert record.termination == "invalid_reply" and record.success is False
            else:
                assert record.success, (mode, record.error_message)


def test_amd_memory_reaches_the_student_and_isolation_holds(tmp_path, ray_local):
    """Oracle teacher -> deterministic bank -> a copying student reading it, under
    self_excluded: memory lands in the prompt, no task sees its own entries."""
    with run_stub_server(script="distillery.testing.bfcl_scripts:memory_follower_text") as url:
        cfg = _config(
            tmp_path,
            "benchmark.limit=4",
            "methods=[zero_shot,amd_wf_st_fn]",
            "protocol=self_excluded",
            "memory.retrieval.threshold_st=0.0",
            *_student(url),
        )
        result = run_experiment(cfg, progress=False)

    zero_shot, amd = result.method("zero_shot"), result.method("amd_wf_st_fn")
    # Without memory the copying student has nothing to copy.
    assert all(r.total_steps == 0 for r in read_episodes(zero_shot.episodes_dir))
    records = read_episodes(amd.episodes_dir)
    assert len(records) == 4
    copied = 0
    for record in records:
        log = json.loads(record.extra_json)
        sources = {e["source_task_id"] for e in log["retrievals"] if e["allowed"]}
        assert record.task_id not in sources
        assert log["isolation_violations"] == 0
        system = json.loads(record.messages_json)[0]["content"]
        assert system.index("[Workflow]") < system.index("You are an expert")
        copied += record.total_steps
    assert copied > 0  # the student reproduced calls found only in its memory
    assert amd.metrics["isolation_violations"] == 0
    assert amd.metrics["isolation_checked"] > 0
    assert amd.metrics["injected_wf"] == 4

    client = MlflowClient(cfg.tracking_uri)
    run = client.get_run(amd.mlflow_run_id)
    assert run.data.metrics["isolation_violations"] == 0
    assert run.data.params["method.types"] == "wf,st,fn"
    assert run.data.params["eval_n_tasks"] == "4"
    assert run.data.metrics["bank_wf"] == 4  # one insight per successful oracle episode
    assert run.data.metrics["build.wf.deterministic"] == 4  # the oracle is no model
    split = json.loads(Path(client.download_artifacts(run.info.run_id, "split.json")).read_text())
    assert split["eval_task_ids"] == result.task_ids and split["protocol"] == "self_excluded"

    # Stages are content-addressed: a later invocation with only this method (another
    # sweep, another stub server URL: a runtime knob) reuses the collect, build and
    # evaluate stages from the ledger and makes no LLM call.
    with run_stub_server(script="distillery.testing.bfcl_scripts:memory_follower_text") as url:
        again = run_sweep(
            [
                _config(
                    tmp_path,
                    "benchmark.limit=4",
                    "methods=[amd_wf_st_fn]",
                    "memory.retrieval.threshold_st=0.0",
                    *_student(url),
                )
            ],
            progress=False,
        )
        assert stub_stats(url).get("requests", 0) == 0
    assert again.stages_run == 0
    rerun = client.get_run(again.points[0].methods[0].mlflow_run_id)
    assert rerun.data.params["memory.bank_id"] == run.data.params["memory.bank_id"]
    assert rerun.data.metrics["success_rate"] == run.data.metrics["success_rate"]


def test_cross_split_evaluates_only_the_held_out_tasks(tmp_path, ray_local):
    with run_stub_server(script="distillery.testing.bfcl_scripts:memory_follower_text") as url:
        cfg = _config(
            tmp_path,
            "benchmark.limit=10",
            "methods=[amd_wf_st_fn]",
            "protocol=cross_split",
            *_student(url),
        )
        result = run_experiment(cfg, progress=False)
    split = result.split
    assert len(split.eval_ids) == 3 and len(split.memory_ids) == 7
    (amd,) = result.methods
    records = read_episodes(amd.episodes_dir)
    assert sorted(r.task_id for r in records) == sorted(split.eval_ids)
    for record in records:
        log = json.loads(record.extra_json)
        assert {e["source_task_id"] for e in log["retrievals"]} <= set(split.memory_ids)
    assert amd.metrics["isolation_violations"] == 0


@pytest.mark.llama
def test_bundled_smollm2_plays_one_task_through_llama_cpp(tmp_path, ray_local):
    """The quickstart's student, served by llama.cpp on this machine's CPU, plays one
    BFCL task to a score. Nothing depends on the machine's speed (a loaded 2-core CI
    runner takes minutes for the 8 k-token prompt): the replica's health check answers
    while it generates, and the request and episode limits are far above any run's
    length (they only catch a hang). Whatever the 135M model says, the episode ends
    scored, never as an infrastructure failure."""
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] not installed")
    cfg = _config(
        tmp_path,
        "benchmark.limit=1",
        "methods=[zero_shot]",
        "student.n_ctx=16384",
        "student.request_timeout_s=7200",
        "student.startup_timeout_s=3600",
        "agent.episode_timeout_s=43200",
    )
    result = run_experiment(cfg, progress=False)
    (record,) = read_episodes(result.methods[0].episodes_dir)
    assert record.backend == "llama_cpp"
    assert record.termination in SCORED_TERMINATIONS, record.error_message
    assert record.success is not None  # scored: no infrastructure failure
    assert record.n_llm_calls >= len(record.steps_per_turn) and record.tokens_in > 5000
    assert result.methods[0].metrics["infra_errors"] == 0


def test_an_answer_benchmark_is_scored_counted_and_tracked(tmp_path, ray_local, monkeypatch):
    """GSM8K, the oracle as teacher, a scripted student: right, wrong, no answer and a
    grader-killing answer (a counted grader timeout)."""
    gsm8k = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"
    if not (gsm8k / "test.jsonl").is_file():
        pytest.skip(f"no {gsm8k}")
    rows = [json.loads(line) for line in (gsm8k / "test.jsonl").read_text().splitlines()[:4]]
    gold = [gsm8k_gold(r["answer"]) for r in rows]
    replies = {
        rows[0]["question"]: [f"\\boxed{{{gold[0]}}}"],
        rows[1]["question"]: ["\\boxed{-1}"],
        rows[2]["question"]: ["No idea."],
        rows[3]["question"]: ["\\boxed{9^{9^{9^{9^{9}}}}}"],
    }
    path = tmp_path / "replies.json"
    path.write_text(json.dumps(replies))
    monkeypatch.setenv(REPLIES_VARIABLE, str(path))
    with run_stub_server("distillery.testing.answer_scripts:replies_from_file") as url:
        cfg = _config(tmp_path, "benchmark=gsm8k", f"+benchmark.options.data_path={gsm8k}",
                      "+benchmark.options.grader_timeout_s=2", "benchmark.limit=4",
                      "methods=[teacher,zero_shot]", "cluster.num_workers=1",
                      *_student(url))  # fmt: skip
        result = run_experiment(cfg, progress=False)
    teacher, student = result.methods
    assert teacher.metrics["success_rate"] == 1.0  # the oracle's worked solutions
    assert student.metrics["success_rate"] == 0.25
    assert student.metrics["grader_timeouts"] == 1.0 and student.metrics["infra_errors"] == 0
    client = MlflowClient(cfg.tracking_uri)
    runs = client.search_runs([client.get_experiment_by_name("distillery").experiment_id])
    child = next(r for r in runs if r.data.tags.get("method") == "zero_shot")
    assert child.data.metrics["grader_timeouts"] == 1.0
    assert "grader_math_verify" in child.data.tags.get("deviations", "")
