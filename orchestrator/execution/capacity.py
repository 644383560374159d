"""Who gets which episode slots when several stages run at once.

A sweep has two kinds of episode capacity: its episode slots (`cluster.num_workers`
workers of `cluster.episodes_per_worker` episodes each: what the cluster's CPUs for
episode workers are sized to, shared by every stage that runs now) and each model's
request slots (`replicas x max_concurrency_per_server`, shared by the stages that play
that model). A stage that plays episodes starts with a `Grant`: a number of episode
slots and a share of every replica's request slots of its model, which it keeps until
it ends (its router then never sends a replica more than the stage's share, so the
stages of one model together never exceed what its servers take at once). Its episode
workers are sized to its slots (`Grant.workers`): a stage of 8 episodes on 2 workers of
16 gets 2 workers of 4, each reserving a quarter of a worker's CPUs, so four such
stages run where two whole workers would have run two.

`grant` deals the free capacity out to the stages that are ready, in priority order,
one unit at a time round-robin (a unit: one more slot on every replica of the stage's
model, or one episode for a model without servers), so ready stages of different models
all start and every model with a ready stage gets its servers fed; a stage never gets
more than it can use (its missing episodes). A stage that gets nothing waits for a
stage to end.
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
    """What a stage runs with: `episodes` in flight at most and `per_replica` request
    slots on each replica of its model (0 for a model without servers)."""

    episodes: int
    per_replica: int

    def workers(self, num_workers: int, episodes_per_worker: int) -> tuple[int, int]:
        """Its episode workers and the episodes each runs at once: spread over as many
        workers as the sweep has (never more than its episodes, never fewer than hold
        them), sharing them evenly. Each reserves its part of a worker's CPUs, so the
        reservations of all running stages add up to at most the sweep's workers'."""
        least = math.ceil(self.episodes / episodes_per_worker)
        workers = max(1, least, min(num_workers, self.episodes))
        return workers, max(1, math.ceil(self.episodes / workers))


@dataclass(frozen=True)
class Free:
    """The capacity not held by a running stage."""

    episodes: int
    per_replica: dict[str, int]  # server key -> slots free on each of its replicas


def grant(demands: list[Demand], free: Free) -> dict[str, Grant]:
    """Deal `free` out to `demands` (in priority order): the grant of every stage that
    gets at least one unit. Round-robin, one unit per stage per pass, until nothing
    more fits."""
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
    return {
        d.stage: Grant(episodes[d.stage], units[d.stage] if d.server is not None else 0)
        for d in demands
        if units[d.stage] > 0
    }


class Capacity:
    """The sweep's episode capacity and what running stages hold of it."""

    def __init__(self, episodes: int) -> None:
        self.episodes = episodes
        self.slots: dict[str, int] = {}  # server key -> slots per replica
        self.held: dict[str, tuple[str | None, Grant]] = {}  # stage -> (server, grant)
        # Taken by the scheduler, and by a stage's thread when its tail frees slots.
        self._lock = threading.Lock()

    def add_server(self, server: str, per_replica: int) -> None:
        self.slots.setdefault(server, per_replica)

    def free(self) -> Free:
        with self._lock:
            return self._free()

    def _free(self) -> Free:
        per_replica = dict(self.slots)
        episodes = self.episodes
        for server, held in self.held.values():
            episodes -= held.episodes
            if server is not None:
                per_replica[server] -= held.per_replica
        return Free(episodes, per_replica)

    def take(self, demands: list[Demand]) -> dict[str, Grant]:
        """Grants for the ready stages `demands` out of what is free now (held until
        `give_back`)."""
        with self._lock:
            grants = grant(demands, self._free())
            server_of = {d.stage: d.server for d in demands}
            for stage, g in grants.items():
                self.held[stage] = (server_of[stage], g)
        return grants

    def shrink(self, stage: str, in_flight: int) -> None:
        """A stage with nothing left to dispatch keeps only what it has in flight: the
        rest of its grant goes to the stages waiting (its tail no longer holds slots it
        cannot use). Its share of each replica becomes at most its in-flight episodes
        (all of them could be on one replica), never more than it was; a lost worker's
        episodes dispatched again only replace those in flight."""
        with self._lock:
            if stage not in self.held:
                return
            server, held = self.held[stage]
            if in_flight >= held.episodes:
                return
            per_replica = min(held.per_replica, in_flight) if server is not None else 0
            self.held[stage] = (server, Grant(in_flight, per_replica))

    def give_back(self, stage: str) -> None:
        with self._lock:
            self.held.pop(stage, None)
