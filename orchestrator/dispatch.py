"""Dispatch of one agent's episodes over Ray episode workers: bounded in flight,
spread over the cluster's nodes, each worker with its share of every server
replica's slots, lost workers (or their nodes) replaced and their tasks dispatched
again. Returns what ran and what was retried."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tqdm import tqdm

from distillery.orchestrator.config import ClusterConfig
from distillery.workers.episodes import AgentJob, EpisodeSummary, EpisodeWorkerImpl
from distillery.workers.llm.types import RequestConfigError


@dataclass(frozen=True)
class AgentRun:
    """One agent's episodes plus what running them cost the orchestrator."""

    summaries: list[EpisodeSummary]
    wall_s: float
    worker_cpu_s: float
    # What was retried: episode_retries (attempts beyond the first), worker_restarts
    # (episode workers lost and replaced), requests_rerouted, episodes_replaced.
    infra: dict[str, int] = field(default_factory=dict)


def ray_get(ref: Any) -> Any:
    """ray.get, with a RequestConfigError raised as itself (one message: the model,
    the server's words, the key to change; not a remote traceback)."""
    import ray

    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, RequestConfigError):
            raise exc.cause from None
        raise


INFRA_COUNTS = {
    "episode_retries": 0,
    "worker_restarts": 0,
    "requests_rerouted": 0,
    "episodes_replaced": 0,
    "replica_failures": 0,
    "replica_restarts": 0,
    "replicas_lost": 0,
}


