"""The vLLM path without a GPU: the launch line of every shipped vLLM model against the
flags of the pinned vLLM (tests/support/fake_vllm.py), a replica served by a fake
`vllm` on PATH whose health is vLLM's `/health` (a hung engine fails it while
`/v1/models` still answers), its log copied to an S3 output root as it is written,
a missing model refused at once naming the model and the command, and a request in
flight on a replica the health check takes down rerouted long before its timeout."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import httpx
import pytest
import yaml

from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.router import RoutedChat
from distillery.workers.llm.servers import LlmServerImpl, server_process_for, vllm_command
from distillery.workers.llm.weights import ModelNotCached, cached_snapshot, require_cached
from distillery.workers.storage import Location
from tests.support import REPO_ROOT, fake_vllm
from tests.support.servers import s3_server

CONF = REPO_ROOT / "conf" / "model"


def _shipped_vllm_models() -> list[ModelConfig]:
    models = []
    for path in sorted(CONF.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if data.get("backend") == "vllm":
            data.pop("defaults", None)
            models.append(ModelConfig(**data))
    return models


def test_every_shipped_vllm_launch_line_is_accepted_by_the_pinned_vllm():
    models = _shipped_vllm_models()
    assert {m.model for m in models} >= {"Qwen/Qwen3-4B", "Qwen/Qwen3-32B"}
    for cfg in models:
        args = fake_vllm.parse(vllm_command(cfg, "10.0.0.1", 8000)[1:])
        assert args.model == cfg.model and args.tensor_parallel_size == cfg.tensor_parallel_size
        # Tensor parallel replicas use vLLM's own workers on the node's GPUs.
        assert args.distributed_executor_backend == ("mp" if cfg.tensor_parallel_size > 1 else None)
    # The `gpu` extra pins the version these flags were read from.
    pyproject = (REPO_ROOT / "pyproject.toml").read_text()
    assert f'"vllm=={fake_vllm.VLLM_VERSION}"' in pyproject
    with pytest.raises(SystemExit):
        fake_vllm.parse(["serve", "m", "--no-such-flag"])


@pytest.fixture
def fake_vllm_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "vllm"
    script.write_text(
        f"#!{sys.executable}\nimport runpy, sys\nsys.argv[0] = 'vllm'\n"
        f"runpy.run_path({str(Path(fake_vllm.__file__))!r}, run_name='__main__')\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def vllm_model(**overrides) -> ModelConfig:
    fields = dict(
        name="qwen3-32b",
        backend="vllm",
        model="Qwen/Qwen3-32B",
        gpus_per_server=2,
        tensor_parallel_size=2,
        reasoning_parser="qwen3",
        startup_timeout_s=60,
        max_retries=0,
    )
    return ModelConfig(**{**fields, **overrides})


def _cache_model(cache: Path, model: str) -> None:
    """The Hugging Face cache layout `snapshot_download` leaves."""
    folder = cache / ("models--" + model.replace("/", "--"))
    snapshot = folder / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (folder / "refs").mkdir()
    (folder / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text("{}")
    (snapshot / "model-00001-of-00002.safetensors").write_bytes(b"\0")


def test_an_uncached_model_stops_the_replica_naming_model_and_command(
    tmp_path, monkeypatch, fake_vllm_on_path
):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    replica = LlmServerImpl(vllm_model(), str(tmp_path / "logs"))
    started = time.monotonic()
    with pytest.raises(ModelNotCached) as caught:
        replica.start()
    message = str(caught.value)
    assert "model Qwen/Qwen3-32B is not in the model cache" in message
    assert str(tmp_path / "cache") in message
    assert "distillery submit --k8s --weights" in message
    assert "python -m distillery.workers.llm.weights download Qwen/Qwen3-32B" in message
    assert time.monotonic() - started < 30  # refused, not a start-up timeout
    assert replica.server_pid() is None  # nothing was launched

    _cache_model(tmp_path / "cache", "Qwen/Qwen3-32B")
    assert cached_snapshot("Qwen/Qwen3-32B") is not None
    require_cached("Qwen/Qwen3-32B")
    try:
        assert replica.start().endswith("/v1")  # the fake vLLM, offline, from the cache
    finally:
        replica.stop()
    # Online (the download Job) nothing is required of the cache.
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    require_cached("google/gemma-4-E4B-it")


def test_health_is_the_engines_and_the_log_reaches_s3_as_written(
    tmp_path, monkeypatch, fake_vllm_on_path
):
    with s3_server() as store:
        for key, value in store.env.items():
            monkeypatch.setenv(key, value)
        from distillery.workers import storage

        storage._filesystem.cache_clear()
        root = Location.of("s3://distillery/runs/sweeps/s1/logs")
        server = server_process_for(vllm_model(), root.uri)
        try:
            url = server.start()
            base = url.removesuffix("/v1")
            assert server.health_url == f"{base}/health"
            assert server.healthy()
            # The log is copied while the server runs (not only when it stops).
            shipper = server._shipper
            assert shipper is not None  # an S3 log root: its copier
            shipper.ship_once()
            assert f"vLLM API server version {fake_vllm.VLLM_VERSION}" in shipper.shipped_text()
            httpx.post(f"{base}/fake/hang", timeout=10)
            # The engine hangs: the model list still answers, /health does not.
            assert httpx.get(f"{url}/models", timeout=10).status_code == 200
            assert not server.healthy(timeout_s=1.0)
        finally:
            server.stop()
        names = [p.name for p in root.listdir(".log")]
        assert len(names) == 1 and names[0].startswith("qwen3-32b-127.0.0.1-")
        assert names[0].endswith(".000.log")
        text = (root / names[0]).read_bytes().decode()
        assert "'tensor_parallel_size': 2" in text and "GET /health" in text
        storage._filesystem.cache_clear()


class _Directory:
    """The pool's ReplicaDirectory as the router reads it (`snapshot.remote()`)."""

    def __init__(self, urls: list[str]) -> None:
        self.state = [{"url": u, "healthy": True, "generation": 0} for u in urls]
        self.snapshot = self

    def remote(self):
        async def snapshot():
            return [dict(s) for s in self.state]

        return snapshot()


