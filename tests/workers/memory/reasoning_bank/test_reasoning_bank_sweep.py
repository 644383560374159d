"""ReasoningBank end to end through the sweep, on local Ray, against the scripted
OpenAI-compatible server (real HTTP): one teacher collection and ONE build serve both
catalog entries (the original's top-1 and the AMD authors' ToolSandbox port's top-3), the
student's system prompt carries the items of OTHER tasks under `self_excluded`, and a
second run reuses every stage.

With the oracle teacher the builder is no model (deterministic records, counted as
such); with a scripted teacher that fails one task, that failure becomes memory too:
the builder model (the teacher's own, as the paper builds) is asked with the failure
instruction for it and with the success instruction for the others.
"""

from __future__ import annotations

import functools
import json

import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.report import build_report
from distillery.testing.bfcl_scripts import first_turn_only_text, replay_text
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.envs.registry import make_benchmark
from distillery.workers.memory.reasoning_bank.prompts import MEMORY_PREAMBLE
from distillery.workers.trajectories import read_episodes
from tests.orchestrator.conftest import ray_local  # noqa: F401  (the fixture)
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

pytestmark = pytest.mark.slow

TASKS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
METHODS = ["teacher", "zero_shot", "reasoning_bank", "reasoning_bank_amd_toolsandbox"]
FAILED_BY_TEACHER = "multi_turn_base_2"
SUCCESS_TITLE = "Follow the proven call order"
FAILURE_TITLE = "Finish every user turn"


@functools.cache
def _first_turns() -> dict[str, str]:
    bench = make_benchmark("bfcl_multi_turn_base")
    return {t.turns[0]: t.task_id for t in bench.load_tasks(task_ids=TASKS)}


def _items(title: str) -> str:
    return (
        f"# Memory Item 1\n## Title {title}\n## Description Use for multi-turn file "
        "requests.\n## Content Make the calls each turn asks for, in order, then stop."
    )


def teacher_student_builder(request: dict) -> dict:
    """The scripted server's replies: the builder's requests get memory items (by the
    verdict their instruction names); the teacher fails FAILED_BY_TEACHER after its
    first turn and solves the rest; the student replays the ground truth."""
    first = request["messages"][0]
    if first["role"] == "user" and "tool-using agents" in first["content"]:
        return {"content": _items(FAILURE_TITLE if "FAILED" in first["content"] else SUCCESS_TITLE)}
    user = next(m for m in request["messages"] if m["role"] == "user")
    if request["model"] == "scripted-teacher" and _first_turns().get(user["content"]) == (
        FAILED_BY_TEACHER
    ):
        return first_turn_only_text(request)
    return replay_text(request)


def _run(tmp_path, url, *extra):
    cfg = _config(
        tmp_path,
        f"benchmark.task_ids=[{','.join(TASKS)}]",
        "benchmark.limit=null",
        f"methods=[{','.join(METHODS)}]",
        "protocol=self_excluded",
        *_student(url),
        *extra,
    )
    return cfg, run_sweep([cfg], progress=False)


def _memory_episodes(result, name):
    records = {r.task_id: r for r in read_episodes(result.points[0].method(name).episodes_dir)}
    assert sorted(records) == TASKS
    for task_id, record in records.items():
        log = json.loads(record.extra_json)
        assert log["isolation_violations"] == 0
        for event in log["retrievals"]:
            assert event["allowed"] and event["source_task_id"] != task_id, event
        system = json.loads(record.messages_json)[0]
        assert system["role"] == "system"
        # Appended after the benchmark's own system prompt.
        assert system["content"].index(MEMORY_PREAMBLE) > 0
        assert system["content"].rstrip().endswith(".")
    return records


