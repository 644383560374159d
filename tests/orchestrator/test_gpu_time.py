"""GPU time held and serving: what a model's servers cost while up, what they served,
and each stage's share, on runs whose server lifetimes and in-flight counts are known."""

from __future__ import annotations

import pytest

from distillery.orchestrator.execution.gpu_time import ServingClock
from distillery.workers.llm.config import ModelConfig


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_serving_time_and_each_stages_share_of_it():
    clock = Clock()
    serving = ServingClock(lambda server: 2.0, clock)  # one server of 2 GPUs
    serving.set("s", "a", 1)  # t=0: stage a sends one request
    clock.now = 5.0
    serving.set("s", "b", 1)  # t=5: b too (each has half the server)
    clock.now = 10.0
    serving.set("s", "a", 0)
    clock.now = 15.0
    serving.set("s", "b", 0)
    clock.now = 40.0  # idle: held, not serving
    assert serving.serving_s("s") == 15.0
    assert serving.stage_gpu_s("a") == pytest.approx(2 * 5 + 2 * 5 / 2)
    assert serving.stage_gpu_s("b") == pytest.approx(2 * 5 / 2 + 2 * 5)
    # The shares add up to the serving GPU time: nothing counted twice.
    assert serving.stage_gpu_s("a") + serving.stage_gpu_s("b") == pytest.approx(2 * 15)


def test_a_model_held_for_100_s_and_serving_for_40_is_40_percent_busy(monkeypatch, tmp_path):
    from distillery.orchestrator.execution import server_pool
    from distillery.orchestrator.execution.server_pool import ServerPool
    from distillery.orchestrator.planning.plan import plan_sweep
    from distillery.workers.llm import pool as pools
    from distillery.workers.storage import Location
    from tests.support.sweep_config import sweep_config

    clock = Clock()
    monkeypatch.setattr(server_pool.time, "time", clock)

    class Pool:
        endpoints = ["http://replica/v1"]
        directory = None
        nodes = ["n1", "n2"]

        def stats(self) -> dict[str, int]:
            return {}

        def shutdown(self) -> None:
            pass

    monkeypatch.setattr(pools, "start_pool", lambda *args, **kwargs: Pool())
    cfg = sweep_config(tmp_path, "benchmark.limit=1", "methods=[zero_shot]")
    graph = plan_sweep([cfg])
    (key,) = graph.stages
    model = ModelConfig(name="qwen", backend="vllm", model="Qwen/Qwen3-4B", replicas=2)
    servers = ServerPool(graph, Location.of("/tmp/logs"), print)
    clock.now = 100.0
    servers.endpoints(model)  # its servers start at t=100
    clock.now = 110.0
    servers.in_flight(model, key, 8)  # a stage sends it 8 episodes' requests
    clock.now = 150.0
    servers.in_flight(model, key, 0)
    clock.now = 200.0
    servers.close()  # stopped at t=200
    (held,) = servers.gpu_time()
    assert (held.model, held.gpus, held.held_s, held.serving_s) == ("qwen", 2.0, 100.0, 40.0)
    assert held.busy == pytest.approx(0.4)
    assert held.held_gpu_h == pytest.approx(2 * 100 / 3600)
    assert servers.stage_gpu_s(key) == {cfg.student.name: 0.0}  # another model's stage
    assert servers.serving.stage_gpu_s((server_pool.server_key(model), key)) == 2 * 40.0


def test_the_gpus_a_models_servers_hold_by_backend():
    """vLLM: its GPUs per server; another launched server: the Ray GPUs its replica
    reserves (a command serving on a GPU, or a simulated server placed as one); what
    distillery does not launch holds none."""
    from distillery.workers.llm.config import gpus_of

    vllm = ModelConfig(name="q", backend="vllm", model="Q", replicas=2, gpus_per_server=4)
    line = ("serve", "--port", "{port}")
    command = ModelConfig(
        name="c",
        backend="command",
        model="C",
        command=line,
        replicas=2,
        server_resources={"GPU": 1.0},
    )
    cpu_command = ModelConfig(name="c", backend="command", model="C", command=line, replicas=3)
    api = ModelConfig(
        name="a",
        backend="external",
        model="A",
        base_url="http://api/v1",
        server_resources={"GPU": 1.0},
    )
    assert [gpus_of(m) for m in (vllm, command, cpu_command, api, None)] == [8, 2, 0, 0, 0]
