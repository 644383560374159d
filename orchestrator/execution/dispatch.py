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

from distillery.orchestrator.core.config import ClusterConfig
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
    import ray.exceptions as ray_exceptions

    try:
        return ray.get(ref)
    except ray_exceptions.RayTaskError as exc:
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


@dataclass(frozen=True)
class Capacity:
    """How many episode workers an agent gets and how many episodes each may run."""

    in_flight: int  # episodes in flight at most (all workers)
    caps: tuple[int, ...]  # per worker: its share of every replica's request slots

    @property
    def n_workers(self) -> int:
        return len(self.caps)


def worker_capacity(
    job: AgentJob, endpoints: list[str], cluster: ClusterConfig, n_tasks: int
) -> Capacity:
    """Never more episodes in flight than the servers have slots (beyond that episodes
    would only queue, their timeout running), nor than tasks; each worker gets its share
    of every replica's slots (router.worker_slots)."""
    from distillery.workers.llm.router import worker_slots

    in_flight = cluster.num_workers * cluster.episodes_per_worker
    if job.model.backend != "oracle":
        server_slots = max(1, len(endpoints)) * job.model.max_concurrency_per_server
        in_flight = min(in_flight, server_slots)
    n_workers = max(1, min(cluster.num_workers, in_flight, n_tasks))
    if job.model.backend == "oracle":
        return Capacity(in_flight, (cluster.episodes_per_worker,) * n_workers)
    per_replica = job.model.max_concurrency_per_server
    caps = tuple(
        min(
            cluster.episodes_per_worker,
            sum(worker_slots(per_replica, len(endpoints), w, n_workers)),
        )
        for w in range(n_workers)
    )
    return Capacity(in_flight, caps)


class EpisodeWorkers:
    """The Ray episode workers of one agent job, spread over the cluster's nodes; a lost
    worker (its actor, or its node) is replaced in place (`generation` counts it)."""

    def __init__(
        self, job: AgentJob, endpoints: list[str], cluster: ClusterConfig, n: int, directory: Any
    ) -> None:
        self.job, self.endpoints, self.cluster, self.directory = job, endpoints, cluster, directory
        self.n = n
        self.homes = worker_nodes(cluster.worker_num_cpus)
        self.workers: list[Any] = []
        self.generation = [0] * n  # bumped when a worker is replaced

    def _spawn(self, index: int) -> Any:
        # Dealt over the nodes that can hold one; soft, so a worker whose node is gone
        # or full is placed anywhere.
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        home = self.homes[index % len(self.homes)] if self.homes else None
        strategy = NodeAffinitySchedulingStrategy(home, soft=True) if home else "SPREAD"
        return (
            ray.remote(EpisodeWorkerImpl)
            .options(
                num_cpus=self.cluster.worker_num_cpus,
                max_concurrency=self.cluster.episodes_per_worker,
                scheduling_strategy=strategy,
            )
            .remote(self.job, self.endpoints, self.directory, (index, self.n))
        )

    def start(self) -> tuple[list[str], str | None]:
        """Start them: their nodes, and the preflight's message when the server could
        not be reached (a request refused for how it was built raises here, at its
        first)."""
        import ray

        self.workers = [self._spawn(w) for w in range(self.n)]
        try:
            nodes = ray.get([w.ready.remote() for w in self.workers])
            unreachable = ray_get(self.workers[0].preflight.remote())
        except BaseException:
            self.close()
            raise
        return nodes, unreachable

    def replace(self, index: int, born: int, exc: BaseException) -> bool:
        """Replace worker `index` lost with `exc`, unless it was replaced already since
        generation `born` (another of its episodes saw the loss first)."""
        import ray

        if born != self.generation[index]:
            return False
        with contextlib.suppress(Exception):
            ray.kill(self.workers[index])
        self.workers[index] = self._spawn(index)
        self.generation[index] += 1
        tqdm.write(
            f"  episode worker {index} lost ({type(exc).__name__}: {str(exc)[:120]}); "
            "replaced, its episodes dispatched again"
        )
        return True

    def cpu_times(self) -> list[float]:
        import ray

        return ray.get([w.cpu_time_s.remote() for w in self.workers])

    def routing_stats(self) -> Counter[str]:
        import ray

        total: Counter[str] = Counter()
        for stats in ray.get([w.routing_stats.remote() for w in self.workers]):
            total.update(stats)
        return total

    def close(self) -> None:
        import ray

        for w in self.workers:
            with contextlib.suppress(Exception):
                ray.kill(w)


