"""Sweeps on a real two-node Ray cluster (`ray start` head + a second node, token
auth), joined as `cluster=ray` does: episode workers and model server replicas
spread over both nodes, and the sweep survives a killed episode worker, a killed
server replica and the loss of the second node, with every task recorded exactly
once, nothing unscored counted, and the retries in the logs and MLflow. Losing the head node with
its driver, then resubmitting, is tested on the twin of the KubeRay cluster
(tests/k8s/test_cluster_twin.py), with the node shapes k8s/ renders."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.tracking.results import SweepResult
from distillery.workers.trajectories import read_episodes
from tests.support import REPO_ROOT
from tests.support.ray_auth import ray_auth_env
from tests.support.ray_cluster import LocalRayCluster

pytestmark = pytest.mark.slow

N_TASKS = 8


@pytest.fixture(scope="module")
def cluster():
    """Head (3 CPUs) + second node (2 CPUs), each with one replica slot."""
    ray_cluster = LocalRayCluster()
    try:
        ray_cluster.start_head(3, {"replica_slot": 1})
        ray_cluster.add_node("second", 2, {"replica_slot": 1})
        with ray_auth_env(ray_cluster.env):  # the driver authenticates with the token
            yield ray_cluster
    finally:
        ray_cluster.stop()


def sweep_configs(tmp_path: Path, cluster: LocalRayCluster, delay_s: float = 0.2):
    argv = [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        f"benchmark.limit={N_TASKS}",
        "methods=[zero_shot]",
        "agent.retry_backoff_s=1",  # an episode retry gives a restart time to finish
        "cluster=ray",
        f"cluster.ray_address={cluster.address}",
        "cluster.num_workers=2",
        "cluster.worker_num_cpus=1",
        "cluster.episodes_per_worker=4",
        "student=external",
        "student.base_url=http://unused/v1",
        "student.model=scripted",
        "student.action_format=native",
    ]
    configs = [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), False)]
    student = configs[0].student.model_copy(
        update={
            "name": "scripted",
            "backend": "command",
            "base_url": None,
            "command": (
                sys.executable,
                "-m",
                "distillery.testing.scripted_server",
                "--script",
                "distillery.testing.bfcl_scripts:replay_native",
                "--delay",
                str(delay_s),
                "--port",
                "{port}",
            ),
            "command_cwd": str(REPO_ROOT),
            # every "node" of this cluster is this machine, and servers here stay on
            # loopback (Ray reports the machine's address as each node's)
            "server_host": "127.0.0.1",
            "replicas": 2,
            "server_num_cpus": 1,
            "server_resources": {"replica_slot": 1},
            "max_concurrency_per_server": 2,
            "startup_timeout_s": 60,
            "health_interval_s": 0.5,
            "health_timeout_s": 5,
            "health_failures": 2,
            "max_restarts": 2,
            "restart_backoff_s": 0.2,
            "max_retries": 1,
            "retry_backoff_s": 0.1,
        }
    )
    return [c.model_copy(update={"student": student}) for c in configs]


def assert_exactly_once_and_scored(result: SweepResult) -> None:
    method = result.points[0].method("zero_shot")
    records = read_episodes(method.episodes_dir)
    assert sorted(r.task_id for r in records) == sorted(result.points[0].task_ids)
    assert len(records) == N_TASKS  # one file per task: nothing twice, nothing missing
    # the scripted student replays the ground truth: every episode is a success, so an
    # infrastructure failure scored as the student's would show here
    assert all(r.success is True and r.termination == "done" for r in records)
    assert method.metrics["infra_errors"] == 0 and method.metrics["n_scored"] == N_TASKS


def parent_metrics(tmp_path: Path, result: SweepResult) -> dict[str, float]:
    """The sweep parent's infra.* counts summed over its invocations (a re-run logs its
    own values into the same run)."""
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    keys = client.get_run(result.parent_run_id).data.metrics
    return {
        k: sum(m.value for m in client.get_metric_history(result.parent_run_id, k))
        for k in keys
        if k.startswith("infra.")
    }


def processes_of(cluster: LocalRayCluster, title: str) -> list[int]:
    """Pids of this cluster's Ray workers whose process title starts with `title`
    (they carry the cluster's token in their environment: nobody else's)."""
    marker = f"RAY_AUTH_TOKEN={cluster.token}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
            if cmdline.startswith(title.encode()) and marker in (proc / "environ").read_bytes():
                found.append(int(proc.name))
        except OSError:
            continue
    return found


def run_in_thread(configs) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def body() -> None:
        try:
            out["result"] = run_sweep(configs, progress=True)
        except BaseException as exc:  # reported by the test
            out["error"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    return thread, out


def wait_for_episodes(tmp_path: Path, n: int, timeout_s: float = 240.0) -> None:
    """Until `n` episode files exist under the output root (the sweep is mid-way)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(list((tmp_path / "runs").glob("stages/evaluate/*/episodes/*.parquet"))) >= n:
            return
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} episodes after {timeout_s:.0f} s")


