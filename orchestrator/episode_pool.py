"""Episode workers for plays decided one at a time (an outcome-driven stage): a pool of
Ray episode workers of one agent job, each play sent to the least busy one and awaited
from asyncio; a worker that dies (its actor, or its node) is replaced and the play is
sent again (an episode file is replaced whole, so a play is recorded once)."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from typing import Any

from tqdm import tqdm

from distillery.orchestrator.config import ClusterConfig
from distillery.orchestrator.dispatch import ray_get, worker_nodes
from distillery.workers.episodes import AgentJob, EpisodeWorkerImpl, PlayRequest
from distillery.workers.trajectories import EpisodeSummary


class EpisodePool:
    """`cluster.num_workers` episode workers of `job`, at most
    `cluster.episodes_per_worker` plays each in flight (and never more than the model's
    servers have slots)."""

    def __init__(
        self, job: AgentJob, endpoints: list[str], cluster: ClusterConfig, directory: Any = None
    ) -> None:
        self.job = job
        self.endpoints = endpoints
        self.cluster = cluster
        self.directory = directory
        cap = cluster.episodes_per_worker
        if job.model.backend != "oracle":
            cap = min(cap, max(1, len(endpoints)) * job.model.max_concurrency_per_server)
        self.n_workers = max(1, min(cluster.num_workers, cap))
        self._slots = asyncio.Semaphore(cap * self.n_workers)
        self._workers: list[Any] = []
        self._busy: list[int] = []
        self.infra: Counter[str] = Counter()

    def _spawn(self, index: int) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        homes = worker_nodes(self.cluster.worker_num_cpus)
        home = homes[index % len(homes)] if homes else None
        strategy = NodeAffinitySchedulingStrategy(home, soft=True) if home else "SPREAD"
        return (
            ray.remote(EpisodeWorkerImpl)
            .options(
                num_cpus=self.cluster.worker_num_cpus,
                max_concurrency=self.cluster.episodes_per_worker,
                scheduling_strategy=strategy,
            )
            .remote(self.job, self.endpoints, self.directory, (index, self.n_workers))
        )

    def start(self) -> None:
        """Start the workers; a request refused for how it was built stops here."""
        import ray

        self._workers = [self._spawn(i) for i in range(self.n_workers)]
        self._busy = [0] * self.n_workers
        try:
            ray.get([w.ready.remote() for w in self._workers])
            unreachable = ray_get(self._workers[0].preflight.remote())
        except BaseException:
            self.close()
            raise
        if unreachable:
            tqdm.write(
                f"warning: {self.job.model.name} preflight request failed: {unreachable[:300]}"
            )

    async def play(self, task_id: str, request: PlayRequest) -> EpisodeSummary:
        """One play; a lost worker is replaced and the play sent again."""
        import ray

        async with self._slots:
            while True:
                index = min(range(self.n_workers), key=lambda w: (self._busy[w], w))
                worker = self._workers[index]
                self._busy[index] += 1
                try:
                    summary = await worker.run_task.remote(task_id, request)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                    if self._workers[index] is worker:  # not replaced yet by another play
                        with contextlib.suppress(Exception):
                            ray.kill(worker)
                        self._workers[index] = self._spawn(index)
                        self.infra["worker_restarts"] += 1
                        tqdm.write(
                            f"  episode worker {index} lost ({type(exc).__name__}); replaced, "
                            "its play sent again"
                        )
                    continue
                except ray.exceptions.RayTaskError as exc:
                    cause = exc.cause
                    raise cause if isinstance(cause, Exception) else exc from None
                finally:
                    self._busy[index] -= 1
                self.infra["episode_retries"] += max(0, summary.attempts - 1)
                return summary

    def close(self) -> None:
        import ray

        for worker in self._workers:
            with contextlib.suppress(Exception):
                ray.kill(worker)
        self._workers = []
