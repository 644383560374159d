"""A model's server replicas as a pool of Ray actors: placed, watched, restarted.

Each replica is a Ray actor owning one server subprocess (servers.py), in a placement
group of its own: one bundle per GPU for a vLLM replica (tensor parallelism needs all
of them on one node: STRICT_PACK), one CPU bundle for llama.cpp and command servers.
The pool starts every replica once per sweep (a replica that cannot start stops the
run with its log: that is a configuration error, not a result), then polls their
health from a thread of the driver. A replica that dies or stops answering for
`health_failures` polls in a row is taken out of routing at once, and restarted in
its placement group (which Ray re-places if its node is gone) with exponential
backoff, at most `max_restarts` times. Episode workers learn about it from the pool's
`ReplicaDirectory` actor, which the routers poll (router.py).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.servers import GpuLeaseImpl, LlmServerImpl
from distillery.workers.llm.start_failure import ServerStartError
from distillery.workers.placement import PlacementTimeout, bounded_get, placement_message
from distillery.workers.storage import Location

log = logging.getLogger(__name__)


def placement_bundles(cfg: ModelConfig) -> list[dict[str, float]]:
    """The resources one replica reserves; bundle 0 holds the server's own actor."""
    extra = dict(cfg.server_resources)
    if cfg.backend == "vllm" and cfg.gpus_per_server > 0:
        gpus = max(cfg.gpus_per_server, cfg.tensor_parallel_size)
        return [{"CPU": 1.0, "GPU": 1.0, **extra}] + [{"GPU": 1.0} for _ in range(gpus - 1)]
    if cfg.backend == "vllm":
        return [{"CPU": 1.0, **extra}]
    return [{"CPU": cfg.server_num_cpus, **extra}]


def _custom_resource_hint(bundles: list[dict[str, float]]) -> str:
    custom = sorted({k for b in bundles for k in b if k not in ("CPU", "GPU", "memory")})
    if not custom:
        return ""
    return (
        f"; {', '.join(custom)} must be offered by a node or worker group (on Kubernetes: "
        "a GPU worker group with that many GPUs per pod, k8s/overlays/gpu)"
    )


class ReplicaDirectoryImpl:
    """Ray actor body: the pool's current view of its replicas, for the routers."""

    def __init__(self, snapshot: list[dict[str, Any]]) -> None:
        from distillery import redaction

        redaction.protect()  # a Ray worker: its logs are Ray's session logs
        self._snapshot = snapshot

    def publish(self, snapshot: list[dict[str, Any]]) -> None:
        self._snapshot = snapshot

    def snapshot(self) -> list[dict[str, Any]]:
        return self._snapshot


@dataclass
class ReplicaState:
    index: int
    group: Any  # its placement group
    actor: Any = None
    leases: list[Any] = field(default_factory=list)
    url: str | None = None
    state: str = "starting"  # starting | up | restarting | failed | stopped
    generation: int = 0
    restarts: int = 0
    failed_polls: int = 0

    def view(self) -> dict[str, Any]:
        return {"url": self.url, "healthy": self.state == "up", "generation": self.generation}


@dataclass
class PoolEvent:
    model: str
    replica: int
    kind: str  # down | restarted | failed
    detail: str