def test_a_request_on_a_replica_taken_down_by_health_is_rerouted_before_its_timeout(
    tmp_path, fake_vllm_on_path
):
    servers = [
        server_process_for(vllm_model(name=f"r{i}"), str(tmp_path / "logs")) for i in range(2)
    ]
    urls = [s.start() for s in servers]
    try:
        cfg = vllm_model(request_timeout_s=300, max_concurrency_per_server=2)
        directory = _Directory(urls)
        chat = RoutedChat.from_config(cfg, urls, directory)
        first = urls[0]

        async def go():
            # The episode lands on replica 0, whose engine then hangs.
            done = await chat.chat("ep", [{"role": "user", "content": "hi"}])
            assert done.endpoint == first
            async with httpx.AsyncClient() as client:
                await client.post(first.removesuffix("/v1") + "/fake/hang", timeout=10)
            pending = asyncio.ensure_future(chat.chat("ep", [{"role": "user", "content": "again"}]))
            await asyncio.sleep(1.5)
            assert not pending.done()  # stuck on the hung engine
            directory.state[0]["healthy"] = False  # the pool's health poll takes it down
            started = time.monotonic()
            result = await asyncio.wait_for(pending, timeout=120)
            return result, time.monotonic() - started

        result, waited = asyncio.run(go())
        assert result.endpoint == urls[1] and result.text == "fake vllm reply"
        assert chat.stats()["requests_rerouted"] == 1
        assert waited < cfg.request_timeout_s  # moved on the health verdict, not a timeout
    finally:
        for server in servers:
            server.stop()


def test_the_weights_command_checks_the_cache_and_downloads_only_online(
    tmp_path, monkeypatch, capsys
):
    from distillery.workers.llm import weights

    cache = tmp_path / "cache"
    assert weights.main(["check", "Qwen/Qwen3-4B", "--cache", str(cache)]) == 1
    assert "Qwen/Qwen3-4B: missing in" in capsys.readouterr().out
    _cache_model(cache, "Qwen/Qwen3-4B")
    assert weights.main(["check", "Qwen/Qwen3-4B", "--cache", str(cache)]) == 0
    # The Job sets HF_HUB_OFFLINE=0 over the image's 1; left offline it refuses at once.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert weights.main(["download", "Qwen/Qwen3-4B", "--cache", str(cache)]) == 2
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err


def test_a_tensor_parallel_replica_gets_its_leases_gpus(tmp_path, monkeypatch, fake_vllm_on_path):
    """A replica of 2 GPUs on a private Ray with 2 (Ray's GPU resource, no device): the
    pool starts the GPU-lease actor in the second bundle and launches vLLM with both
    GPUs visible. (The lease was built with options() twice, which Ray refuses: every
    tensor-parallel replica failed to start; the cluster twin found it.)"""
    import ray

    from distillery.workers.llm.pool import start_pool

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    _cache_model(tmp_path / "cache", "Qwen/Qwen3-32B")
    # The Ray workers inherit this process's environment (the fake vllm on PATH).
    ray.init(num_cpus=1, num_gpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    try:
        pool = start_pool(vllm_model(replicas=1), tmp_path / "logs")
        try:
            (replica,) = pool.replicas
            assert len(replica.leases) == 1
            pid = ray.get(replica.actor.server_pid.remote(), timeout=60)
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            visible = [v for v in environ if v.startswith(b"CUDA_VISIBLE_DEVICES=")]
            assert visible == [b"CUDA_VISIBLE_DEVICES=0,1"]
        finally:
            pool.shutdown()
    finally:
        ray.shutdown()
