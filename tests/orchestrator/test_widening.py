"""A running stage's grant widens while it plays (issue 41: the tail): the dispatcher,
its Ray episode workers and their routers take the wider share at once, and the model's
server sees it. The scheduler's side (who gets what is freed) is test_schedule.py's and
test_capacity.py's; here the grant is the scheduler's as `run_agent` reads it, widened
once the first episodes have landed, against the scripted server on a local Ray."""

from __future__ import annotations

from pathlib import Path

from distillery.orchestrator.core.config import ClusterConfig
from distillery.orchestrator.execution.capacity import Grant
from distillery.orchestrator.execution.dispatch import run_agent
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.episodes import AgentJob
from distillery.workers.llm.config import ModelConfig

TASKS = [f"multi_turn_base_{i}" for i in range(12)]


def test_a_widened_grant_reaches_the_workers_routers_and_the_server(ray_local, tmp_path: Path):
    with run_stub_server(script="distillery.testing.scripts:always_text", delay_s=0.3) as url:
        model = ModelConfig(
            name="scripted",
            backend="external",
            model="scripted",
            base_url=url,
            max_concurrency_per_server=2,  # the stage's first share of the replica
            max_retries=1,
            retry_backoff_s=0,
        )
        job = AgentJob(
            run_id="widening",
            stage="evaluate",
            role="student",
            model=model,
            benchmark="bfcl_multi_turn_base",
            episodes_dir=str(tmp_path / "episodes"),
            retry_backoff_s=0,
        )
        landed: list[str] = []
        cluster = ClusterConfig(num_workers=2, episodes_per_worker=1, worker_num_cpus=0.5)

        def live_grant() -> Grant:
            # Another stage of the model ended once two episodes had landed.
            return Grant(8, 8, workers=2) if len(landed) >= 2 else Grant(2, 2, workers=2)

        run = run_agent(
            job,
            [url],
            TASKS,
            cluster,
            progress=False,
            on_summary=lambda s: landed.append(s.task_id),
            live_grant=live_grant,
            max_per_worker=4,
        )
        stats = stub_stats(url)
    assert sorted(s.task_id for s in run.summaries) == sorted(TASKS)
    assert all(s.success is not None for s in run.summaries)  # graded: no infra error
    # Two at a time before, 8 after: 2 workers x 4 episodes, each router's share of 8.
    assert stats["in_flight_max"] > 2, stats
