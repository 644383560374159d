"""Routing of episodes over a model's server replicas, inside one episode worker.

`sticky_least_loaded` (the default): an episode's first request goes to the replica
with the lowest load (active episodes per slot, then requests pending per slot, then
the lowest index) and later requests of the episode stay there, so its growing prompt
prefix stays in that server's cache. Pure stickiness piles long episodes onto a few
replicas, so an episode is re-placed when its replica's queue exceeds its slots by
more than `reroute_margin` of them while another replica has a free slot, and when its
replica is gone. `round_robin` (every request to the next replica) and
`consistent_hash` (an episode's id on a hash ring) are there to be compared against.

Each replica has a number of *slots* here, this worker's share of the replica's
concurrency cap (see `worker_slots`): the shares of all workers add up to the cap, so
the cap holds across the cluster without a central router on every request.

A replica whose request failed with an infrastructure error is avoided until the pool
reports it restarted (a new generation) or the suspicion expires; the request itself
is retried at once on another replica, so an episode in flight on a dead server
continues elsewhere instead of failing. A request waiting on a replica that the pool's
health check takes down (a hung engine answers nothing, so the request would wait out
its whole `request_timeout_s`) is abandoned as soon as the pool says so, and retried
on another replica the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from bisect import bisect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

from distillery.workers.llm.client import ChatClient
from distillery.workers.llm.config import ModelConfig, Routing
from distillery.workers.llm.types import ChatResult, InfraError

HASH_RING_POINTS = 64  # virtual nodes per replica on the consistent-hash ring


def worker_slots(cap: int, replicas: int, worker: int, workers: int) -> list[int]:
    """Worker `worker`'s share of each replica's `cap` concurrent requests.

    The cap x replicas global slots, replica by replica, are dealt out round-robin over
    the workers: shares differ by at most one, every worker gets a slot when there are
    at least as many slots as workers, and when cap >= workers every worker has a slot
    on every replica (so it can fail over to any of them)."""
    if not 0 <= worker < workers:
        raise ValueError(f"worker {worker} out of range for {workers} workers")
    shares = [0] * replicas
    for replica in range(replicas):
        for rank in range(cap):
            if (replica * cap + rank) % workers == worker:
                shares[replica] += 1
    return shares


@dataclass
class Replica:
    url: str | None  # None: not (yet) serving
    slots: int
    healthy: bool = True
    generation: int = 0  # bumped by the pool at every restart
    episodes: int = 0  # episodes pinned here
    pending: int = 0  # requests in flight or waiting for a slot
    suspect_until: float = 0.0  # monotonic time; failed here recently

    def usable(self, now: float) -> bool:
        """Serving, with slots for this worker, and not suspected at `now` (0: ignore)."""
        if not (self.healthy and self.url is not None and self.slots > 0):
            return False
        return not now or now >= self.suspect_until


class Router:
    def __init__(
        self,
        endpoints: list[str],
        slots: list[int] | None = None,
        policy: Routing = "sticky_least_loaded",
        reroute_margin: float = 0.5,
        suspect_s: float = 30.0,
    ) -> None:
        if not endpoints:
            raise ValueError("a router needs at least one endpoint")
        slots = slots or [1_000_000] * len(endpoints)
        if len(slots) != len(endpoints):
            raise ValueError("one slot count per endpoint")
        self.replicas = [Replica(url, n) for url, n in zip(endpoints, slots, strict=True)]
        self.policy = policy
        self.reroute_margin = reroute_margin
        self.suspect_s = suspect_s
        self._pinned: dict[str, int] = {}
        self._next = 0  # round robin
        self._ring: list[tuple[int, int]] = sorted(
            (_hash(f"{i}:{p}"), i) for i in range(len(endpoints)) for p in range(HASH_RING_POINTS)
        )
        self.episodes_replaced = 0  # moved off a replica that was gone or overloaded

    @property
    def endpoints(self) -> list[str | None]:
        return [r.url for r in self.replicas]

    # -- placement -----------------------------------------------------------------

    def place(self, episode_id: str, avoid: frozenset[int] = frozenset()) -> int:
        """The replica index for the episode's next request."""
        now = time.monotonic()
        usable = [i for i, r in enumerate(self.replicas) if r.usable(now) and i not in avoid]
        if not usable:  # suspicion only steers away from a replica while others can serve
            usable = [i for i, r in enumerate(self.replicas) if r.usable(0.0) and i not in avoid]
        if not usable:
            raise InfraError("no server replica is available (all down, restarting or failed)")
        if self.policy == "round_robin":
            index = min(usable, key=lambda i: (i - self._next) % len(self.replicas))
            self._next = index + 1
            return self._pin(episode_id, index)
        if self.policy == "consistent_hash":
            return self._pin(episode_id, self._on_ring(episode_id, set(usable)))
        pinned = self._pinned.get(episode_id)
        if pinned is not None and pinned in usable and not self._overloaded(pinned, usable):
            return pinned
        index = min(usable, key=self._load)
        if pinned is not None and index != pinned:
            self.episodes_replaced += 1
        return self._pin(episode_id, index)

    def endpoint_for(self, episode_id: str) -> str:
        return self.replicas[self.place(episode_id)].url or ""

    def _load(self, i: int) -> tuple[float, float, int]:
        r = self.replicas[i]
        return (r.episodes / r.slots, r.pending / r.slots, i)

    def _overloaded(self, i: int, usable: list[int]) -> bool:
        r = self.replicas[i]
        if r.pending < r.slots * (1 + self.reroute_margin):
            return False
        return any(self.replicas[j].pending < self.replicas[j].slots for j in usable if j != i)

    def _on_ring(self, episode_id: str, usable: set[int]) -> int:
        start = bisect(self._ring, (_hash(episode_id), -1))
        for k in range(len(self._ring)):
            _, index = self._ring[(start + k) % len(self._ring)]
            if index in usable:
                return index
        raise InfraError("no server replica is available")

    def _pin(self, episode_id: str, index: int) -> int:
        previous = self._pinned.get(episode_id)
        if previous != index:
            if previous is not None:
                self.replicas[previous].episodes -= 1
            self._pinned[episode_id] = index
            self.replicas[index].episodes += 1
        return index

    def end_episode(self, episode_id: str) -> None:
        index = self._pinned.pop(episode_id, None)
        if index is not None:
            self.replicas[index].episodes -= 1

    # -- health ----------------------------------------------------------------------

    def suspect(self, index: int) -> None:
        """A request failed here: avoid it until the pool restarts it or a while passes."""
        self.replicas[index].suspect_until = time.monotonic() + self.suspect_s

    def mark_unhealthy(self, endpoint: str) -> None:
        self.replicas[self.endpoints.index(endpoint)].healthy = False

    def mark_healthy(self, endpoint: str) -> None:
        self.replicas[self.endpoints.index(endpoint)].healthy = True

    def update(self, snapshot: list[dict[str, Any]]) -> None:
        """Adopt the pool's view: {"url", "healthy", "generation"} per replica."""
        for replica, state in zip(self.replicas, snapshot, strict=True):
            if state["generation"] != replica.generation:
                replica.suspect_until = 0.0  # a fresh server
            replica.url = state["url"]
            replica.healthy = bool(state["healthy"])
            replica.generation = state["generation"]

    @asynccontextmanager
    async def pending(self, index: int) -> AsyncIterator[None]:
        self.replicas[index].pending += 1
        try:
            yield
        finally:
            self.replicas[index].pending -= 1

    def load(self) -> list[tuple[str | None, int, int]]:
        """(endpoint, active episodes, requests pending) per replica."""
        return [(r.url, r.episodes, r.pending) for r in self.replicas]


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class RoutedChat:
    """Chat for many concurrent episodes over one model's replicas.

    Each replica gets at most its slots (this worker's share of the replica's cap) of
    requests at once from this process; extra requests wait their turn here instead of
    piling onto the server. `directory` (a pool's ReplicaDirectory actor) is polled for
    restarts and failures the pool has seen.
    """

    REFRESH_S = 1.0

    def __init__(
        self,
        clients: dict[str, ChatClient],
        max_concurrency_per_server: int,
        *,
        slots: list[int] | None = None,
        policy: Routing = "sticky_least_loaded",
        reroute_margin: float = 0.5,
        suspect_s: float = 30.0,
        directory: Any = None,
        make_client: Any = None,
    ) -> None:
        urls = list(clients)
        slots = slots or [max_concurrency_per_server] * len(urls)
        self.router = Router(urls, slots, policy, reroute_margin, suspect_s)
        self._clients = clients
        self._make_client = make_client
        self._slots = [asyncio.Semaphore(n) for n in slots]
        self._share = (0, 1)  # (this worker, of how many): its part of a widened cap
        self._directory = directory
        self._refreshed = 0.0
        self._refreshing: asyncio.Task | None = None
        self.requests_rerouted = 0

    @classmethod
    def from_config(
        cls,
        cfg: ModelConfig,
        endpoints: list[str],
        directory: Any = None,
        share: tuple[int, int] = (0, 1),
    ) -> RoutedChat:
        clients = {url: ChatClient.from_config(cfg, url) for url in endpoints}
        slots = worker_slots(cfg.max_concurrency_per_server, len(endpoints), *share)
        routed = cls(
            clients,
            cfg.max_concurrency_per_server,
            slots=slots,
            policy=cfg.routing,
            reroute_margin=cfg.reroute_margin,
            suspect_s=cfg.health_interval_s * cfg.health_failures + cfg.health_timeout_s,
            directory=directory,
            make_client=lambda url: ChatClient.from_config(cfg, url),
        )
        routed._share = share
        return routed

    def widen(self, cap: int) -> None:
        """Each replica's cap grew to `cap` concurrent requests (its stage was granted
        more): this worker's share of it, never less than it has. Requests waiting for a
        slot take the new ones at once."""
        wider = worker_slots(cap, len(self.router.replicas), *self._share)
        for i, n in enumerate(wider):
            replica = self.router.replicas[i]
            for _ in range(n - replica.slots):
                self._slots[i].release()
            replica.slots = max(replica.slots, n)

    async def chat(
        self, episode_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> ChatResult:
        self._maybe_refresh()
        tried: set[int] = set()
        while True:
            index = self.router.place(episode_id, frozenset(tried))
            url = self.router.replicas[index].url or ""
            try:
                async with self.router.pending(index), self._slots[index]:
                    return await self._while_up(
                        index, url, self._client(url).chat(messages, **kwargs)
                    )
            except InfraError:
                # This replica failed (or its server went away while we waited): the
                # same request, which carries the whole conversation, goes elsewhere.
                self.router.suspect(index)
                tried.add(index)
                await self.refresh()
                if not self._any_usable(tried):
                    raise
                self.requests_rerouted += 1

    async def count_tokens(self, episode_id: str, messages: list[dict[str, Any]]) -> int | None:
        """The conversation's tokens as the episode's replica counts them (see
        `ChatClient.count_tokens`); the same replica its requests go to."""
        index = self.router.place(episode_id)
        url = self.router.replicas[index].url or ""
        return await self._client(url).count_tokens(messages)

    async def _while_up(self, index: int, url: str, request: Any) -> ChatResult:
        """The request's reply, unless the pool takes its replica down (or replaces it)
        first: then InfraError, and the caller retries elsewhere."""
        if self._directory is None:
            return cast(ChatResult, await request)
        replica = self.router.replicas[index]
        if not replica.healthy or replica.url != url:  # went down while we waited for a slot
            request.close()
            raise InfraError(f"replica {url} was taken down by its health check")
        task = asyncio.ensure_future(request)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.REFRESH_S)
                if done:
                    return task.result()
                self._maybe_refresh()  # one directory call a second per worker, shared
                replica = self.router.replicas[index]
                if not replica.healthy or replica.url != url:
                    raise InfraError(
                        f"replica {url} was taken down by its health check while this "
                        "request waited on it"
                    )
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    def _any_usable(self, tried: set[int]) -> bool:
        now = time.monotonic()
        return any(r.usable(now) for i, r in enumerate(self.router.replicas) if i not in tried)

    def _client(self, url: str) -> ChatClient:
        client = self._clients.get(url)
        if client is None:
            if self._make_client is None:
                raise InfraError(f"no client for {url}")
            client = self._clients[url] = self._make_client(url)
        return client

    def _maybe_refresh(self) -> None:
        if self._directory is None or time.monotonic() - self._refreshed < self.REFRESH_S:
            return
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self.refresh())

    async def refresh(self) -> None:
        """Adopt the pool's current view of the replicas (restarts, failures)."""
        if self._directory is None:
            return
        self._refreshed = time.monotonic()
        try:
            snapshot = await self._directory.snapshot.remote()
        except Exception:  # the directory went with the pool: keep the last view
            return
        self.router.update(snapshot)

    def end_episode(self, episode_id: str) -> None:
        self.router.end_episode(episode_id)

    def stats(self) -> dict[str, int]:
        return {
            "requests_rerouted": self.requests_rerouted,
            "episodes_replaced": self.router.episodes_replaced,
        }

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
