"""Real AppWorld episodes through the process boundary, on a synthetic data folder built
with AppWorld's own library: code executed by AppWorld's interpreter, scored by its
evaluator. Slow: the venv and the data are built once per session (conftest.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from distillery.orchestrator.core.protocols import ProtocolConfig, split_tasks
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.envs.appworld.adapter import AppWorld, AppWorldOptions
from distillery.workers.envs.isolated.process import WorkerRaised, pids_alive
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.trajectories import read_episodes

pytestmark = pytest.mark.slow
ORACLE = ModelConfig(name="oracle", backend="oracle")
IDS = ["a1b2c3d_1", "a1b2c3d_2", "e4f5a6b_1", "c5d6e7f_1"]


def _runner(tmp_path, model: ModelConfig, endpoints=None, split="dev") -> EpisodeRunner:
    job = AgentJob(
        run_id="r",
        stage="collect",
        role="teacher",
        model=model,
        benchmark="appworld",
        episodes_dir=str(tmp_path / "episodes"),
        benchmark_options={"split": split, "spare_workers": 0},
        episode_retries=0,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job, endpoints=endpoints) if endpoints else EpisodeRunner(job)


def test_the_listing_has_scenarios_as_groups_prompts_and_ground_truth(appworld_ready):
    bench = AppWorld(AppWorldOptions(split="dev", spare_workers=0))
    tasks = bench.load_tasks()
    assert [t.task_id for t in tasks] == IDS
    assert [t.group_id for t in tasks] == ["a1b2c3d", "a1b2c3d", "e4f5a6b", "c5d6e7f"]
    first = tasks[0]
    assert first.turns == ("What is my email address?",)
    assert first.metadata["difficulty"] == 1 and first.metadata["scenario_id"] == "a1b2c3d"
    assert [d["name"] for d in first.function_docs] == ["execute"]
    env = bench.make_env(first, "e")
    try:
        assert "Ada Lovelace" in env.system_prompt("prompt")
        assert "at most 40 steps" in env.system_prompt("prompt")
    finally:
        env.close()
    (step,) = bench.oracle_turns(first)[0]
    assert 'profile["email"]' in step and step.endswith("solution(apis, requester)")
    assert [t.task_id for t in AppWorld(AppWorldOptions(split="train")).load_tasks()] == [
        "e4f5a6b_1"
    ]
    groups = {t.task_id: t.group_id for t in tasks}
    split = split_tasks(IDS, ProtocolConfig(name="cross_split"), groups, group_by_default=True)
    sides = [{groups[i] for i in side} for side in (split.memory_ids, split.eval_ids)]
    assert not sides[0] & sides[1]
    assert AppWorld.versions()["appworld"] == "0.1.3.post1"
    bench.close()


def test_the_oracle_replays_the_ground_truth_and_appworld_scores_it(appworld_ready, tmp_path):
    runner = _runner(tmp_path, ORACLE)

    async def play():
        return await asyncio.gather(*[runner.run_task(i) for i in IDS])

    summaries = asyncio.run(play())
    assert [s.success for s in summaries] == [True] * len(IDS)
    records = {r.task_id: r for r in read_episodes(tmp_path / "episodes")}
    assert set(records) == set(IDS)
    assert all(r.termination == "done" and r.steps_per_turn == [1] for r in records.values())
    pids = list(runner.benchmark.pool().recent_pids)
    runner.benchmark.close()
    deadline = time.monotonic() + 30  # episodes close their workers off the event loop
    while pids_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(pids) == 1 + len(IDS) and pids_alive(pids) == []  # the listing's + one an episode


def test_a_scripted_agent_runs_stateful_code_and_is_scored_by_appworld(appworld_ready, tmp_path):
    with run_stub_server("tests.workers.envs.appworld.scripts:profile_then_email") as url:
        model = ModelConfig(
            name="scripted",
            backend="external",
            model="m",
            base_url=url,
            action_format="prompt",
            max_retries=0,
            retry_backoff_s=0,
        )
        runner = _runner(tmp_path, model, endpoints=[url])

        async def play():  # one event loop: the runner's client lives on it
            return await asyncio.gather(runner.run_task("a1b2c3d_1"), runner.run_task("a1b2c3d_2"))

        right, wrong = asyncio.run(play())
        runner.benchmark.close()
    assert right.success is True
    assert wrong.success is False and wrong.error_type == "appworld:tests_failed"
    records = {r.task_id: r for r in read_episodes(tmp_path / "episodes")}
    record = records["a1b2c3d_1"]
    assert record.steps_per_turn == [2] and record.termination == "done"
    messages = json.loads(record.messages_json)
    outputs = [m["content"] for m in messages if m["role"] == "user"][1:]
    assert '"email": "ada@example.com"' in outputs[0]  # the interpreter's own output
    assert outputs[1] == "Output:\n```\nExecution successful.```\n\n"  # wrapped as theirs
    # The episode ended at complete_task: no reply was asked for after it.
    assert [m["role"] for m in messages].count("assistant") == 2
    assert "0/1 tests passed" in (records["a1b2c3d_2"].error_message or "")


def test_an_agent_that_never_finishes_stops_after_40_executions(appworld_ready, tmp_path):
    with run_stub_server("tests.workers.envs.appworld.scripts:never_done") as url:
        model = ModelConfig(
            name="looping",
            backend="external",
            model="m",
            base_url=url,
            action_format="prompt",
            max_retries=0,
            retry_backoff_s=0,
        )
        runner = _runner(tmp_path, model, endpoints=[url])
        summary = asyncio.run(runner.run_task("e4f5a6b_1"))
        runner.benchmark.close()
    assert summary.termination == "step_limit" and summary.total_steps == 40
    assert summary.success is False  # scored all the same, by AppWorld's evaluator
    (record,) = read_episodes(tmp_path / "episodes")
    assert record.steps_per_turn == [40] and record.error_type == "appworld:tests_failed"


def test_the_worker_refuses_a_data_folder_it_cannot_read(appworld_envs, tmp_path, monkeypatch):
    monkeypatch.setenv("DISTILLERY_ENVS_DIR", str(appworld_envs))
    (tmp_path / "data" / "tasks").mkdir(parents=True)
    (tmp_path / "data" / "datasets").mkdir()
    (tmp_path / "data" / "datasets" / "dev.txt").write_text("abcdef0_1\n")
    bench = AppWorld(AppWorldOptions(root=str(tmp_path), split="dev", spare_workers=0))
    with pytest.raises(WorkerRaised, match="specs.json"):
        bench.load_tasks()
    bench.close()
