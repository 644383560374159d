"""A real Ray head node with its dashboard (the Jobs API) on loopback, for tests.

Started with `ray start --head` as a user would, with Ray 2.60's token authentication
on, its own temporary folder and free ports (the machine is shared: never the default
ports, never `ray stop`, which stops every Ray on the machine). Stopped by ending the
processes it started and their descendants (job drivers and workers included).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from distillery.workers.llm.servers import free_port

# `ray start --node-ip-address 127.0.0.1` is rewritten to the machine's external
# address; another loopback address keeps every Ray server on loopback.
NODE_IP = "127.0.0.2"


@dataclass(frozen=True)
class RayHead:
    dashboard: str  # http://127.0.0.1:PORT, the Jobs API
    gcs_address: str
    temp_dir: Path
    token: str
    env: dict[str, str]  # what a client needs: token auth on, the token, this Python


def client_env(token: str) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "RAY_USAGE_STATS_ENABLED": "0",
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }


@contextmanager
def ray_head(num_cpus: int = 2, second_node_cpus: int = 0) -> Iterator[RayHead]:
    """A head with the Jobs API; with `second_node_cpus`, a second node joins it (as
    `ray start --address` on another machine would), so a job's work can spread."""
    temp_dir = Path(tempfile.mkdtemp(prefix="dray-", dir="/tmp"))  # sockets: short paths
    token = secrets.token_hex(32)
    env = client_env(token)
    gcs_port, dashboard_port = free_port(), free_port()
    command = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--head",
        "--block",
        f"--node-ip-address={NODE_IP}",
        f"--port={gcs_port}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard_port}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--ray-client-server-port={free_port()}",
        f"--temp-dir={temp_dir}",
        f"--num-cpus={num_cpus}",
        "--disable-usage-stats",
    ]
    log = open(temp_dir / "ray-start.log", "wb")  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    head = RayHead(
        dashboard=f"http://127.0.0.1:{dashboard_port}",
        gcs_address=f"{NODE_IP}:{gcs_port}",
        temp_dir=temp_dir,
        token=token,
        env=env,
    )
    processes = [process]
    try:
        _wait_for_jobs_api(head, process)
        if second_node_cpus:
            processes.append(_join(head, second_node_cpus))
        yield head
    finally:
        for started in reversed(processes):
            _stop(started)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def _join(head: RayHead, num_cpus: int, timeout_s: float = 300) -> subprocess.Popen:
    """A second node on this machine: its own ports, the head's token."""
    ports = [
        f"--{option}={free_port()}"
        for option in (
            "node-manager-port",
            "object-manager-port",
            "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port",
            "runtime-env-agent-port",
            "metrics-export-port",
        )
    ]
    log_path = head.temp_dir / "ray-start-second.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "ray"),
                "start",
                "--block",
                f"--address={head.gcs_address}",
                f"--node-ip-address={NODE_IP}",
                f"--num-cpus={num_cpus}",
                '--resources={"node_second": 1}',
                # Its own folder: two nodes unpacking a job's working_dir into one
                # folder race (a module missing halfway through the extraction).
                f"--temp-dir={head.temp_dir / 'second'}",
                "--disable-usage-stats",
                *ports,
            ],
            env=head.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if "Ray runtime started" in log_path.read_text(errors="replace"):
            return process
        if process.poll() is not None:
            break
        time.sleep(1)
    _stop(process)
    raise RuntimeError(f"the second Ray node did not start: {log_path.read_text()[-3000:]}")


def _wait_for_jobs_api(head: RayHead, process: subprocess.Popen, timeout_s: float = 180) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    headers = {"Authorization": f"Bearer {head.token}"}
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"ray start exited {process.returncode}: "
                + (head.temp_dir / "ray-start.log").read_text()[-3000:]
            )
        try:
            reply = httpx.get(f"{head.dashboard}/api/jobs/", headers=headers, timeout=5)
            if reply.status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise TimeoutError(f"the Ray Jobs API at {head.dashboard} did not answer in {timeout_s}s")


def _processes() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, process group) of every process, from /proc."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        table[int(entry.name)] = (int(fields[1]), int(fields[2]))
    return table


def _family(root_group: int) -> set[int]:
    """The processes of a process group and all their descendants (Ray's workers and
    job drivers start sessions of their own)."""
    table = _processes()
    family = {pid for pid, (_, group) in table.items() if group == root_group}
    grew = True
    while grew:
        children = {pid for pid, (parent, _) in table.items() if parent in family}
        grew = not children <= family
        family |= children
    return family


def _signal_all(pids: set[int], sig: int) -> None:
    for pid in pids:
        with suppress(OSError):
            os.kill(pid, sig)


def _stop(process: subprocess.Popen) -> None:
    """End `ray start --block`'s process group and every descendant of it."""
    family = _family(process.pid)
    _signal_all(family, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and family & set(_processes()):
        process.poll()
        time.sleep(0.5)
    _signal_all(family & set(_processes()), signal.SIGKILL)
    process.wait(timeout=30)
