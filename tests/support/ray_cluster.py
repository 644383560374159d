"""A real multi-node Ray cluster on this machine, as `ray start` makes one: a head
and extra nodes with their own resources, token authentication on (Ray 2.60), every
port chosen free, and a temp dir of its own.

Each node runs `ray start --block` in a session of its own, so killing that process
group takes exactly that node's processes (raylet, its workers, agents) and nothing
else on the machine: `kill_node` is a node failure, `stop` ends only this cluster
(never `ray stop`, which would end every Ray on the machine).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from distillery.workers.llm.servers import free_port

# On a loaded 2-core machine Ray's agents take longer than the defaults allow.
SLOW_MACHINE_ENV = {
    "RAY_agent_register_timeout_ms": "180000",
    "RAY_raylet_start_wait_time_s": "180",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
}


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen
    log: Path


@dataclass
class LocalRayCluster:
    temp_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="dray-")))
    token: str = field(default_factory=lambda: secrets.token_hex(32))
    port: int = field(default_factory=free_port)
    nodes: dict[str, RayNode] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """What a process needs to join this cluster (token auth included)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self.token, **SLOW_MACHINE_ENV}

    def start_head(
        self, num_cpus: float, resources: dict[str, float] | None = None, num_gpus: int = 0
    ) -> None:
        self._start(
            "head",
            [
                "--head",
                "--port",
                str(self.port),
                "--include-dashboard",
                "false",
                "--dashboard-port",
                str(free_port()),
                "--ray-client-server-port",
                str(free_port()),
            ],
            num_cpus,
            resources,
            num_gpus,
        )

    def add_node(
        self,
        name: str,
        num_cpus: float,
        resources: dict[str, float] | None = None,
        num_gpus: int = 0,
    ) -> None:
        """A node joining the head; `num_gpus` are Ray's GPU resource only (no device:
        what a pod's GPUs are to placement)."""
        self._start(name, ["--address", self.address], num_cpus, resources, num_gpus)

    def _start(
        self,
        name: str,
        args: list[str],
        num_cpus: float,
        resources: dict[str, float] | None,
        num_gpus: int = 0,
    ) -> None:
        # A node whose agents start too slowly on a loaded machine dies at start-up
        # (Ray's own timeout): try again, a bounded number of times.
        for attempt in range(1, 4):
            node = self._launch(name, args, num_cpus, resources, attempt, num_gpus)
            if self._wait_started(node):
                self.nodes[name] = node
                return
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)
            node.process.wait(timeout=30)
        raise RuntimeError(f"ray node {name} did not start:\n{node.log.read_text()[-3000:]}")

    def _launch(
        self,
        name: str,
        args: list[str],
        num_cpus: float,
        resources: dict[str, float] | None,
        attempt: int,
        num_gpus: int = 0,
    ) -> RayNode:
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
        log = self.temp_dir / f"{name}.{attempt}.log"
        command = [
            str(Path(sys.executable).parent / "ray"),  # this venv's Ray, activated or not
            "start",
            *args,
            "--node-ip-address",
            "127.0.0.1",
            "--temp-dir",
            str(self.temp_dir),
            "--num-cpus",
            str(num_cpus),
            "--num-gpus",
            str(num_gpus),
            "--resources",
            json.dumps({f"node_{name}": 1.0, **(resources or {})}),
            "--disable-usage-stats",
            "--block",
            *ports,
        ]
        with log.open("wb") as out:
            process = subprocess.Popen(
                command,
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return RayNode(name, process, log)

    @staticmethod
    def _wait_started(node: RayNode, timeout_s: float = 300.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if "Ray runtime started" in node.log.read_text(errors="replace"):
                return True
            if node.process.poll() is not None:
                return False
            time.sleep(1)
        return False

    def kill_node(self, name: str) -> None:
        """A node failure (its pod gone): SIGKILL every process of that node at once,
        its process group and everything it started (Ray's workers, which leave the
        group, and what they started: an actor that outlived its raylet would go on
        answering its callers directly, as no process of a lost pod does)."""
        node = self.nodes.pop(name)
        processes = _descendants(node.process.pid)  # before they are orphaned
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.process.pid, signal.SIGKILL)
        for pid in processes:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait(timeout=30)

    def processes(self) -> list[int]:
        """Every live process of this cluster, whatever its session: nodes, their
        workers and actors, what those started (a model server) and drivers joined to it
        all carry the cluster's token in their environment, and nobody else does."""
        marker = f"RAY_AUTH_TOKEN={self.token}".encode()
        found = []
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit() or int(proc.name) == os.getpid():
                continue
            try:
                if marker in (proc / "environ").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
        return found

    def kill_all(self, timeout_s: float = 60.0) -> None:
        """Every pod dies at once, as when the cluster is deleted: SIGKILL to every
        process of the cluster (killing the nodes' process groups alone leaves workers
        that left them playing on), then wait until none is left."""
        deadline = time.monotonic() + timeout_s
        while pids := self.processes():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise TimeoutError(f"processes of the cluster outlived SIGKILL: {pids}")
            time.sleep(0.2)
        for node in self.nodes.values():
            node.process.wait(timeout=30)
        self.nodes.clear()

    def stop(self) -> None:
        """End this cluster and nothing else: every process that carries its token, then
        whatever still runs out of its temp dir. SIGKILL, not `ray stop`'s SIGTERM: a
        graceful stop waited up to 30 s per node and nothing here needs it."""
        self.kill_all()
        # Ray's processes may have left the node's session (a daemonised reaper, say):
        # whatever still runs out of this cluster's temp dir is this cluster's.
        _kill_stragglers(self.temp_dir)


def _descendants(root: int) -> list[int]:
    """Every live process descended from `root` (children, their children...)."""
    children: dict[int, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            # /proc/<pid>/stat: "pid (comm) state ppid ...": comm may hold spaces.
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(proc.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _kill_stragglers(temp_dir: Path) -> None:
    marker = str(temp_dir)
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(proc.name), signal.SIGKILL)