def finish(thread: threading.Thread, out: dict, timeout_s: float = 400.0) -> SweepResult:
    thread.join(timeout_s)
    assert not thread.is_alive(), "the sweep did not finish in time"
    if "error" in out:
        raise out["error"]
    return out["result"]


def test_a_sweep_spreads_over_both_nodes(cluster, tmp_path, capfd):
    result = run_sweep(sweep_configs(tmp_path, cluster, delay_s=0.0), progress=True)
    assert_exactly_once_and_scored(result)
    out = capfd.readouterr()
    text = out.out + out.err
    assert "scripted: 2 replicas on 2 nodes" in text
    assert "2 episode workers on 2 nodes" in text
    metrics = parent_metrics(tmp_path, result)
    assert metrics["infra.worker_restarts"] == 0 and metrics["infra.replica_restarts"] == 0


def test_a_killed_episode_worker_is_replaced_and_its_episodes_rerun(cluster, tmp_path, capfd):
    thread, out = run_in_thread(sweep_configs(tmp_path, cluster))
    wait_for_episodes(tmp_path, 1)
    victims = processes_of(cluster, "ray::EpisodeWorkerImpl")
    assert victims
    os.kill(victims[0], signal.SIGKILL)
    result = finish(thread, out)
    assert_exactly_once_and_scored(result)
    captured = capfd.readouterr()
    assert "replaced, its episodes dispatched again" in captured.out + captured.err
    assert "infrastructure retries: " in captured.out + captured.err
    assert parent_metrics(tmp_path, result)["infra.worker_restarts"] >= 1


def test_a_killed_server_replica_is_restarted_and_its_requests_rerouted(cluster, tmp_path):
    thread, out = run_in_thread(sweep_configs(tmp_path, cluster))
    wait_for_episodes(tmp_path, 1)
    victims = processes_of(cluster, "ray::LlmServerImpl")
    assert len(victims) == 2
    os.kill(victims[0], signal.SIGKILL)  # the actor; its server follows (death signal)
    result = finish(thread, out)
    assert_exactly_once_and_scored(result)
    metrics = parent_metrics(tmp_path, result)
    assert metrics["infra.replica_failures"] >= 1


def test_losing_the_second_node_mid_sweep(cluster, tmp_path):
    """Its worker and its replica go with it; the sweep finishes on the head (the
    replica cannot come back: its slot was on the lost node) or a re-run does."""
    configs = sweep_configs(tmp_path, cluster, delay_s=0.6)  # long enough to kill mid-way
    configs = [
        c.model_copy(
            update={
                "student": c.student.model_copy(update={"startup_timeout_s": 10, "max_restarts": 1})
            }
        )
        for c in configs
    ]
    thread, out = run_in_thread(configs)
    wait_for_episodes(tmp_path, 1)
    cluster.kill_node("second")
    try:
        result = finish(thread, out)
    except Exception:
        result = run_sweep(configs, progress=False)  # a re-run finishes it
    assert_exactly_once_and_scored(result)
    metrics = parent_metrics(tmp_path, result)
    assert metrics["infra.worker_restarts"] + metrics["infra.replica_failures"] >= 1
