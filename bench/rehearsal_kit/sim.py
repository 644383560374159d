"""The rehearsal's simulated world: the latency models of a vLLM student replica and of
an API teacher, the overrides that make a sweep's students command-backend replicas
running bench/sim_server.py (started by the pool, one per replica, in the placement a
one-GPU vLLM replica reserves), the simulated API server of the teacher (and of the
embedder), and the Ray cluster the driver joins: the k8s `gpu` overlay's shapes
(tests/support/cluster_twin.py), as one loopback node holding their resources summed or
as the twin's nodes themselves.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
SIM_SERVER = REPO / "bench" / "sim_server.py"
# Every role's replies (replies.any_role): a perfect BFCL agent when the request carries
# tools, else a plain text that the memory builders reject and replace by their
# deterministic fallback (the builders' model calls are made and timed; their notes are
# the fallback's).
BFCL_SCRIPT = "bench.rehearsal_kit.replies:any_role"
GSM8K_SCRIPT = "bench.rehearsal_kit.replies:gsm8k_any_role"


@dataclass(frozen=True)
class LatencyModel:
    """One simulated server's costs, in real (unscaled) milliseconds."""

    max_seqs: int  # requests in its batch at once; the rest queue inside the server
    base_ms: float  # per request (scheduling, first token's overhead)
    prefill_ms_per_token: float  # per prompt token not in its prefix cache
    decode_ms_per_token: float  # per output token
    cache_tokens: int  # prefix cache (KV blocks) size

    def args(self, scale: float, script: str) -> list[str]:
        return [
            "--max-seqs",
            str(self.max_seqs),
            "--base-ms",
            f"{self.base_ms:g}",
            "--ms-per-token",
            f"{self.prefill_ms_per_token:g}",
            "--ms-per-output-token",
            f"{self.decode_ms_per_token:g}",
            "--cache-tokens",
            str(self.cache_tokens),
            "--scale",
            f"{scale:g}",
            "--script",
            script,
        ]

    def tokens_per_s(self, prompt: float, cached: float, output: float) -> float:
        """A full batch's throughput (prompt + output tokens a second, real time) for
        calls of `prompt` tokens (`cached` of them in the prefix cache) and `output`."""
        ms = (
            self.base_ms
            + self.prefill_ms_per_token * max(0.0, prompt - cached)
            + self.decode_ms_per_token * output
        )
        return self.max_seqs * (prompt + output) / (ms / 1000)

    def describe(self) -> str:
        return (
            f"batch {self.max_seqs}, {self.base_ms:g} ms + {self.prefill_ms_per_token:g} ms per "
            f"uncached prompt token + {self.decode_ms_per_token:g} ms per output token, prefix "
            f"cache {self.cache_tokens:,} tokens"
        )


# A 4-14B student on one H100 with vLLM (bf16): prefill ~10k tokens/s for one sequence,
# ~50 output tokens/s per sequence at a batch of 64 (the models' max_concurrency_per_server),
# a KV cache of ~400k tokens.
STUDENT_GPU = LatencyModel(64, 30.0, 0.1, 20.0, 400_000)
# An API teacher (GPT-5-mini, DeepSeek): ~1.5 s to the first token, ~100 output tokens/s;
# the provider's batch is not the limit (the client's concurrency is).
TEACHER_API = LatencyModel(1024, 1500.0, 0.0, 10.0, 0)


def student_overrides(
    scale: float, replicas: int, script: str = BFCL_SCRIPT, gpus: int = 1
) -> list[str]:
    """Overrides making every point's student a pool of `replicas` simulated vLLM
    replicas (backend=command), each placed as a vLLM replica of `gpus` GPUs on
    cluster=kuberay (CPU 1, GPU `gpus`, distillery_gpus_<gpus> 1: cluster_twin.stand_in_vllm)."""
    command = [
        sys.executable,
        str(SIM_SERVER),
        "--port",
        "'{port}'",  # quoted: a string in the command list, as Hydra reads it
        *(f"'{a}'" for a in STUDENT_GPU.args(scale, script)),
    ]
    return [
        "student.backend=command",
        "student.base_url=null",
        f"student.command=[{','.join(command)}]",
        f"student.command_cwd={REPO}",
        "student.server_host=127.0.0.1",  # every node is this machine's loopback
        f"student.replicas={replicas}",
        "student.server_num_cpus=1",
        f"+student.server_resources={{GPU:{gpus},distillery_gpus_{gpus}:1}}",
        "student.startup_timeout_s=300",
        # vLLM's own launch flags (the stand-in is no vLLM)
        "student.reasoning_parser=null",
        "student.tool_call_parser=null",
    ]


@contextlib.contextmanager
def api_server(scale: float, log: Path, script: str = BFCL_SCRIPT) -> Iterator[str]:
    """The simulated API teacher (and embedding API): yields its base URL (…/v1)."""
    from distillery.workers.llm.servers import free_port

    port = free_port()
    command = [sys.executable, str(SIM_SERVER), "--port", str(port)]
    command += TEACHER_API.args(scale, script)
    with log.open("wb") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 120
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"the simulated API exited: {log.read_text()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise TimeoutError("the simulated API did not answer in 120 s")
                time.sleep(0.3)
            yield f"{url}/v1"
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()


def server_stats(base_url: str) -> dict[str, int]:
    return httpx.get(base_url.removesuffix("/v1") + "/stats", timeout=10).json()


@dataclass
class Cluster:
    address: str
    env: dict[str, str]
    description: str
    stop: object  # () -> None


def start_cluster(kind: str, cpu_pods: int, gpu_pods: int, grading_pods: int) -> Cluster:
    """The `gpu` overlay's Ray groups (cluster_twin.ray_groups): `cpu_pods` of its cpu
    group, `grading_pods` of grading, `gpu_pods` of vllm-1gpu. kind "twin": a node per
    pod (the twin itself); "single": one node with their resources summed (a 2-core
    machine runs one raylet, not a dozen)."""
    from tests.support.cluster_twin import ray_groups, start_twin

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    groups = ray_groups("gpu")
    pods = {"cpu": cpu_pods, "vllm-1gpu": gpu_pods, "grading": grading_pods}
    shape = ", ".join(
        f"{n} x {g} ({groups[g].num_cpus} CPU, {groups[g].num_gpus} GPU, "
        f"{', '.join(f'{k} {v:g}' for k, v in groups[g].resources.items())})"
        for g, n in pods.items()
        if n
    )
    if kind == "twin":
        twin = start_twin("gpu", pods)
        return Cluster(
            twin.ray.address,
            dict(twin.ray.env),
            f"cluster twin of k8s/overlays/gpu, a Ray node per pod: head + {shape}",
            twin.ray.stop,
        )
    from tests.support.ray_cluster import LocalRayCluster

    cpus, gpus, resources = 0, 0, {}
    for group, n in pods.items():
        g = groups[group]
        cpus += g.num_cpus * n
        gpus += g.num_gpus * n
        for name, value in g.resources.items():
            resources[name] = resources.get(name, 0.0) + value * n
    ray = LocalRayCluster()
    ray.start_head(cpus, resources, gpus)
    return Cluster(
        ray.address,
        dict(ray.env),
        f"one local Ray node with the summed resources of k8s/overlays/gpu's {shape}: "
        f"CPU {cpus}, GPU {gpus}, " + ", ".join(f"{k} {v:g}" for k, v in resources.items()),
        ray.stop,
    )
