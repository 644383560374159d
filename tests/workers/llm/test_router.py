import asyncio

import pytest

from distillery.workers.llm.router import Router
from distillery.workers.llm.types import InfraError

URLS = ["http://a/v1", "http://b/v1", "http://c/v1"]


def test_new_episodes_go_to_the_least_loaded_replica():
    router = Router(URLS)
    placed = [router.endpoint_for(f"ep{i}") for i in range(6)]
    assert placed == URLS + URLS
    router.end_episode("ep1")  # b now has one episode fewer
    assert router.endpoint_for("new") == "http://b/v1"


def test_episodes_are_sticky():
    router = Router(URLS)
    first = router.endpoint_for("ep")
    for i in range(5):
        router.endpoint_for(f"other{i}")
        assert router.endpoint_for("ep") == first


def test_in_flight_requests_break_ties():
    router = Router(URLS[:2])

    async def go():
        index = router.place("busy")
        async with router.pending(index):
            router.end_episode("busy")  # equal episode counts, a has one request in flight
            assert index == 0
            assert router.endpoint_for("next") == URLS[1]

    asyncio.run(go())


def test_unhealthy_replica_loses_its_episodes():
    router = Router(URLS[:2])
    assert router.endpoint_for("ep") == URLS[0]
    router.mark_unhealthy(URLS[0])
    assert router.endpoint_for("ep") == URLS[1]
    assert [load[1] for load in router.load()] == [0, 1]
    router.mark_unhealthy(URLS[1])
    with pytest.raises(InfraError):
        router.endpoint_for("ep2")


def test_many_concurrent_episodes_stay_balanced():
    router = Router(URLS)

    async def episode(i):
        for _ in range(3):
            async with router.pending(router.place(f"ep{i}")):
                await asyncio.sleep(0)
        return router.endpoint_for(f"ep{i}")

    async def go():
        return await asyncio.gather(*(episode(i) for i in range(30)))

    placed = asyncio.run(go())
    assert sorted(placed.count(u) for u in URLS) == [10, 10, 10]
    assert all(inflight == 0 for _, _, inflight in router.load())


# -- slots, re-placement, policies, fail-over ------------------------------------------

from distillery.workers.llm.router import RoutedChat, worker_slots  # noqa: E402
from distillery.workers.llm.types import ChatResult  # noqa: E402


def test_worker_shares_add_up_to_each_replicas_cap():
    for cap, replicas, workers in [(8, 3, 2), (2, 2, 4), (1, 4, 4), (5, 1, 3), (3, 3, 7)]:
        shares = [worker_slots(cap, replicas, w, workers) for w in range(workers)]
        assert [sum(col) for col in zip(*shares, strict=True)] == [cap] * replicas
        totals = [sum(s) for s in shares]
        assert max(totals) - min(totals) <= 1
        if cap * replicas >= workers:
            assert min(totals) >= 1
        if cap >= workers:  # every worker can fail over to every replica
            assert all(min(s) >= 1 for s in shares)


def test_a_replica_without_slots_for_this_worker_gets_none_of_its_episodes():
    router = Router(URLS[:2], slots=[0, 3])
    assert {router.endpoint_for(f"ep{i}") for i in range(5)} == {URLS[1]}


def test_sticky_episode_moves_when_its_replica_is_overloaded_beyond_the_margin():
    router = Router(URLS[:2], slots=[2, 2], reroute_margin=0.5)
    assert router.endpoint_for("long") == URLS[0]
    # three requests pending on a (cap 2): 1.5x its slots is reached, b is idle
    router.replicas[0].pending = 2
    assert router.endpoint_for("long") == URLS[0]  # within the margin: stays
    router.replicas[0].pending = 3
    assert router.endpoint_for("long") == URLS[1]
    assert router.episodes_replaced == 1
    assert [r.episodes for r in router.replicas] == [0, 1]
    # overloaded but nowhere has a free slot: stays put
    router.replicas[1].pending = 3
    router.replicas[0].pending = 2
    assert router.endpoint_for("long") == URLS[1]


def test_round_robin_and_consistent_hash():
    rr = Router(URLS, policy="round_robin")
    assert [rr.endpoint_for("same") for _ in range(4)] == URLS + URLS[:1]
    ring = Router(URLS, policy="consistent_hash")
    placed = {f"ep{i}": ring.endpoint_for(f"ep{i}") for i in range(60)}
    assert all(ring.endpoint_for(e) == u for e, u in placed.items())  # sticky by hash
    assert len(set(placed.values())) == 3
    ring.mark_unhealthy(URLS[0])
    moved = {e: ring.endpoint_for(e) for e in placed}
    # only the episodes of the lost replica move
    assert all(moved[e] == u for e, u in placed.items() if u != URLS[0])
    assert URLS[0] not in moved.values()


def test_directory_snapshot_replaces_a_restarted_replica():
    router = Router(URLS[:2])
    router.suspect(0)
    assert router.endpoint_for("ep") == URLS[1]
    router.update(
        [
            {"url": "http://a2/v1", "healthy": True, "generation": 1},
            {"url": URLS[1], "healthy": False, "generation": 0},
        ]
    )
    assert router.endpoint_for("ep") == "http://a2/v1"  # fresh generation: usable again


class FakeClient:
    def __init__(self, url, fail=False):
        self.url, self.fail, self.calls, self.active, self.peak = url, fail, 0, 0, 0

    async def chat(self, messages, **kwargs):
        self.calls += 1
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            await asyncio.sleep(0.01)
            if self.fail:
                raise InfraError(f"{self.url} refused the connection")
            return ChatResult(text="ok", endpoint=self.url)
        finally:
            self.active -= 1

    async def aclose(self):
        pass


def test_a_request_on_a_dead_replica_is_retried_on_another_at_once():
    clients = {URLS[0]: FakeClient(URLS[0], fail=True), URLS[1]: FakeClient(URLS[1])}
    chat = RoutedChat(clients, 4)

    async def go():
        return [await chat.chat(f"ep{i}", [{"role": "user", "content": "x"}]) for i in range(4)]

    results = asyncio.run(go())
    assert {r.endpoint for r in results} == {URLS[1]}
    assert clients[URLS[0]].calls == 1  # suspected after one failure, then avoided
    assert chat.stats()["requests_rerouted"] == 1


def test_when_every_replica_fails_the_infra_error_reaches_the_episode():
    clients = {u: FakeClient(u, fail=True) for u in URLS[:2]}
    chat = RoutedChat(clients, 4)
    with pytest.raises(InfraError):
        asyncio.run(chat.chat("ep", [{"role": "user", "content": "x"}]))
    assert [c.calls for c in clients.values()] == [1, 1]


def test_per_replica_slots_are_never_exceeded():
    clients = {u: FakeClient(u) for u in URLS}
    chat = RoutedChat(clients, 8, slots=[2, 1, 3])

    async def episode(i):
        for _ in range(3):
            await chat.chat(f"ep{i}", [{"role": "user", "content": "x"}])
        chat.end_episode(f"ep{i}")

    async def go():
        await asyncio.gather(*(episode(i) for i in range(24)))

    asyncio.run(go())
    assert [c.peak for c in clients.values()] == [2, 1, 3]
    assert sum(c.calls for c in clients.values()) == 72


def test_a_lone_suspected_replica_still_serves():
    router = Router(URLS[:1])
    router.suspect(0)
    assert router.endpoint_for("ep") == URLS[0]
