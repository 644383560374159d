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

from distillery.orchestrator.core.config import ClusterConfig
from distillery.orchestrator.execution.dispatch import (
    PLACEMENT_POLL_S,
    EpisodeWorkers,
    episode_deadline_s,
)
from distillery.workers.episodes import AgentJob, PlayRequest
from distillery.workers.placement import WaitTimeout
from distillery.workers.trajectories import EpisodeSummary


def pool_size(num_workers: int, per_worker: int, server_slots: int | None) -> tuple[int, int]:
    """(workers, plays in flight): `num_workers` of `per_worker` plays each, never more
    in flight than the model's servers take at once (`server_slots`; None: no server),
    and never a worker more than there are plays to run. (It capped the workers at the
    plays per worker instead: a grant of 8 plays on 8 workers of 1 ran one at a time.)"""
    in_flight = num_workers * per_worker
    if server_slots is not None:
        in_flight = min(in_flight, server_slots)
    in_flight = max(1, in_flight)
    return max(1, min(num_workers, in_flight)), in_flight


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
        self.n_workers, in_flight = pool_size(
            cluster.num_workers,
            cluster.episodes_per_worker,
            None
            if job.model.backend == "oracle"
            else max(1, len(endpoints)) * job.model.max_concurrency_per_server,
        )
        self._slots = asyncio.Semaphore(in_flight)
        self._workers: EpisodeWorkers | None = None
        self._busy: list[int] = []
        self.infra: Counter[str] = Counter()
        self.play_deadline_s = episode_deadline_s(job)  # past it, the worker hangs

    def start(self) -> None:
        """Start the workers; a request refused for how it was built stops here."""
        self._workers = EpisodeWorkers(
            self.job, self.endpoints, self.cluster, self.n_workers, self.directory
        )
        self._busy = [0] * self.n_workers
        _, unreachable = self._workers.start()
        if unreachable:
            tqdm.write(
                f"warning: {self.job.model.name} preflight request failed: {unreachable[:300]}"
            )

    async def play(self, task_id: str, request: PlayRequest) -> EpisodeSummary:
        """One play; a lost worker is replaced and the play sent again."""
        import ray.exceptions as ray_exceptions

        workers = self._workers
        if workers is None:
            raise RuntimeError("the episode pool is not started")
        async with self._slots:
            while True:
                workers.poll()  # placed since, or given up (none left at all: it raises)
                if not workers.placed:  # every worker being (re)placed: bounded by poll
                    await asyncio.sleep(PLACEMENT_POLL_S)
                    continue
                index = min(workers.placed, key=lambda w: (self._busy[w], w))
                born = workers.generation[index]
                worker = workers.workers[index]
                self._busy[index] += 1
                try:
                    summary = await asyncio.wait_for(
                        worker.run_task.remote(task_id, request), self.play_deadline_s
                    )
                except TimeoutError:
                    raise WaitTimeout(
                        f"play of task {task_id} by {self.job.model.name} on episode worker "
                        f"{index}: no result in {self.play_deadline_s:.0f} s (its episode "
                        f"timeout and retries are {self.job.episode_timeout_s:.0f} s x "
                        f"{self.job.episode_retries + 1}): the worker hangs; re-run the "
                        "same command to resume the stage there"
                    ) from None
                except (ray_exceptions.RayActorError, ray_exceptions.ActorUnavailableError) as exc:
                    if workers.replace(index, born, exc):
                        self.infra["worker_restarts"] += 1
                    continue
                except ray_exceptions.RayTaskError as exc:
                    cause = exc.cause
                    raise cause if isinstance(cause, Exception) else exc from None
                finally:
                    self._busy[index] -= 1
                self.infra["episode_retries"] += max(0, summary.attempts - 1)
                return summary

    def close(self) -> None:
        workers, self._workers = self._workers, None
        if workers is None:
            return
        with contextlib.suppress(Exception):  # requests re-routed, episodes moved
            self.infra.update(workers.routing_stats())
        workers.close()
