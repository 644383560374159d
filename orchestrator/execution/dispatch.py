"""Dispatch of one agent's episodes over Ray episode workers: bounded in flight,
spread over the nodes with room for them (never pinned to a full one), every wait for
their placement bounded, each worker with its share of every server
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
from distillery.workers.placement import (
    PlacementTimeout,
    WaitTimeout,
    asks,
    bounded_get,
    placement_message,
)

# How often the dispatch loop looks at workers being (re)placed while it waits.
PLACEMENT_POLL_S = 5.0
# Once the first worker is placed, the stage waits for the others while each arrives
# within this long of the one before (the rest join the stage as they are placed).
PLACEMENT_SETTLE_S = 15.0
# How long a worker may take to say its CPU time or routing counts (a local call of the
# actor; ours): one that does not answer by then is left out of those figures.
WORKER_ANSWER_S = 30.0
# A worker that dies before its first answer this many times is given up (ours).
MAX_START_FAILURES = 3


@dataclass(frozen=True)
class AgentRun:
    """One agent's episodes plus what running them cost the orchestrator."""

    summaries: list[EpisodeSummary]
    wall_s: float
    worker_cpu_s: float
    # What was retried: episode_retries (attempts beyond the first), worker_restarts
    # (episode workers lost and replaced), requests_rerouted, episodes_replaced.
    infra: dict[str, int] = field(default_factory=dict)


def ray_get(ref: Any, *, timeout_s: float, what: str) -> Any:
    """ray.get within `timeout_s` (past it: `WaitTimeout`, one line naming `what` and
    each node's free resources), with a RequestConfigError raised as itself (one
    message: the model, the server's words, the key to change; not a remote traceback)."""
    import ray.exceptions as ray_exceptions

    try:
        return bounded_get(ref, timeout_s, what)
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
    in_flight = cluster.num_workers * cluster.episodes_per_worker
    if job.model.backend != "oracle":
        server_slots = max(1, len(endpoints)) * job.model.max_concurrency_per_server
        in_flight = min(in_flight, server_slots)
    n_workers = max(1, min(cluster.num_workers, in_flight, n_tasks))
    if job.model.backend == "oracle":
        return Capacity(in_flight, (cluster.episodes_per_worker,) * n_workers)
    _, caps = widened_caps(
        job,
        endpoints,
        n_workers,
        job.model.max_concurrency_per_server,
        cluster.episodes_per_worker,
    )
    return Capacity(in_flight, caps)


