"""Replica pools on a real (private, local) Ray with real server subprocesses: the
scripted OpenAI-compatible server launched through backend=command, the same pool
path as llama.cpp and vLLM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time

import httpx
import pytest

from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.pool import ModelServerPool, placement_bundles, start_pool
from distillery.workers.llm.servers import vllm_command
from tests.support import REPO_ROOT


def scripted_model(**overrides) -> ModelConfig:
    fields = dict(
        name="scripted",
        backend="command",
        model="stub",
        command=(
            sys.executable,
            "-m",
            "distillery.testing.scripted_server",
            "--script",
            "distillery.testing.scripts:always_text",
            "--port",
            "{port}",
        ),
        command_cwd=str(REPO_ROOT),
        server_num_cpus=0.5,
        replicas=2,
        startup_timeout_s=60,
        health_interval_s=0.3,
        health_timeout_s=3,
        health_failures=2,
        restart_backoff_s=0.1,
        max_retries=0,
        retry_backoff_s=0.01,
    )
    return ModelConfig(**{**fields, **overrides})


def test_vllm_replica_bundles_and_launch_line_come_from_the_model_config():
    cfg = ModelConfig(
        name="q",
        backend="vllm",
        model="Qwen/Qwen3-8B",
        gpus_per_server=2,
        tensor_parallel_size=2,
        max_num_seqs=48,
        gpu_memory_utilization=0.8,
        max_model_len=32768,
        enable_prefix_caching=True,
    )
    assert placement_bundles(cfg) == [{"CPU": 1.0, "GPU": 1.0}, {"GPU": 1.0}]
    line = " ".join(vllm_command(cfg, "10.0.0.2", 8000))
    assert "--max-num-seqs 48" in line and "--gpu-memory-utilization 0.8" in line
    assert "--max-model-len 32768" in line and "--enable-prefix-caching" in line
    # without max_num_seqs the server batch is the router's cap per replica
    default = vllm_command(cfg.model_copy(update={"max_num_seqs": None}), "h", 1)
    assert default[default.index("--max-num-seqs") + 1] == str(cfg.max_concurrency_per_server)
    assert placement_bundles(scripted_model()) == [{"CPU": 0.5}]


def test_command_backend_needs_a_port_placeholder():
    with pytest.raises(ValueError, match="{port}"):
        ModelConfig(name="x", backend="command", model="m", command=("serve", "--port", "8000"))


@pytest.fixture(scope="module")
def ray_cpus():
    import ray

    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def wait_for(predicate, timeout_s: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/models", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


@pytest.mark.slow
def test_pool_places_each_replica_in_its_own_group_and_stops_them(ray_cpus, tmp_path):
    from ray.util import placement_group_table

    pool = start_pool(scripted_model(), tmp_path)
    try:
        urls = pool.endpoints
        assert len(set(urls)) == 2 and all(answers(u) for u in urls)
        groups = [placement_group_table(r.group) for r in pool.replicas]
        assert [g["strategy"] for g in groups] == ["STRICT_PACK"] * 2
        assert len({g["placement_group_id"] for g in groups}) == 2
        import ray

        snapshot = ray.get(pool.directory.snapshot.remote())
        assert [s["url"] for s in snapshot] == urls and all(s["healthy"] for s in snapshot)
    finally:
        pool.shutdown()
    assert not any(answers(u) for u in urls)
    assert all(placement_group_table(r.group)["state"] == "REMOVED" for r in pool.replicas)


@pytest.mark.slow
def test_a_dead_replica_leaves_routing_and_is_restarted(ray_cpus, tmp_path):
    import ray

    events = []
    pool = start_pool(scripted_model(), tmp_path, events.append)
    try:
        first = pool.endpoints
        ray.kill(pool.replicas[0].actor)
        # The restart is told (its event) just after the replica is back in routing.
        restarted = ["down", "restarted"]
        wait_for(lambda: [e.kind for e in events] == restarted, 120, what="the restart events")
        assert pool.replicas[0].generation == 1
        assert pool.endpoints[0] != first[0] and answers(pool.endpoints[0])
        assert pool.endpoints[1] == first[1]
        snapshot = ray.get(pool.directory.snapshot.remote())
        assert snapshot[0] == {"url": pool.endpoints[0], "healthy": True, "generation": 1}
        assert pool.stats() == {"replica_restarts": 1, "replica_failures": 1, "replicas_lost": 0}
    finally:
        pool.shutdown()


@pytest.mark.slow
def test_a_replica_that_stops_answering_is_replaced(ray_cpus, tmp_path):
    import ray

    pool = start_pool(scripted_model(replicas=1), tmp_path)
    pid = ray.get(pool.replicas[0].actor.server_pid.remote())
    try:
        os.kill(pid, signal.SIGSTOP)  # alive, but answers nothing
        # (the stopped server gets 20 s to honour SIGTERM before SIGKILL)
        wait_for(lambda: pool.replicas[0].generation == 1, 120, what="the restart")
        assert "fails its health check" in pool.events[0].detail
        assert answers(pool.endpoints[0])
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)  # the pool stopped it already
        pool.shutdown()


@pytest.mark.slow
def test_after_max_restarts_a_replica_stays_out_of_routing(ray_cpus, tmp_path):
    import ray

    pool = start_pool(scripted_model(replicas=1, max_restarts=0), tmp_path)
    try:
        ray.kill(pool.replicas[0].actor)
        wait_for(lambda: pool.replicas[0].state == "failed", what="giving up")
        assert ray.get(pool.directory.snapshot.remote())[0]["healthy"] is False
        assert pool.stats()["replicas_lost"] == 1
    finally:
        pool.shutdown()


@pytest.mark.slow
def test_a_replica_that_cannot_start_stops_the_run_with_its_log(ray_cpus, tmp_path):
    cfg = scripted_model(
        command=(sys.executable, "-c", "print('model not found'); raise SystemExit(2)", "{port}")
    )
    with pytest.raises(Exception, match="model not found"):
        start_pool(cfg, tmp_path)


@pytest.mark.slow
def test_a_pool_the_cluster_cannot_hold_fails_clearly(ray_cpus, tmp_path):
    cfg = scripted_model(server_num_cpus=64, startup_timeout_s=2)
    with pytest.raises(RuntimeError, match="lacks the resources"):
        ModelServerPool(cfg, tmp_path).start()


@pytest.mark.slow
def test_requests_in_flight_on_a_killed_replica_finish_elsewhere(ray_cpus, tmp_path):
    """The router of an episode worker and the pool together: requests keep being
    answered while one replica is killed and restarted, then reach the new one."""
    import ray

    from distillery.workers.llm.router import RoutedChat

    cfg = scripted_model(max_concurrency_per_server=4)
    pool = start_pool(cfg, tmp_path)
    try:
        chat = RoutedChat.from_config(cfg, pool.endpoints, pool.directory)

        async def episode(i: int) -> list[str]:
            seen = []
            for _ in range(10):
                result = await chat.chat(f"ep{i}", [{"role": "user", "content": "hi"}])
                seen.append(result.endpoint)
                await asyncio.sleep(0.05)
            chat.end_episode(f"ep{i}")
            return seen

        async def go() -> tuple[list[list[str]], set[str]]:
            runs = asyncio.gather(*(episode(i) for i in range(6)))
            await asyncio.sleep(0.2)
            ray.kill(pool.replicas[0].actor)
            seen = await runs
            deadline = time.monotonic() + 30
            while pool.replicas[0].generation < 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            await chat.refresh()
            later = [
                await chat.chat(f"new{i}", [{"role": "user", "content": "x"}]) for i in range(4)
            ]
            await chat.aclose()
            return seen, {r.endpoint for r in later}

        first = list(pool.endpoints)
        seen, later = asyncio.run(go())
        assert all(len(s) == 10 for s in seen)  # nothing failed
        assert chat.stats()["requests_rerouted"] >= 1
        assert pool.replicas[0].generation == 1 and pool.endpoints[0] != first[0]
        assert pool.endpoints[0] in later  # the restarted replica takes new episodes
    finally:
        pool.shutdown()