class ModelServerPool:
    """One model's replicas. `start()` once, `shutdown()` after its last stage."""

    def __init__(
        self,
        cfg: ModelConfig,
        log_dir: str | Path,
        on_event: Callable[[PoolEvent], None] | None = None,
        node_address: bool = False,
        placement_timeout_s: float | None = None,
    ) -> None:
        self.cfg = cfg
        # How long a replica's placement group may wait for a node (on Kubernetes: the
        # autoscaler's new pod and a cold image pull); None: the model's startup timeout.
        self.placement_timeout_s = placement_timeout_s or cfg.startup_timeout_s
        self.node_address = node_address  # serve on the node's address (clusters)
        # A local folder (made absolute: actors run elsewhere) or a URI (an object store:
        # each server's log is copied there as it grows).
        self.log_dir = str(Location.of(log_dir))
        self.on_event = on_event
        self.replicas: list[ReplicaState] = []
        self.directory: Any = None
        self.events: list[PoolEvent] = []
        self.nodes: list[str] = []  # the Ray node of each replica at start
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher: threading.Thread | None = None
        self._restarting: list[threading.Thread] = []

    # -- life cycle ------------------------------------------------------------------

    def start(self) -> list[str]:
        import ray
        from ray.util.placement_group import placement_group

        bundles = placement_bundles(self.cfg)
        self.replicas = [
            ReplicaState(i, placement_group(bundles, strategy="STRICT_PACK"))
            for i in range(self.cfg.replicas)
        ]
        try:
            self._wait_placed([r.group for r in self.replicas], bundles)
            for replica in self.replicas:
                self._spawn(replica)
            urls = self._wait_started([self._start_ref(r) for r in self.replicas])
        except BaseException as exc:
            self.shutdown()
            cause = getattr(exc, "cause", None)  # a RayTaskError carries the actor's error
            if isinstance(cause, ServerStartError):
                # One line for the console; Ray's traceback only in the log.
                log.debug("model %s: start-up failed:\n%s", self.cfg.name, exc)
                raise cause from None
            raise
        for replica, url in zip(self.replicas, urls, strict=True):
            replica.url, replica.state = url, "up"
        # Each started replica's actor answers at once (its node's id).
        self.nodes = [
            bounded_get(r.actor.node_id.remote(), 60, f"model {self.cfg.name}'s replica node")
            for r in self.replicas
        ]
        actor = ray.remote(ReplicaDirectoryImpl).options(num_cpus=0)
        self.directory = actor.remote(self.snapshot())
        self._watcher = threading.Thread(
            target=self._watch, name=f"pool-{self.cfg.name}", daemon=True
        )
        self._watcher.start()
        return urls

    @property
    def endpoints(self) -> list[str]:
        return [r.url or "" for r in self.replicas]

    def snapshot(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.view() for r in self.replicas]

    def stats(self) -> dict[str, int]:
        return {
            "replica_restarts": sum(1 for e in self.events if e.kind == "restarted"),
            "replica_failures": sum(1 for e in self.events if e.kind == "down"),
            "replicas_lost": sum(1 for r in self.replicas if r.state == "failed"),
        }

    def shutdown(self) -> None:
        """Take every replica out of routing, then stop the servers and free their
        placement groups (the model's last stage has ended: nothing is in flight)."""
        import ray
        from ray.util.placement_group import remove_placement_group

        self._stopping.set()
        with self._lock:
            for replica in self.replicas:
                replica.state = "stopped"
        self._publish()
        if self._watcher is not None:
            self._watcher.join(timeout=self.cfg.health_timeout_s + 5)
        for thread in self._restarting:
            thread.join(timeout=5)
        for replica in self.replicas:
            self._kill(replica, graceful=True)
            with contextlib.suppress(Exception):
                remove_placement_group(replica.group)
        if self.directory is not None:
            with contextlib.suppress(Exception):
                ray.kill(self.directory)
            self.directory = None

    # -- replicas --------------------------------------------------------------------

    def _wait_placed(self, groups: list[Any], bundles: list[dict[str, float]]) -> None:
        import ray

        timeout = self.placement_timeout_s
        ready, _ = ray.wait([g.ready() for g in groups], num_returns=len(groups), timeout=timeout)
        if len(ready) < len(groups):
            raise PlacementTimeout(
                f"model {self.cfg.name}: "
                + placement_message(
                    "replicas (their bundles on one node)",
                    len(groups) - len(ready),
                    len(groups),
                    timeout,
                    bundles,
                )
                + "; the cluster lacks the resources"
                + _custom_resource_hint(bundles)
            )

    def _wait_started(self, refs: list[Any]) -> list[str]:
        """The replicas' URLs once their servers answer; bounded: each server has its
        startup timeout, and an actor that never starts (its process not scheduled)
        ends the wait with the cluster's resources."""
        import ray

        timeout = self.cfg.startup_timeout_s + 60  # the server's own deadline, then ours
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
        if len(ready) < len(refs):
            raise PlacementTimeout(
                f"model {self.cfg.name}: "
                + placement_message(
                    "replica servers started (placed but not answering)",
                    len(refs) - len(ready),
                    len(refs),
                    timeout,
                    placement_bundles(self.cfg),
                )
            )
        return cast(list[str], ray.get(refs, timeout=0))  # ready: ray.wait said so

    def _spawn(self, replica: ReplicaState) -> None:
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundles = placement_bundles(self.cfg)

        def in_bundle(index: int) -> PlacementGroupSchedulingStrategy:
            return PlacementGroupSchedulingStrategy(
                replica.group, placement_group_bundle_index=index
            )

        head = bundles[0]
        custom = {k: v for k, v in head.items() if k not in ("CPU", "GPU")}
        replica.actor = (
            ray.remote(LlmServerImpl)
            .options(
                num_cpus=head.get("CPU", 0),
                num_gpus=head.get("GPU", 0),
                resources=custom,
                max_restarts=0,  # the pool restarts it (on a new port)
                scheduling_strategy=in_bundle(0),
            )
            .remote(self.cfg, self.log_dir, self.node_address)
        )
        # One lease per GPU bundle but the first (options() of an actor class returns a
        # wrapper with no options() of its own: all of them in one call).
        lease = ray.remote(GpuLeaseImpl)
        replica.leases = [
            lease.options(num_cpus=0, num_gpus=1, scheduling_strategy=in_bundle(i)).remote()
            for i in range(1, len(bundles))
        ]

    def _start_ref(self, replica: ReplicaState) -> Any:

        # The GPU-lease actors of a tensor-parallel replica: in its placement group (placed
        # with it), so each answers once started, within the placement deadline.
        what = f"the GPU leases of model {self.cfg.name}'s replica {replica.index}"
        more_gpus = [
            g
            for lease in replica.leases
            for g in bounded_get(lease.gpu_ids.remote(), self.placement_timeout_s, what, ["GPU"])
        ]
        return replica.actor.start.remote(more_gpus)

    def _kill(self, replica: ReplicaState, graceful: bool = False) -> None:
        import ray

        actor, replica.actor = replica.actor, None
        if actor is not None:
            if graceful:
                with contextlib.suppress(Exception):
                    ray.get(actor.stop.remote(), timeout=self.cfg.health_timeout_s + 25)
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)
        for lease in replica.leases:
            with contextlib.suppress(Exception):
                ray.kill(lease, no_restart=True)
        replica.leases = []

    def _publish(self) -> None:
        if self.directory is not None:
            with contextlib.suppress(Exception):
                self.directory.publish.remote(self.snapshot())

    def _event(self, replica: ReplicaState, kind: str, detail: str) -> None:
        event = PoolEvent(self.cfg.name, replica.index, kind, detail)
        self.events.append(event)
        log.warning("model %s replica %d %s: %s", self.cfg.name, replica.index, kind, detail)
        if self.on_event is not None:
            self.on_event(event)

    # -- health ------------------------------------------------------------------------

    def _watch(self) -> None:
        import ray

        while not self._stopping.wait(self.cfg.health_interval_s):
            try:
                self.poll_once()
            except BaseException as exc:  # Ray shutting down under us ends the watch
                if self._stopping.is_set() or not ray.is_initialized():
                    return
                log.warning("model %s: health poll failed: %s", self.cfg.name, exc)

    def poll_once(self) -> None:
        """One health poll of every serving replica (the watcher thread's step)."""
        import ray
        import ray.exceptions as ray_exceptions

        up = [r for r in self.replicas if r.state == "up" and r.actor is not None]
        if not up:
            return
        # The probe may take most of the poll's time: a busy server on a starved CPU
        # (llama.cpp generating on 2 cores) answers late, and is not down.
        probe_s = 0.8 * self.cfg.health_timeout_s
        refs = {r.actor.healthy.remote(probe_s): r for r in up}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=self.cfg.health_timeout_s)
        for ref, replica in refs.items():
            if self._stopping.is_set():
                return
            dead = ""
            if ref not in ready:
                problem = f"no health answer in {self.cfg.health_timeout_s:.0f} s"
            else:
                try:
                    ok = ray.get(ref, timeout=0)  # ready: ray.wait said so
                    problem = "" if ok else "its server fails its health check"
                except ray_exceptions.RayError as exc:  # the actor (or its node) died
                    problem = dead = f"{type(exc).__name__}: {str(exc)[:200]}"
            if not problem:
                replica.failed_polls = 0
                continue
            replica.failed_polls += 1
            if dead or replica.failed_polls >= self.cfg.health_failures:
                self._take_down(replica, problem)

    def _take_down(self, replica: ReplicaState, problem: str) -> None:
        with self._lock:
            if replica.state != "up":
                return
            replica.state = "restarting"
        self._publish()  # out of routing before anything else
        self._event(replica, "down", problem)
        thread = threading.Thread(target=self._restart, args=(replica,), daemon=True)
        self._restarting.append(thread)
        thread.start()

    def _restart(self, replica: ReplicaState) -> None:
        import ray

        self._kill(replica, graceful=True)  # a hung server is stopped, not left behind
        last = ""
        while replica.restarts < self.cfg.max_restarts:
            delay = self.cfg.restart_backoff_s * 2**replica.restarts
            replica.restarts += 1
            if self._stopping.wait(delay):
                return
            try:
                self._wait_placed([replica.group], placement_bundles(self.cfg))
                self._spawn(replica)
                url = cast(
                    str, ray.get(self._start_ref(replica), timeout=self.cfg.startup_timeout_s + 30)
                )
            except Exception as exc:
                last = f"{type(exc).__name__}: {str(exc)[:300]}"
                log.warning(
                    "model %s replica %d restart failed: %s", self.cfg.name, replica.index, last
                )
                self._kill(replica)
                continue
            if self._stopping.is_set():
                self._kill(replica, graceful=True)
                return
            with self._lock:
                replica.url, replica.state, replica.failed_polls = url, "up", 0
                replica.generation += 1
            self._publish()
            self._event(replica, "restarted", f"restart {replica.restarts} at {url}")
            return
        with self._lock:
            replica.state = "failed"
        self._publish()
        self._event(replica, "failed", f"gave up after {replica.restarts} restarts; {last}")


def start_pool(
    cfg: ModelConfig,
    log_dir: str | Path = "distillery_logs",
    on_event: Callable[[PoolEvent], None] | None = None,
    node_address: bool = False,
    placement_timeout_s: float | None = None,
) -> ModelServerPool:
    """Start a launched model's replicas (Ray must be initialised). `node_address`:
    servers listen on their node's address (a multi-node cluster), not loopback;
    `placement_timeout_s`: how long replicas may wait for room (the cluster's)."""
    if not cfg.launched:
        raise ValueError(f"backend {cfg.backend!r} is not launched by distillery")
    pool = ModelServerPool(cfg, log_dir, on_event, node_address, placement_timeout_s)
    started = time.perf_counter()
    pool.start()
    log.info(
        "model %s: %d replicas up in %.1f s", cfg.name, cfg.replicas, time.perf_counter() - started
    )
    return pool
