"""Nothing the driver or the model pool waits for on Ray waits for ever: every
`ray.get`/`ray.wait` has a timeout, every `ray_get`/`bounded_get` a deadline, and no
object ref is awaited bare; past a deadline, one line (and exit status 2 from the CLI)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.workers.placement import PlacementTimeout

REPO_ROOT = Path(__file__).resolve().parents[2]
SCANNED = [*sorted((REPO_ROOT / "orchestrator").rglob("*.py")), REPO_ROOT / "workers/llm/pool.py"]
# file:line -> why that wait cannot block (none so far: a new entry needs its reason).
ALLOWED: dict[str, str] = {}


def unbounded_waits(source: str, where: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Await) and isinstance(node.value, ast.Call):
            func = node.value.func
            if isinstance(func, ast.Attribute) and func.attr == "remote":
                found.append(f"{where}:{node.lineno}: an object ref awaited without a deadline")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        keywords = {k.arg for k in node.keywords}
        name = (
            f"{func.value.id}.{func.attr}"
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else func.id
            if isinstance(func, ast.Name)
            else ""
        )
        if name in ("ray.get", "ray.wait") and "timeout" not in keywords:
            found.append(f"{where}:{node.lineno}: {name} without a timeout")
        if name == "ray_get" and "timeout_s" not in keywords:
            found.append(f"{where}:{node.lineno}: ray_get without timeout_s")
        if name == "bounded_get" and len(node.args) + len(keywords) < 3:
            found.append(f"{where}:{node.lineno}: bounded_get without its deadline")
    return found


def test_no_wait_on_ray_in_the_driver_or_the_pool_is_unbounded():
    found = []
    for path in SCANNED:
        where = str(path.relative_to(REPO_ROOT))
        found += [
            f for f in unbounded_waits(path.read_text(), where) if f.split(": ")[0] not in ALLOWED
        ]
    assert found == []


def test_the_scan_finds_what_it_claims_to():
    planted = """
import ray
async def play(worker):
    return await worker.run_task.remote("t")
def f(refs):
    ray.get(refs)
    ray.wait(refs, num_returns=1)
    ray_get(refs[0], what="x")
    ray.get(refs, timeout=5)
"""
    found = unbounded_waits(planted, "planted.py")
    assert [f.split(": ", 1)[1] for f in found] == [
        "an object ref awaited without a deadline",
        "ray.get without a timeout",
        "ray.wait without a timeout",
        "ray_get without timeout_s",
    ]


def test_a_memory_service_no_node_can_take_ends_in_one_line(tmp_path, ray_local):
    from distillery.orchestrator.execution.memory_stage import MemoryStage
    from distillery.orchestrator.state.ledger import Ledger
    from tests.support.sweep_config import sweep_config

    cfg = sweep_config(
        tmp_path, "+cluster.worker_resource=nowhere", "+cluster.placement_timeout_s=3"
    )
    memory = MemoryStage(cfg, Ledger(cfg.output_dir), None, {}, print, str)  # type: ignore[arg-type]
    with pytest.raises(PlacementTimeout) as caught:
        memory.service  # noqa: B018 - starting it is the point
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(
        "1 of 1 memory service not placed in 3 s; each asks {CPU 0.25, nowhere 0.25}"
    )
    assert "free/total per node: node " in line


@pytest.mark.slow
def test_the_cli_says_a_placement_deadline_in_one_line_and_exits_2(tmp_path):
    """Episode workers no node can take (a worker resource nobody advertises)."""
    from distillery.testing.scripted_server import run_stub_server

    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as url:
        argv = [
            "benchmark.limit=1",
            "methods=[zero_shot]",
            "student=external",
            f"student.base_url={url}",
            "student.model=scripted",
            "+cluster.worker_resource=nowhere",
            "+cluster.placement_timeout_s=5",
            "cluster.num_cpus=2",
            f"output_dir={tmp_path / 'runs'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ]
        env = {"PYTHONPATH": str(REPO_ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
        done = subprocess.run(
            [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv],
            cwd=tmp_path,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("distillery:")]
    assert len(lines) == 1, done.stderr[-3000:]
    assert "episode workers of evaluate student:" in lines[0]
    assert "not placed in 5 s" in lines[0] and "nowhere" in lines[0]
    assert "re-run the same command to resume" in done.stderr


def test_llama_cpp_replicas_reserve_the_cpu_groups_resource_on_a_cluster(tmp_path):
    """On KubeRay a llama.cpp replica reserves distillery_cpu (only the cpu group has
    it): never a GPU pod's CPU or a grading pod; a private local Ray: unchanged."""
    from distillery.orchestrator.execution.server_pool import ServerPool
    from distillery.orchestrator.planning.plan import plan_sweep
    from distillery.workers.storage import Location
    from tests.support.sweep_config import sweep_config

    for cluster, expected in (("kuberay", {"distillery_cpu": 1.0}), ("local", {})):
        cfg = sweep_config(
            tmp_path, f"cluster={cluster}", "student=smollm2_135m", "benchmark.limit=1"
        )
        pool = ServerPool(plan_sweep([cfg]), Location.of(str(tmp_path / "logs")), print)
        placed = pool.placed(cfg.student)
        assert placed.backend == "llama_cpp"
        assert placed.server_resources == {**cfg.student.server_resources, **expected}
