"""A sweep's stage graph run as a graph: every stage whose inputs are ready starts as
soon as what it needs is free, so stages of different students, seeds and methods run
at the same time.

What a stage needs: its upstream stages ended well, and, for a stage that plays
episodes, a `capacity.Grant` (episode workers and a share of its model's request slots;
its model's servers start with its first stage and stop after its last, `ServerPool`).
A stage that plays nothing (a bank build) needs only its inputs. `cluster.max_stages_in_flight`
caps how many run at once (0: as many as the capacity allows).

Each running stage has a thread of the driver (its episodes are Ray actors; the thread
dispatches them and waits). A stage that fails stops only the stages that read it,
directly or not: the others run to their end, then the first failure is raised (the
CLI's one line for it) after a summary of what failed and what did not run and why.
Stage keys, episodes and ledger records are those of a one-at-a-time run: a stage's
key depends on its config and upstream keys only, each stage writes its own folder,
and every episode is recorded by the stage that plays it as it lands.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distillery.orchestrator.execution.capacity import Capacity, Demand, Grant
from distillery.orchestrator.planning.plan import server_key
from distillery.orchestrator.stages.stage import Stage, StageKey

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep

log = logging.getLogger(__name__)

# How long the scheduler waits for a stage to end before it looks again (a Ctrl-C is
# seen at least this often; each stage bounds its own waits).
POLL_S = 1.0


@dataclass(frozen=True)
class StageEnd:
    """How a stage ended: ran, cached (the ledger had it), failed, or not run."""

    key: StageKey
    state: str  # ran | cached | failed | not run
    reason: str = ""
    error: BaseException | None = None
    wall_s: float = 0.0


class StageScheduler:
    """Runs `sweep`'s stage graph with every ready stage started as soon as it can be."""

    def __init__(self, sweep: Sweep, max_in_flight: int = 0) -> None:
        self.sweep = sweep
        self.graph = sweep.graph
        self.max_in_flight = max_in_flight
        cluster = sweep.cfg.cluster
        self.capacity = Capacity(
            cluster.num_workers * cluster.episodes_per_worker,
            cluster.num_workers,
            cluster.episodes_per_worker,
        )
        sweep.capacity = self.capacity  # a stage's tail gives back what it cannot use
        self.ends: dict[StageKey, StageEnd] = {}
        self._demands: dict[StageKey, Demand | None] = {}
        self.started_order: list[StageKey] = []
        self._readers: dict[StageKey, set[StageKey]] = {k: set() for k in self.graph.stages}
        for key, stage in self.graph.stages.items():
            for up in stage.upstream:
                self._readers[up].add(key)

    # -- order ---------------------------------------------------------------------

    @functools.cache  # noqa: B019 - one scheduler per sweep run
    def height(self, key: StageKey) -> int:
        """The longest chain of stages that read `key` (its own included): stages on the
        longest path start first, so the sweep's critical path is never kept waiting."""
        return 1 + max((self.height(r) for r in self._readers[key]), default=0)

    def priority(self, key: StageKey) -> tuple:
        return (-self.height(key), self.graph.depth(key), self.sweep.model_order(key), key)

    # -- demand --------------------------------------------------------------------

    def demand(self, key: StageKey) -> Demand | None:
        """What the stage could use at once (None: it plays no episodes now). Read once,
        when it is first ready: nothing else writes its episodes while it waits."""
        if key not in self._demands:
            self._demands[key] = self._demand(key)
        return self._demands[key]

    def _demand(self, key: StageKey) -> Demand | None:
        stage = self.graph.stages[key]
        episodes = stage.episode_demand(self.sweep.ledger, self.graph.needs.get(key, set()))
        if episodes <= 0:
            return None
        model = self.sweep.episode_model(stage)
        if model.backend == "oracle":
            return Demand(str(key), episodes, None)
        server = server_key(model)
        replicas = model.replicas if model.launched else 1
        self.capacity.add_server(server, model.max_concurrency_per_server)
        return Demand(str(key), episodes, server, replicas)

    # -- the run -------------------------------------------------------------------

    def run(self) -> list[StageEnd]:
        """Run every stage (or say why not); raise the first failure after the rest."""
        waiting = sorted(self.graph.stages, key=self.priority)
        running: dict[StageKey, threading.Thread] = {}
        ended: queue.Queue[StageEnd] = queue.Queue()
        total = len(waiting)
        try:
            while waiting or running:
                for key in self._startable(waiting, running):
                    waiting.remove(key)
                    self.started_order.append(key)
                    prefix = f"[{len(self.started_order)}/{total}]"
                    thread = threading.Thread(
                        target=self._run_one,
                        args=(key, prefix, ended),
                        name=f"stage-{key.short}",
                        daemon=True,  # a Ctrl-C ends the driver; Ray's shutdown ends them
                    )
                    running[key] = thread
                    thread.start()
                self._widen(running)
                if not running:
                    break  # nothing runs and nothing can start: every rest reads a failure
                try:
                    end = ended.get(timeout=POLL_S)
                except queue.Empty:
                    continue
                running.pop(end.key).join()
                self._ended(end, waiting)
        finally:
            for key in waiting:  # never started (a failure upstream, or an interrupt)
                self.ends.setdefault(key, StageEnd(key, "not run", "the sweep stopped"))
        self._raise_failures()
        return [self.ends[k] for k in self.started_order if k in self.ends]

    def _startable(
        self, waiting: list[StageKey], running: dict[StageKey, threading.Thread]
    ) -> list[StageKey]:
        ready = [k for k in waiting if all(self._done(u) for u in self.graph.stages[k].upstream)]
        room = self.max_in_flight - len(running) if self.max_in_flight > 0 else len(ready)
        if room <= 0 or not ready:
            return []
        demands = {k: self.demand(k) for k in ready}
        # Grants are dealt only to as many ready stages as may start (in priority order),
        # a batch at a time while room is left: spare worker processes dealt to a stage
        # the cap keeps waiting would be given back but not dealt to those that start.
        start: list[StageKey] = []
        pending = list(ready)
        while pending and len(start) < room:
            batch, pending = pending[: room - len(start)], pending[room - len(start) :]
            wanting = [d for k in batch if (d := demands[k]) is not None]
            grants = self.capacity.take(wanting) if wanting else {}
            for key in batch:
                if demands[key] is None:
                    start.append(key)
                elif str(key) in grants:
                    self.sweep.grants[key] = grants[str(key)]
                    start.append(key)
        return start

    def _widen(self, running: dict[StageKey, threading.Thread]) -> None:
        """What the ready stages left free goes to the running stages that still have
        episodes to dispatch, longest chain first, up to what their workers take."""
        sweep = self.sweep
        per_worker = sweep.cfg.cluster.episodes_per_worker
        for key in sorted(running, key=self.priority):
            left = sweep.dispatch_left.get(key, 0)
            held = sweep.grants.get(key)
            if left <= 0 or held is None:
                continue
            grown = self.capacity.grow(str(key), left, held.workers * per_worker)
            if grown is not None:
                sweep.grants[key] = grown

    def _done(self, key: StageKey) -> bool:
        end = self.ends.get(key)
        return end is not None and end.state in ("ran", "cached")

    def _run_one(self, key: StageKey, prefix: str, ended: queue.Queue[StageEnd]) -> None:
        sweep = self.sweep
        stage = sweep.graph.stages[key]
        started = time.perf_counter()
        try:
            sweep.ledger.describe(stage)
            sweep.started_at[key] = time.time()
            sweep.notify("stage_started", key, prefix)
            ran = stage.run(sweep, prefix)
            wall = time.perf_counter() - started
            if ran:  # its share of its models' serving GPU time (gpu_time.ServingClock)
                by_model = sweep.servers.stage_gpu_s(key)
                sweep.ledger.record_run(key, wall, sum(by_model.values()), by_model)
            sweep.notify("stage_finished", key, ran)
            ended.put(StageEnd(key, "ran" if ran else "cached", wall_s=wall))
        except BaseException as exc:  # noqa: BLE001 - reported by the scheduler
            log.debug("stage %s failed", key, exc_info=True)
            ended.put(StageEnd(key, "failed", _one_line(exc), exc, time.perf_counter() - started))

    def _ended(self, end: StageEnd, waiting: list[StageKey]) -> None:
        sweep = self.sweep
        self.ends[end.key] = end
        self.capacity.give_back(str(end.key))
        sweep.grants.pop(end.key, None)
        if end.state == "ran":
            sweep.stages_run += 1
        elif end.state == "cached":
            sweep.stages_cached += 1
        ended_now = [end.key]
        if end.state == "failed":
            sweep.say(f"stage {end.key} failed: {end.reason}")
            for reader in self._all_readers(end.key):
                if reader in waiting:
                    waiting.remove(reader)
                    self.ends[reader] = StageEnd(
                        reader, "not run", f"it reads {end.key}, which failed"
                    )
                    ended_now.append(reader)
        for key in ended_now:
            sweep.servers.stage_ended(key)

    def _all_readers(self, key: StageKey) -> list[StageKey]:
        seen: list[StageKey] = []
        todo = list(self._readers[key])
        while todo:
            k = todo.pop()
            if k not in seen:
                seen.append(k)
                todo.extend(self._readers[k])
        return sorted(seen, key=self.priority)

    def _raise_failures(self) -> None:
        failed = [e for e in self.ends.values() if e.state == "failed"]
        if not failed:
            return
        not_run = [e for e in self.ends.values() if e.state == "not run"]
        say = self.sweep.say
        say(f"{len(failed)} stage(s) failed, {len(not_run)} did not run; the others ended:")
        for end in sorted([*failed, *not_run], key=lambda e: (e.state, self.priority(e.key))):
            line = self.sweep.line(self.graph.stages[end.key])
            say(f"  {end.state + ':':8s} {end.key}  {line}: {end.reason}")
        first = min(failed, key=lambda e: self.priority(e.key))
        assert first.error is not None
        raise first.error


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


__all__ = ["Grant", "Stage", "StageEnd", "StageScheduler"]
