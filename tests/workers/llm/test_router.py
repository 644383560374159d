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
        async with router.request("busy") as endpoint:
            router.end_episode("busy")  # equal episode counts, a has one request in flight
            assert endpoint == URLS[0]
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
            async with router.request(f"ep{i}"):
                await asyncio.sleep(0)
        return router.endpoint_for(f"ep{i}")

    async def go():
        return await asyncio.gather(*(episode(i) for i in range(30)))

    placed = asyncio.run(go())
    assert sorted(placed.count(u) for u in URLS) == [10, 10, 10]
    assert all(inflight == 0 for _, _, inflight in router.load())