def test_oracle_teacher_one_collection_one_deterministic_build_two_readings(tmp_path, ray_local):  # noqa: F811
    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_text") as url:
        cfg, result = _run(tmp_path, url)
        made = stub_stats(url)["requests"]
        again = run_sweep([cfg], progress=False)
        assert stub_stats(url)["requests"] == made

    # collect, build (shared by both readings), zero-shot and two memory evaluations.
    assert result.stages_run == 1 + 1 + 1 + 2
    assert again.stages_run == 0
    dirs = {m.name: m.episodes_dir for m in result.points[0].methods}
    assert len(set(dirs.values())) == len(METHODS)
    # The oracle is no model: no build request; every request is a student's.
    students = sum(r.n_llm_calls for n in METHODS[1:] for r in read_episodes(dirs[n]))
    assert made == students

    for name, k in (("reasoning_bank", 1), ("reasoning_bank_amd_toolsandbox", 3)):
        metrics = result.points[0].method(name).metrics
        assert metrics["success_rate"] == 1.0
        assert metrics["isolation_violations"] == 0
        assert metrics["bank_records"] == len(TASKS)
        assert metrics["build.rb.deterministic"] == len(TASKS)
        # Each task sees min(k, the two other tasks) records, one item each.
        shown = min(k, len(TASKS) - 1) * len(TASKS)
        assert metrics["injected_records"] == shown == metrics["isolation_checked"]
        assert metrics["injected_items"] == shown
        for record in _memory_episodes(result, name).values():
            assert "Solved request: " in json.loads(record.messages_json)[0]["content"]

    # MLflow: one child run per catalog entry, tagged with the method and its top-k.
    client = MlflowClient(cfg.tracking_uri)
    children = {
        r.data.tags["method"]: r.data
        for r in client.search_runs(
            [client.get_experiment_by_name("distillery").experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'",
        )
    }
    assert sorted(children) == sorted(METHODS)
    for name, k in (("reasoning_bank", "1"), ("reasoning_bank_amd_toolsandbox", "3")):
        assert children[name].tags["method_kind"] == "reasoning_bank"
        assert children[name].tags["rb_top_k"] == k
        assert children[name].tags["memory_writer"] == "deterministic"  # the oracle is no model
        assert children[name].metrics["isolation_violations"] == 0

    # `distillery report`: a cell per catalog entry, its top-k among the columns.
    report = build_report(result.sweep_dir, log_to_mlflow=False)
    cells = report.tables["cells"]
    for name, k in (("reasoning_bank", 1), ("reasoning_bank_amd_toolsandbox", 3)):
        (cell,) = cells[cells["method"] == name].to_dict("records")
        assert str(cell["rb_top_k"]) == str(k) and cell["n"] == len(TASKS)


def test_a_failed_teacher_trajectory_becomes_memory_through_the_failure_prompt(tmp_path, ray_local):  # noqa: F811
    teacher = [
        "teacher=external",
        "teacher.model=scripted-teacher",
        "teacher.action_format=prompt",
        "teacher.max_retries=1",
        "teacher.retry_backoff_s=0",
    ]
    with run_stub_server(script=f"{__name__}:teacher_student_builder") as url:
        cfg, result = _run(tmp_path, url, *teacher, f"teacher.base_url={url}")
        stats = stub_stats(url)

    assert result.stages_run == 1 + 1 + 1 + 2
    collected = {
        r.task_id: r for r in read_episodes(result.points[0].method("teacher").episodes_dir)
    }
    assert {t for t, r in collected.items() if not r.success} == {FAILED_BY_TEACHER}
    # The teacher's own model wrote the bank: one request per scored trajectory.
    teacher_calls = sum(r.n_llm_calls for r in collected.values())
    student_calls = sum(
        r.n_llm_calls
        for name in METHODS[1:]
        for r in read_episodes(result.points[0].method(name).episodes_dir)
    )
    assert stats["requests"] == teacher_calls + len(TASKS) + student_calls  # no preflight

    for name in ("reasoning_bank", "reasoning_bank_amd_toolsandbox"):
        metrics = result.points[0].method(name).metrics
        assert metrics["bank_records"] == len(TASKS)
        assert metrics["build.rb.accepted"] == len(TASKS)
        assert "build.rb.fallbacks" not in metrics
        assert metrics["isolation_violations"] == 0
    records = _memory_episodes(result, "reasoning_bank_amd_toolsandbox")
    for task_id, record in records.items():
        log = json.loads(record.extra_json)
        system = json.loads(record.messages_json)[0]["content"]
        # Both other tasks' records: the failed one is shown with its lesson.
        assert {e["source_task_id"] for e in log["retrievals"]} == set(TASKS) - {task_id}
        failed_shown = task_id != FAILED_BY_TEACHER
        assert log["injected_failure_records"] == int(failed_shown)
        assert (FAILURE_TITLE in system) == failed_shown
        assert SUCCESS_TITLE in system
