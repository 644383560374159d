"""Who gets which episode slots when several stages run at once.

A sweep has two kinds of episode capacity: its episode slots (`cluster.num_workers`
workers of `cluster.episodes_per_worker` episodes each: what the cluster's CPUs for
episode workers are sized to, shared by every stage that runs now) and each model's
request slots (`replicas x max_concurrency_per_server`, shared by the stages that play
that model). A stage that plays episodes starts with a `Grant`: a number of episode
slots and a share of every replica's request slots of its model, which it keeps until
it ends (its router then never sends a replica more than the stage's share, so the
stages of one model together never exceed what its servers take at once). Its episode
workers are sized to its slots: at least as many as hold its episodes at
`cluster.episodes_per_worker` each, and more (up to one per episode) only while the
sweep's `cluster.num_workers` worker processes are not all held. Each reserves its part
of a worker's CPUs. A stage of 8 episodes alone on 2 workers of 16 gets 2 workers of 4
(a quarter of a worker's CPUs each, both nodes); four such stages at once get one
worker of 8 each (half a worker's CPUs), four processes where two whole workers would
have run two stages. (It spread every grant over up to `num_workers` processes, so the
processes grew with the stages in flight: 42 stages, 156 processes, 18 GiB in the
rehearsal. Now a sweep has at most `num_workers` + its stages in flight.)

`grant` deals the free capacity out to the stages that are ready, in priority order,
one unit at a time round-robin (a unit: one more slot on every replica of the stage's
model, or one episode for a model without servers), so ready stages of different models
all start and every model with a ready stage gets its servers fed; a stage never gets
more than it can use (its missing episodes). A stage that gets nothing waits for a
stage to end. What is still free once the ready stages had their turn goes to the running
stages that still have episodes to dispatch (`Capacity.grow`, up to what their worker
processes run at once): when a stage ends, the stages of its model still running widen
to the slots it held instead of running their rest at the share they started with (the
last stages of a student ran alone at a fifth of its replicas' slots).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Demand:
    """What one ready stage could use at once."""

    stage: str  # its key, for the result
    episodes: int  # episodes it could have in flight (missing ones, or its wave)
    server: str | None  # its model's server key; None: no server (the oracle)
    replicas: int = 1  # its model's replicas (the slots of one unit)


@dataclass(frozen=True)
class Grant:
    """What a stage runs with: `episodes` in flight at most on `workers` episode
    workers, and `per_replica` request slots on each replica of its model (0 for a model
    without servers)."""

    episodes: int
    per_replica: int
    workers: int = 1

    @property
    def each(self) -> int:
        """The episodes each of its workers runs at once (shared evenly)."""
        return max(1, math.ceil(self.episodes / self.workers))


@dataclass(frozen=True)
class Free:
    """The capacity not held by a running stage."""

    episodes: int
    per_replica: dict[str, int]  # server key -> slots free on each of its replicas
    workers: int  # worker processes (of `cluster.num_workers`) no running stage holds


def grant(demands: list[Demand], free: Free, per_worker: int) -> dict[str, Grant]:
    """Deal `free` out to `demands` (in priority order): the grant of every stage that
    gets at least one unit. Round-robin, one unit per stage per pass, until nothing
    more fits. Then workers: each granted stage gets as many as hold its episodes at
    `per_worker` each, and the free worker processes left over are dealt one at a time
    (never more workers than episodes)."""
    per_replica = dict(free.per_replica)
    left = free.episodes
    episodes = {d.stage: 0 for d in demands}
    units = {d.stage: 0 for d in demands}
    progress = True
    while progress:
        progress = False
        for d in demands:
            wanted = d.episodes - episodes[d.stage]
            if wanted <= 0 or left <= 0:
                continue
            if d.server is None:  # no server: a unit is one more episode
                more = 1
            else:
                if per_replica.get(d.server, 0) < 1:
                    continue
                more = min(d.replicas, wanted)
                if more > left:
                    continue
                per_replica[d.server] -= 1
            left -= more
            episodes[d.stage] += more
            units[d.stage] += 1
            progress = True
    granted = [d.stage for d in demands if units[d.stage] > 0]
    workers = {s: max(1, math.ceil(episodes[s] / per_worker)) for s in granted}
    spare = free.workers - sum(workers.values())
    while spare > 0:
        wider = [s for s in granted if workers[s] < episodes[s]]
        for s in wider[:spare]:
            workers[s] += 1
        spare -= len(wider[:spare])
        if not wider:
            break
    server_of = {d.stage: d.server for d in demands}
    return {
        s: Grant(episodes[s], units[s] if server_of[s] is not None else 0, workers[s])
        for s in granted
    }


class Capacity:
    """The sweep's episode capacity and what running stages hold of it."""

    def __init__(self, episodes: int, workers: int, per_worker: int) -> None:
        self.episodes = episodes  # the sweep's episode slots
        self.workers = workers  # its worker processes (`cluster.num_workers`)
        self.per_worker = per_worker  # episodes a worker runs at once
        self.slots: dict[str, int] = {}  # server key -> slots per replica
        self.held: dict[str, tuple[str | None, Grant]] = {}  # stage -> (server, grant)
        self.replicas: dict[str, int] = {}  # stage -> its model's replicas (a unit's slots)
        # Taken by the scheduler, and by a stage's thread when its tail frees slots.
        self._lock = threading.Lock()

    def add_server(self, server: str, per_replica: int) -> None:
        self.slots.setdefault(server, per_replica)

    def free(self) -> Free:
        with self._lock:
            return self._free()

    def _free(self) -> Free:
        per_replica = dict(self.slots)
        episodes, workers = self.episodes, self.workers
        for server, held in self.held.values():
            episodes -= held.episodes
            workers -= held.workers
            if server is not None:
                per_replica[server] -= held.per_replica
        return Free(episodes, per_replica, max(0, workers))

    def take(self, demands: list[Demand]) -> dict[str, Grant]:
        """Grants for the ready stages `demands` out of what is free now (held until
        `give_back`)."""
        with self._lock:
            grants = grant(demands, self._free(), self.per_worker)
            by_stage = {d.stage: d for d in demands}
            for stage, g in grants.items():
                self.held[stage] = (by_stage[stage].server, g)
                self.replicas[stage] = by_stage[stage].replicas
        return grants

    def grow(self, stage: str, wanted: int, room: int) -> Grant | None:
        """A running stage with episodes still to dispatch takes more of what is free
        (after the ready stages had their turn): units as `grant` deals them, up to
        `wanted` more episodes in flight and `room` in all (what its worker processes,
        started for the first grant, can run at once). The grown grant, or None when
        nothing more was free. Its worker processes stay the ones it has."""
        with self._lock:
            if stage not in self.held or wanted <= 0:
                return None
            server, held = self.held[stage]
            free = self._free()
            replicas = self.replicas.get(stage, 1)
            slots = free.per_replica.get(server, 0) if server is not None else 0
            episodes, units = held.episodes, held.per_replica
            left, more_wanted = free.episodes, min(wanted, room - held.episodes)
            while more_wanted > 0 and left > 0:
                if server is None:
                    step = 1
                else:
                    step = min(replicas, more_wanted)
                    if slots < 1 or step > left:
                        break
                    slots -= 1
                    units += 1
                episodes += step
                left -= step
                more_wanted -= step
            if episodes == held.episodes:
                return None
            grown = Grant(episodes, units if server is not None else 0, held.workers)
            self.held[stage] = (server, grown)
            return grown

    def shrink(self, stage: str, in_flight: int) -> None:
        """A stage with nothing left to dispatch keeps only what it has in flight: the
        rest of its grant goes to the stages waiting (its tail no longer holds slots it
        cannot use). Its share of each replica becomes at most its in-flight episodes
        (all of them could be on one replica), never more than it was; a lost worker's
        episodes dispatched again only replace those in flight. Its worker processes
        stay held: they live until it ends."""
        with self._lock:
            if stage not in self.held:
                return
            server, held = self.held[stage]
            if in_flight >= held.episodes:
                return
            per_replica = min(held.per_replica, in_flight) if server is not None else 0
            self.held[stage] = (server, Grant(in_flight, per_replica, held.workers))

    def give_back(self, stage: str) -> None:
        with self._lock:
            self.held.pop(stage, None)
            self.replicas.pop(stage, None)