def run_agent(
    job: AgentJob,
    endpoints: list[str],
    task_ids: list[str],
    cluster: ClusterConfig,
    progress: bool = True,
    on_summary: Callable[[EpisodeSummary], None] | None = None,
    directory: Any = None,
    desc: str | None = None,
) -> AgentRun:
    """Spread the tasks over episode workers with a bounded number in flight.

    Workers are spread over the cluster's nodes. Each gets its share of every
    replica's request slots (router.worker_slots), and never more episodes in flight
    than it has slots. A worker that dies (its actor, or its node) is replaced and
    its in-flight tasks are dispatched again: an episode file is replaced whole, and
    the ledger records an episode only when its summary arrives, so every task ends
    up recorded exactly once."""
    import ray

    from distillery.workers.llm.router import worker_slots

    in_flight_cap = cluster.num_workers * cluster.episodes_per_worker
    if job.model.backend != "oracle":
        # Beyond the servers' capacity episodes would only queue, with their episode
        # timeout running.
        server_slots = max(1, len(endpoints)) * job.model.max_concurrency_per_server
        in_flight_cap = min(in_flight_cap, server_slots)
    n_workers = max(1, min(cluster.num_workers, in_flight_cap, len(task_ids)))
    if job.model.backend == "oracle":
        caps = [cluster.episodes_per_worker] * n_workers
    else:
        caps = [
            min(
                cluster.episodes_per_worker,
                sum(
                    worker_slots(job.model.max_concurrency_per_server, len(endpoints), w, n_workers)
                ),
            )
            for w in range(n_workers)
        ]
    worker_cls = ray.remote(EpisodeWorkerImpl)
    homes = worker_nodes(cluster.worker_num_cpus)

    def spawn(index: int) -> Any:
        # Dealt over the nodes that can hold one; soft, so a worker whose node is gone
        # or full is placed anywhere.
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        home = homes[index % len(homes)] if homes else None
        strategy = NodeAffinitySchedulingStrategy(home, soft=True) if home else "SPREAD"
        return worker_cls.options(
            num_cpus=cluster.worker_num_cpus,
            max_concurrency=cluster.episodes_per_worker,
            scheduling_strategy=strategy,
        ).remote(job, endpoints, directory, (index, n_workers))

    workers = [spawn(w) for w in range(n_workers)]
    try:
        nodes = ray.get([w.ready.remote() for w in workers])
        # A request refused for how it was built stops the run here, at its first.
        unreachable = ray_get(workers[0].preflight.remote())
    except BaseException:
        for w in workers:
            ray.kill(w)
        raise
    if unreachable:  # a server down or a reply of any shape: the episodes decide
        tqdm.write(f"warning: {job.model.name} preflight request: {unreachable[:300]}")
    if progress and len(set(nodes)) > 1:
        tqdm.write(f"  {n_workers} episode workers on {len(set(nodes))} nodes")
    cpu_before = ray.get([w.cpu_time_s.remote() for w in workers])
    generation = [0] * n_workers  # bumped when a worker is replaced
    started = time.perf_counter()

    pending = list(reversed(task_ids))
    busy = [0] * n_workers
    owner: dict[object, tuple[int, int, str]] = {}  # ref -> (worker, its generation, task)
    summaries: list[EpisodeSummary] = []
    infra: Counter[str] = Counter()
    tally: Counter[str] = Counter()
    bar = tqdm(
        total=len(task_ids),
        desc=desc or f"{job.stage} {job.role}:{job.model.name}",
        unit="ep",
        disable=not progress,
    )
    try:
        while pending or owner:
            while pending:
                free = [w for w in range(n_workers) if busy[w] < caps[w]]
                if not free or len(owner) >= in_flight_cap:
                    break
                index = min(free, key=lambda w: (busy[w] / caps[w], w))
                task_id = pending.pop()
                ref = workers[index].run_task.remote(task_id)
                owner[ref] = (index, generation[index], task_id)
                busy[index] += 1
            done, _ = ray.wait(list(owner), num_returns=1)
            for ref in done:
                index, born, task_id = owner.pop(ref)
                busy[index] -= 1
                try:
                    summary = ray_get(ref)  # a RequestConfigError stops every episode
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                    # The worker (or its node) is gone: an infrastructure failure, never
                    # the agent's. Replace it once and dispatch its tasks again.
                    pending.append(task_id)
                    if born == generation[index]:  # not replaced yet for another of its tasks
                        with contextlib.suppress(Exception):
                            ray.kill(workers[index])
                        workers[index] = spawn(index)
                        generation[index] += 1
                        cpu_before[index] = 0.0
                        infra["worker_restarts"] += 1
                        tqdm.write(
                            f"  episode worker {index} lost ({type(exc).__name__}: "
                            f"{str(exc)[:120]}); replaced, its episodes dispatched again"
                        )
                    continue
                if on_summary is not None:  # the ledger: recorded as soon as it lands
                    on_summary(summary)
                summaries.append(summary)
                infra["episode_retries"] += max(0, summary.attempts - 1)
                # Running totals: the driver's cost per episode stays flat in their number.
                tally["success"] += summary.success is True
                tally["infra_errors"] += summary.success is None
                tally["tokens"] += summary.tokens_in + summary.tokens_out
                bar.update(1)
                if progress:
                    bar.set_postfix(
                        success=tally["success"],
                        failed=len(summaries) - tally["success"] - tally["infra_errors"],
                        infra_errors=tally["infra_errors"],
                        in_flight=len(owner),
                        tokens=tally["tokens"],
                    )
        wall_s = time.perf_counter() - started
        cpu_after = ray.get([w.cpu_time_s.remote() for w in workers])
        worker_cpu_s = sum(cpu_after) - sum(cpu_before)
        for stats in ray.get([w.routing_stats.remote() for w in workers]):
            infra.update(stats)
    finally:
        bar.close()
        for w in workers:
            with contextlib.suppress(Exception):
                ray.kill(w)
    order = {t: i for i, t in enumerate(task_ids)}
    ordered = sorted(summaries, key=lambda s: order[s.task_id])
    return AgentRun(ordered, wall_s, worker_cpu_s, dict(infra))


def worker_nodes(num_cpus: float) -> list[str]:
    """Alive nodes with room for an episode worker (a KubeRay head with num-cpus 0 has
    none)."""
    import ray

    return [
        n["NodeID"]
        for n in ray.nodes()
        if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= num_cpus
    ]
