"""Episode workers whose node dies while they are idle, on a real Ray cluster of this
machine (tests/support/ray_cluster.py: a head with no CPU for workers and three worker
nodes of one CPU and one distillery_cpu each, as the cpu group's pods advertise it):

- a bulk stage (run_agent) whose every episode is recorded when a worker's node dies:
  the stage ends with its episodes (the dead worker's CPU time is left out), it does not
  fail;
- an outcome-driven stage's pool (EpisodePool) whose idle worker's node dies between
  plays: the next play is sent to a live worker, the lost one is replaced on the node
  with room, and the replacement plays the play after.

A node dies as a pod does: every process of it at once, its Ray workers included
(LocalRayCluster.kill_node; a worker left running would still answer its callers). The
oracle plays (no model server): what is tested is the workers' fate, not a model's. A
worker killed while it plays: tests/orchestrator/test_multinode.py.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from distillery.orchestrator.core.config import ClusterConfig
from distillery.orchestrator.execution.dispatch import run_agent
from distillery.orchestrator.execution.episode_pool import EpisodePool
from distillery.workers.episodes import AgentJob, PlayRequest
from distillery.workers.llm.config import ModelConfig
from distillery.workers.placement import free_per_node
from distillery.workers.trajectories import EpisodeSummary, read_episodes
from tests.support.ray_auth import ray_auth_env
from tests.support.ray_cluster import LocalRayCluster

pytestmark = pytest.mark.slow

WORKER_NODES = ("a", "b", "c")
TASKS = [f"multi_turn_base_{i}" for i in range(3)]


def add_worker_node(cluster: LocalRayCluster, name: str) -> None:
    cluster.add_node(name, 1, {"distillery_cpu": 1})


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    import ray

    ray_cluster = LocalRayCluster()
    try:
        ray_cluster.start_head(0)  # the driver's node: no room for a worker
        for name in WORKER_NODES:
            add_worker_node(ray_cluster, name)
        with ray_auth_env(ray_cluster.env):
            ray.init(address=ray_cluster.address, logging_level=logging.ERROR)
            try:
                yield ray_cluster
            finally:
                ray.shutdown()
    finally:
        ray_cluster.stop()


def cluster_config(num_workers: int, episodes_per_worker: int = 1) -> ClusterConfig:
    return ClusterConfig(
        num_workers=num_workers,
        episodes_per_worker=episodes_per_worker,
        worker_num_cpus=1,
        worker_resource="distillery_cpu",
        placement_timeout_s=120,
    )


def oracle_job(episodes_dir: Path) -> AgentJob:
    return AgentJob(
        run_id="lost-workers",
        stage="collect",
        role="teacher",
        model=ModelConfig(name="oracle", backend="oracle"),
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(episodes_dir),
    )


def actor_states() -> list[tuple[str, str, str]]:
    """(state, pod, death cause) of every episode worker actor (a failure's diagnostic)."""
    from ray._private import state

    return [
        (a["State"], a["Address"]["NodeID"][:8], str(a.get("DeathCause", ""))[:200])
        for a in state.actors().values()
        if a["ActorClassName"] == "EpisodeWorkerImpl"
    ]


def pod_of(node_id: str) -> str:
    """The name of the twin node with Ray node id `node_id` (it advertises node_<name>)."""
    import ray

    (node,) = [n for n in ray.nodes() if n["NodeID"] == node_id]
    return next(k[5:] for k in node["Resources"] if k.startswith("node_"))


def test_a_worker_node_lost_after_every_episode_is_recorded_does_not_fail_the_stage(
    cluster, tmp_path
):
    """Three workers, one per node; when the last episode is recorded (every worker
    idle), node c dies with its worker. Before issue 43 the workers' CPU times were
    read without a deadline or a dead worker left out, and the stage failed here."""
    recorded: list[str] = []

    def on_summary(summary: EpisodeSummary) -> None:
        recorded.append(summary.task_id)
        if len(recorded) == len(TASKS):
            cluster.kill_node("c")  # the driver goes on to ask every worker its CPU time

    job = oracle_job(tmp_path / "episodes")
    try:
        run = run_agent(
            job, [], TASKS, cluster_config(len(TASKS)), progress=False, on_summary=on_summary
        )
    finally:
        if "c" not in cluster.nodes:
            add_worker_node(cluster, "c")  # for the next test
    assert sorted(recorded) == sorted(TASKS)
    assert [s.task_id for s in run.summaries] == TASKS
    assert run.infra.get("worker_restarts", 0) == 0  # nothing was lost with work
    assert sorted(e.task_id for e in read_episodes(job.episodes_dir)) == sorted(TASKS)


def test_an_idle_workers_lost_node_is_replaced_where_there_is_room(cluster, tmp_path):
    """Two workers on two of the three nodes; worker 0's node dies while it waits for
    its next play: that play goes to worker 1, worker 0 is asked for again and placed on
    the third node, and plays the play after."""
    job = oracle_job(tmp_path / "episodes")
    # 2 plays per worker: the pool has no more workers than one worker has slots.
    pool = EpisodePool(job, [], cluster_config(2, episodes_per_worker=2))
    request = PlayRequest(attempt=0, memory=None, episodes_dir=job.episodes_dir)

    async def placed(worker: int) -> None:
        """Until `worker` is placed (the stage starts with the first one placed)."""
        assert workers is not None
        deadline = time.monotonic() + 120
        while worker not in workers.placed:
            assert time.monotonic() < deadline, (
                f"worker {worker} not placed in 120 s; "
                f"{free_per_node(['distillery_cpu'])}; {actor_states()}"
            )
            workers.poll()
            await asyncio.sleep(0.5)

    async def stage() -> None:  # one event loop, as an outcome-driven stage has
        assert workers is not None
        await placed(0)
        await placed(1)
        assert (await pool.play(TASKS[0], request)).success  # worker 0: idle, lowest index
        lost = pod_of(workers.nodes[0])
        (free,) = set(WORKER_NODES) - {lost, pod_of(workers.nodes[1])}
        cluster.kill_node(lost)

        assert (await pool.play(TASKS[1], request)).success  # worker 0 is dead: worker 1
        assert pool.infra["worker_restarts"] == 1
        await placed(0)  # the replacement: on the node with room
        assert pod_of(workers.nodes[0]) == free
        assert (await pool.play(TASKS[2], request)).success  # the replacement (lowest index)
        assert workers.generation == [1, 0]

    pool.start()
    workers = pool._workers
    try:
        asyncio.run(stage())
    finally:
        pool.close()
    assert sorted(e.task_id for e in read_episodes(job.episodes_dir)) == sorted(TASKS)