def widened_caps(
    job: AgentJob, endpoints: list[str], n_workers: int, per_replica: int, per_worker: int
) -> tuple[int, tuple[int, ...]]:
    """(episodes in flight at most, each worker's cap) once a stage's grant is
    `per_replica` request slots on each replica (its episodes in flight for the oracle),
    each worker running at most `per_worker` episodes."""
    from distillery.workers.llm.router import worker_slots

    if job.model.backend == "oracle":
        caps = tuple(min(per_worker, -(-per_replica // n_workers)) for _ in range(n_workers))
        return min(per_replica, sum(caps)), caps
    caps = tuple(
        min(per_worker, sum(worker_slots(per_replica, len(endpoints), w, n_workers)))
        for w in range(n_workers)
    )
    return min(sum(caps), max(1, len(endpoints)) * per_replica), caps


class EpisodeWorkers:
    """The Ray episode workers of one agent job, spread over the nodes that have room
    for them; a lost worker (its actor, or its node) is replaced wherever there is room
    (`generation` counts it).

    No wait for placement is unbounded. A worker is `placed` once its actor answers;
    the stage starts as soon as one is (the rest join as room appears: an autoscaler's
    new pod), and a worker still not placed `cluster.placement_timeout_s` after it was
    asked for is given up with one line (what it asks, what every node has free); with
    none placed at all the stage fails with that line (PlacementTimeout)."""

    def __init__(
        self,
        job: AgentJob,
        endpoints: list[str],
        cluster: ClusterConfig,
        n: int,
        directory: Any,
        max_concurrency: int | None = None,
    ) -> None:
        self.job, self.endpoints, self.cluster, self.directory = job, endpoints, cluster, directory
        self.n = n
        # Episodes one worker may run at once: its share now, or more for a stage whose
        # grant may widen (run_agent's `live_grant`).
        self.max_concurrency = max_concurrency or cluster.episodes_per_worker
        self.workers: list[Any] = []
        self.generation = [0] * n  # bumped when a worker is replaced
        self.placed: set[int] = set()  # workers whose actor answered
        self.nodes: dict[int, str] = {}  # placed worker -> its Ray node
        # Workers not yet placed: index -> (its ready() ref, when it was asked for).
        self.placing: dict[int, tuple[Any, float]] = {}
        self.given_up: set[int] = set()  # never placed by the deadline, or cannot start
        self.start_failures = [0] * n  # deaths before the first answer, per worker

    @property
    def asks(self) -> dict[str, float]:
        """What one worker reserves: its CPUs, and the cluster's episode-worker resource
        (only the nodes meant for workers have it: never the head or a GPU pod)."""
        return {
            "CPU": self.cluster.worker_num_cpus,
            **self.cluster.worker_resources(self.job.benchmark),
        }

    def _spawn(self, index: int) -> Any:
        # SPREAD places each worker on a node with room for it now, and never pins one
        # to a node (a soft node affinity waits on a full node for ever: Ray moves it
        # only when that node is gone or infeasible).
        import ray

        custom = self.cluster.worker_resources(self.job.benchmark)
        actor = (
            ray.remote(EpisodeWorkerImpl)
            .options(
                num_cpus=self.cluster.worker_num_cpus,
                resources=custom or None,
                max_concurrency=self.max_concurrency,
                scheduling_strategy="SPREAD",
            )
            .remote(self.job, self.endpoints, self.directory, (index, self.n))
        )
        self.placed.discard(index)
        self.placing[index] = (actor.ready.remote(), time.monotonic())
        return actor

    def start(self) -> tuple[list[str], str | None]:
        """Start them: the nodes of those placed, and the preflight's message when the
        server could not be reached (a request refused for how it was built raises
        here, at its first). None placed by the deadline raises PlacementTimeout."""
        import ray

        self.workers = [self._spawn(w) for w in range(self.n)]
        try:
            refs = [ref for ref, _ in self.placing.values()]
            timeout = self.cluster.placement_timeout_s
            first, _ = ray.wait(refs, num_returns=1, timeout=timeout)
            if not first:
                raise PlacementTimeout(self._placement_line(self.n, timeout))
            # The others while they keep arriving (a node starts its worker processes
            # one by one); those without room join the stage when they are placed.
            placed = len(first)
            while placed < len(refs):
                more, _ = ray.wait(refs, num_returns=placed + 1, timeout=PLACEMENT_SETTLE_S)
                if len(more) == placed:
                    break
                placed = len(more)
            self.poll()
            # Every ready one had died while starting (asked for again): wait for one,
            # within the deadline (each respawn has its own; poll gives up on it).
            while not self.placed:
                waiting = [ref for ref, _ in self.placing.values()]
                if not waiting:
                    raise PlacementTimeout(self._placement_line(self.n, timeout))
                ray.wait(waiting, num_returns=1, timeout=PLACEMENT_POLL_S)
                self.poll()
            # The worker's one request to its servers: bounded by its request timeout.
            unreachable = ray_get(
                self.workers[min(self.placed)].preflight.remote(),
                timeout_s=self.job.model.request_timeout_s * 2 + 60,
                what=f"the preflight request of {self.job.model.name}'s episode worker",
            )
        except BaseException:
            self.close()
            raise
        return [self.nodes[w] for w in sorted(self.placed)], unreachable

    def _placement_line(self, missing: int, waited_s: float) -> str:
        return placement_message(
            f"episode workers of {self.job.stage} {self.job.role}:{self.job.model.name}",
            missing,
            self.n,
            waited_s,
            [self.asks],
        )

    def poll(self) -> None:
        """Workers placed since the last look join `placed`; one still not placed after
        the deadline is given up (a warning line), unless it is the last hope: with no
        worker placed, PlacementTimeout."""
        import ray

        if not self.placing:
            return
        refs = {ref: index for index, (ref, _) in self.placing.items()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
        for ref in ready:
            index = refs[ref]
            del self.placing[index]
            try:
                self.nodes[index] = ray.get(ref, timeout=0)  # ready: ray.wait said so
            except Exception as exc:  # died as it started: replaced, a few times at most
                self._died_starting(index, exc)
                continue
            self.placed.add(index)
        timeout = self.cluster.placement_timeout_s
        now = time.monotonic()
        late = [i for i, (_, since) in self.placing.items() if now - since > timeout]
        if not late:
            return
        line = self._placement_line(len(late), timeout)
        if not self.placed:
            raise PlacementTimeout(line)
        for index in late:
            del self.placing[index]
            self.given_up.add(index)
            with contextlib.suppress(Exception):
                ray.kill(self.workers[index])
        tqdm.write(f"  warning: {line}; going on with {len(self.placed)} placed")

    def _died_starting(self, index: int, exc: BaseException) -> None:
        """Worker `index` died before it answered (its node went away, its process was
        killed): asked for again wherever there is room, up to MAX_START_FAILURES times
        (a worker that cannot start at all, e.g. a broken environment, is not retried
        for ever: given up, and with none placed the stage ends with why)."""
        import ray

        self.start_failures[index] += 1
        why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ''}"
        if self.start_failures[index] >= MAX_START_FAILURES:
            self.given_up.add(index)
            if not self.placed and len(self.given_up) == self.n:
                raise PlacementTimeout(
                    f"no episode worker of {self.job.stage} {self.job.role}:"
                    f"{self.job.model.name} could start ({MAX_START_FAILURES} tries each); "
                    f"the last: {why}"
                )
            tqdm.write(f"  warning: episode worker {index} could not start ({why}); given up")
            return
        with contextlib.suppress(Exception):
            ray.kill(self.workers[index])
        self.workers[index] = self._spawn(index)
        self.generation[index] += 1
        tqdm.write(f"  episode worker {index} died while starting ({why}); asked for again")

    def replace(self, index: int, born: int, exc: BaseException) -> bool:
        """Replace worker `index` lost with `exc`, unless it was replaced already since
        generation `born` (another of its episodes saw the loss first). The replacement
        is placed wherever there is room (until then its episodes go to the others)."""
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

    def cpu_times(self) -> dict[int, float]:
        return {w: float(t) for w, t in self._ask_each("cpu_time_s").items()}

    def routing_stats(self) -> Counter[str]:
        total: Counter[str] = Counter()
        for stats in self._ask_each("routing_stats").values():
            total.update(stats)
        return total

    def _ask_each(self, method: str) -> dict[int, Any]:
        """Each placed worker's answer to `method` (its CPU time, its routing counts),
        waited for at most WORKER_ANSWER_S: a worker that died (its node, while idle or
        starting) or does not answer is left out. Its figures are lost, not the stage,
        whose episodes are all recorded by then."""
        import ray

        refs = {w: getattr(self.workers[w], method).remote() for w in sorted(self.placed)}
        if not refs:
            return {}
        ready, _ = ray.wait(list(refs.values()), num_returns=len(refs), timeout=WORKER_ANSWER_S)
        answered = set(ready)
        out: dict[int, Any] = {}
        for w, ref in refs.items():
            if ref in answered:
                with contextlib.suppress(Exception):  # died with an error: left out
                    out[w] = ray.get(ref, timeout=0)
        return out

    def close(self) -> None:
        import ray

        for w in self.workers:
            with contextlib.suppress(Exception):
                ray.kill(w)


class _Progress:
    """The progress bar and its running totals (the driver's cost per episode stays
    flat in their number)."""

    def __init__(self, total: int, desc: str, enabled: bool, position: int | None = None) -> None:
        # With several stages running, each bar keeps its own row and is cleared when
        # its stage ends (the stage's end is a line of its own).
        self.bar = tqdm(
            total=total,
            desc=desc,
            unit="ep",
            disable=not enabled,
            position=position,
            leave=position is None,
        )
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


def episode_deadline_s(job: AgentJob) -> float:
    """How long one episode may take on a worker: its attempts' timeouts and backoffs,
    plus 5 minutes (ours). Past it, the worker hangs."""
    attempts = job.episode_retries + 1
    return attempts * (job.episode_timeout_s + job.retry_backoff_s) + 300.0


def _check_overdue(
    owner: dict[object, tuple[int, int, str]],
    sent_at: dict[object, float],
    deadline_s: float,
    job: AgentJob,
) -> None:
    now = time.monotonic()
    for ref, sent in sent_at.items():
        if now - sent > deadline_s and ref in owner:
            index, _, task_id = owner[ref]
            raise WaitTimeout(
                f"episode {task_id} of {job.stage} {job.role}:{job.model.name} on episode "
                f"worker {index}: no result in {deadline_s:.0f} s (its timeout and retries "
                f"are {job.episode_timeout_s:.0f} s x {job.episode_retries + 1}): the worker "
                "hangs; re-run the same command to resume the stage there"
            )


def _widen(pool: EpisodeWorkers, per_replica: int, told: dict[int, tuple[int, int]]) -> None:
    """Tell each placed worker (a replacement too) its router's wider share, once."""
    for w in sorted(pool.placed):
        now = (pool.generation[w], per_replica)
        if told.get(w) != now:
            pool.workers[w].widen.remote(per_replica)  # a dead one is replaced anyway
            told[w] = now


def run_agent(
    job: AgentJob,
    endpoints: list[str],
    task_ids: list[str],
    cluster: ClusterConfig,
    progress: bool = True,
    on_summary: Callable[[EpisodeSummary], None] | None = None,
    directory: Any = None,
    desc: str | None = None,
    position: int | None = None,
    on_load: Callable[[int, int], None] | None = None,
    live_grant: Callable[[], Any] | None = None,
    max_per_worker: int | None = None,
) -> AgentRun:
    """Spread the tasks over episode workers with a bounded number in flight.

    Workers are spread over the cluster's nodes. Each gets its share of every
    replica's request slots (`worker_capacity`), and never more episodes in flight
    than it has slots. A worker that dies (its actor, or its node) is replaced and
    its in-flight tasks are dispatched again: an episode file is replaced whole, and
    the ledger records an episode only when its summary arrives, so every task ends
    up recorded exactly once. `on_load` is told the episodes in flight and those still
    to dispatch at every turn (the servers' serving time; a stage's tail).

    `live_grant` (the scheduler's grant of the stage now: `episodes` in flight,
    `per_replica` request slots on each replica) widens the stage while it runs: when it
    grows, each worker runs more episodes (up to `max_per_worker`, what its actor was
    started to take) and its router takes its share of the wider slots."""
    import ray
    import ray.exceptions as ray_exceptions

    capacity = worker_capacity(job, endpoints, cluster, len(task_ids))
    caps = capacity.caps
    per_worker = max(cluster.episodes_per_worker, max_per_worker or 0)
    pool = EpisodeWorkers(job, endpoints, cluster, capacity.n_workers, directory, per_worker)
    in_flight_cap, per_replica = capacity.in_flight, job.model.max_concurrency_per_server
    widened: dict[int, tuple[int, int]] = {}  # worker -> (its generation, share) it was told
    nodes, unreachable = pool.start()
    if unreachable:  # a server down or a reply of any shape: the episodes decide
        tqdm.write(f"warning: {job.model.name} preflight request: {unreachable[:300]}")
    if progress and len(set(nodes)) > 1:
        tqdm.write(f"  {len(nodes)} episode workers on {len(set(nodes))} nodes")
    if pool.placing:
        tqdm.write(
            f"  {len(pool.placing)} of {pool.n} episode workers wait for room (asking "
            f"{asks(pool.asks)}); the stage starts with {len(pool.placed)}"
        )
    cpu_before = pool.cpu_times()
    started = time.perf_counter()

    pending = list(reversed(task_ids))
    sent_at: dict[object, float] = {}  # ref -> when it was dispatched
    deadline_s = episode_deadline_s(job)
    busy = [0] * pool.n
    owner: dict[object, tuple[int, int, str]] = {}  # ref -> (worker, its generation, task)
    summaries: list[EpisodeSummary] = []
    infra: Counter[str] = Counter()
    bar = _Progress(
        len(task_ids), desc or f"{job.stage} {job.role}:{job.model.name}", progress, position
    )
    try:
        while pending or owner:
            pool.poll()  # workers placed since, or given up (none at all: it raises)
            grant = live_grant() if live_grant is not None and pending else None
            if grant is not None and grant.episodes > in_flight_cap:
                per_replica = max(per_replica, grant.per_replica)
                slots = grant.per_replica or grant.episodes  # the oracle: episodes
                in_flight_cap, caps = widened_caps(job, endpoints, pool.n, slots, per_worker)
                in_flight_cap = min(in_flight_cap, grant.episodes)
            if per_replica > job.model.max_concurrency_per_server:
                _widen(pool, per_replica, widened)
            while pending:
                free = [w for w in sorted(pool.placed) if busy[w] < caps[w]]
                if not free or len(owner) >= in_flight_cap:
                    break
                index = min(free, key=lambda w: (busy[w] / caps[w], w))
                task_id = pending.pop()
                ref = pool.workers[index].run_task.remote(task_id)
                owner[ref] = (index, pool.generation[index], task_id)
                sent_at[ref] = time.monotonic()
                busy[index] += 1
            if on_load is not None:
                on_load(len(owner), len(pending))
            # Never an unbounded wait: workers being placed are looked at every few
            # seconds (their deadline ends the stage when no worker is left).
            waiting = list(owner) or [ref for ref, _ in pool.placing.values()]
            done, _ = ray.wait(waiting, num_returns=1, timeout=PLACEMENT_POLL_S)
            _check_overdue(owner, sent_at, deadline_s, job)
            for ref in done:
                if ref not in owner:  # a worker placed: dispatched to on the next turn
                    continue
                index, born, task_id = owner.pop(ref)
                sent_at.pop(ref, None)
                busy[index] -= 1
                try:
                    # Ready (ray.wait returned it); a RequestConfigError stops every episode.
                    summary = ray_get(ref, timeout_s=60, what=f"episode {task_id}'s result")
                except (ray_exceptions.RayActorError, ray_exceptions.ActorUnavailableError) as exc:
                    # The worker (or its node) is gone: an infrastructure failure, never
                    # the agent's. Replace it once and dispatch its tasks again.
                    pending.append(task_id)
                    if pool.replace(index, born, exc):
                        cpu_before.pop(index, None)
                        infra["worker_restarts"] += 1
                    continue
                if on_summary is not None:  # the ledger: recorded as soon as it lands
                    on_summary(summary)
                summaries.append(summary)
                infra["episode_retries"] += max(0, summary.attempts - 1)
                bar.update(summary, len(summaries), len(owner))
        wall_s = time.perf_counter() - started
        cpu_after = pool.cpu_times()
        worker_cpu_s = sum(cpu_after.values()) - sum(cpu_before.get(w, 0.0) for w in cpu_after)
        infra.update(pool.routing_stats())
    finally:
        if on_load is not None:
            on_load(0, 0)
        bar.close()
        pool.close()
    order = {t: i for i, t in enumerate(task_ids)}
    ordered = sorted(summaries, key=lambda s: order[s.task_id])
    return AgentRun(ordered, wall_s, worker_cpu_s, dict(infra))
