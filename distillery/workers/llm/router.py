"""Sticky, least-loaded routing of episodes over server replicas.

An episode's first request goes to the replica with the fewest active episodes (ties:
fewest requests in flight, then the lowest index); every later request of the episode
goes to the same replica, so its growing prompt prefix stays in that server's cache.
A replica marked unhealthy gets no new episodes, and episodes pinned to it move at
their next request.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from distillery.workers.llm.client import ChatClient
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult, InfraError


class Router:
    def __init__(self, endpoints: list[str]) -> None:
        if not endpoints:
            raise ValueError("a router needs at least one endpoint")
        self.endpoints = list(endpoints)
        self._episodes = [0] * len(endpoints)  # active episodes per replica
        self._in_flight = [0] * len(endpoints)
        self._healthy = [True] * len(endpoints)
        self._pinned: dict[str, int] = {}

    def endpoint_for(self, episode_id: str) -> str:
        index = self._pinned.get(episode_id)
        if index is not None and self._healthy[index]:
            return self.endpoints[index]
        if index is not None:  # pinned to a replica that went down: move
            self._episodes[index] -= 1
        candidates = [i for i, ok in enumerate(self._healthy) if ok]
        if not candidates:
            raise InfraError("every server replica is marked unhealthy")
        index = min(candidates, key=lambda i: (self._episodes[i], self._in_flight[i], i))
        self._pinned[episode_id] = index
        self._episodes[index] += 1
        return self.endpoints[index]

    def end_episode(self, episode_id: str) -> None:
        index = self._pinned.pop(episode_id, None)
        if index is not None:
            self._episodes[index] -= 1

    def mark_unhealthy(self, endpoint: str) -> None:
        self._healthy[self.endpoints.index(endpoint)] = False

    def mark_healthy(self, endpoint: str) -> None:
        self._healthy[self.endpoints.index(endpoint)] = True

    @asynccontextmanager
    async def request(self, episode_id: str) -> AsyncIterator[str]:
        endpoint = self.endpoint_for(episode_id)
        index = self.endpoints.index(endpoint)
        self._in_flight[index] += 1
        try:
            yield endpoint
        finally:
            self._in_flight[index] -= 1

    def load(self) -> list[tuple[str, int, int]]:
        """(endpoint, active episodes, requests in flight) per replica."""
        return list(zip(self.endpoints, self._episodes, self._in_flight, strict=True))


class RoutedChat:
    """Chat for many concurrent episodes over one model's replicas.

    Each replica gets at most `max_concurrency_per_server` requests at once from this
    process; extra requests wait their turn here instead of piling onto the server.
    """

    def __init__(self, clients: dict[str, ChatClient], max_concurrency_per_server: int) -> None:
        self.router = Router(list(clients))
        self._clients = clients
        self._slots = {url: asyncio.Semaphore(max_concurrency_per_server) for url in clients}

    @classmethod
    def from_config(cls, cfg: ModelConfig, endpoints: list[str]) -> RoutedChat:
        clients = {url: ChatClient.from_config(cfg, url) for url in endpoints}
        return cls(clients, cfg.max_concurrency_per_server)

    async def chat(
        self, episode_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> ChatResult:
        async with self.router.request(episode_id) as endpoint, self._slots[endpoint]:
            return await self._clients[endpoint].chat(messages, **kwargs)

    def end_episode(self, episode_id: str) -> None:
        self.router.end_episode(episode_id)

    async def aclose(self) -> None:
        for client in self._clients.values():
            await client.aclose()