class _Progress:
    """The progress bar and its running totals (the driver's cost per episode stays
    flat in their number)."""

    def __init__(self, total: int, desc: str, enabled: bool) -> None:
        self.bar = tqdm(total=total, desc=desc, unit="ep", disable=not enabled)
        self.enabled = enabled
        self.tally: Counter[str] = Counter()

    def update(self, summary: EpisodeSummary, done: int, in_flight: int) -> None:
        tally = self.tally
        tally["success"] += summary.success is True
        tally["infra_errors"] += summary.success is None
        tally["tokens"] += summary.tokens_in + summary.tokens_out
        self.bar.update(1)
        if self.enabled:
            self.bar.set_postfix(
                success=tally["success"],
                failed=done - tally["success"] - tally["infra_errors"],
                infra_errors=tally["infra_errors"],
                in_flight=in_flight,
                tokens=tally["tokens"],
            )

    def close(self) -> None:
        self.bar.close()


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
    replica's request slots (`worker_capacity`), and never more episodes in flight
    than it has slots. A worker that dies (its actor, or its node) is replaced and
    its in-flight tasks are dispatched again: an episode file is replaced whole, and
    the ledger records an episode only when its summary arrives, so every task ends
    up recorded exactly once."""
    import ray
    import ray.exceptions as ray_exceptions

    capacity = worker_capacity(job, endpoints, cluster, len(task_ids))
    caps = capacity.caps
    pool = EpisodeWorkers(job, endpoints, cluster, capacity.n_workers, directory)
    nodes, unreachable = pool.start()
    if unreachable:  # a server down or a reply of any shape: the episodes decide
        tqdm.write(f"warning: {job.model.name} preflight request: {unreachable[:300]}")
    if progress and len(set(nodes)) > 1:
        tqdm.write(f"  {pool.n} episode workers on {len(set(nodes))} nodes")
    cpu_before = pool.cpu_times()
    started = time.perf_counter()

    pending = list(reversed(task_ids))
    busy = [0] * pool.n
    owner: dict[object, tuple[int, int, str]] = {}  # ref -> (worker, its generation, task)
    summaries: list[EpisodeSummary] = []
    infra: Counter[str] = Counter()
    bar = _Progress(len(task_ids), desc or f"{job.stage} {job.role}:{job.model.name}", progress)
    try:
        while pending or owner:
            while pending:
                free = [w for w in range(pool.n) if busy[w] < caps[w]]
                if not free or len(owner) >= capacity.in_flight:
                    break
                index = min(free, key=lambda w: (busy[w] / caps[w], w))
                task_id = pending.pop()
                ref = pool.workers[index].run_task.remote(task_id)
                owner[ref] = (index, pool.generation[index], task_id)
                busy[index] += 1
            done, _ = ray.wait(list(owner), num_returns=1)
            for ref in done:
                index, born, task_id = owner.pop(ref)
                busy[index] -= 1
                try:
                    summary = ray_get(ref)  # a RequestConfigError stops every episode
                except (ray_exceptions.RayActorError, ray_exceptions.ActorUnavailableError) as exc:
                    # The worker (or its node) is gone: an infrastructure failure, never
                    # the agent's. Replace it once and dispatch its tasks again.
                    pending.append(task_id)
                    if pool.replace(index, born, exc):
                        cpu_before[index] = 0.0
                        infra["worker_restarts"] += 1
                    continue
                if on_summary is not None:  # the ledger: recorded as soon as it lands
                    on_summary(summary)
                summaries.append(summary)
                infra["episode_retries"] += max(0, summary.attempts - 1)
                bar.update(summary, len(summaries), len(owner))
        wall_s = time.perf_counter() - started
        worker_cpu_s = sum(pool.cpu_times()) - sum(cpu_before)
        infra.update(pool.routing_stats())
    finally:
        bar.close()
        pool.close()
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
