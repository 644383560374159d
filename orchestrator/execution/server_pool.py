"""The model servers of a sweep: each model's replica pool, started for the first stage
that uses it and stopped after the last; with several stages in flight, safe to use from
each stage's thread (one start per model, however many stages ask at once; a start that
failed is not tried again by every later stage of the model: they fail with its error).
It keeps each pool's hours up (`held`): GPU time is charged from the start of a model's
servers to their stop, whether or not a stage was sending them requests.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

from distillery.orchestrator.execution.gpu_time import ModelGpuTime, ServingClock
from distillery.orchestrator.planning.plan import StageGraph, server_key
from distillery.orchestrator.stages.stage import StageKey
from distillery.workers.llm.config import ModelConfig, gpus_of
from distillery.workers.storage import Location


class ServerPool:
    """Each model's replica pool starts once for every stage that uses it, and stops
    after the last one (so a teacher's GPUs are free before the students' stages)."""

    def __init__(self, graph: StageGraph, log_dir: Location, say: Callable[[str], None]) -> None:
        self.graph = graph
        # Joined cluster: servers listen on their node's address for workers elsewhere.
        self.node_address = graph.configs[0].cluster.joins
        # A joined cluster may grow (an autoscaler, a cold image pull): its placement
        # deadline; a private Ray has what it has (the model's startup timeout).
        cluster = graph.configs[0].cluster
        self.placement_timeout_s = cluster.placement_timeout_s if cluster.joins else None
        # The servers' logs: in the sweep's folder, on the output root's filesystem (an
        # object store too: copied there as they grow, so they outlive GPU pods).
        self.log_dir = log_dir.uri
        self.say = say
        self._running: dict[str, Any] = {}  # server key -> ModelServerPool
        self.stopped_stats: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._starting: dict[str, threading.Lock] = {}  # server key -> its start's lock
        self._failed: dict[str, BaseException] = {}  # server key -> why its start failed
        # Stages not yet ended, per server key: its servers stop when the last one ends.
        self._users: Counter[str] = Counter()
        for stage in graph.stages.values():
            for model in stage.models.values():
                self._users[server_key(model)] += 1
        # server key -> [(model, started, stopped or None)]: when its servers were up.
        self.held: dict[str, list[tuple[ModelConfig, float, float | None]]] = {}
        # What each stage has in flight on each model's servers (their serving time).
        self.serving = ServingClock(self._gpus_of_server, clock=lambda: time.time())

    def endpoints(self, model: ModelConfig) -> list[str]:
        if model.backend == "oracle":
            return []
        if model.backend == "external":
            return [model.base_url or ""]
        return list(self._pool(model).endpoints)

    def directory(self, model: ModelConfig) -> Any:
        """The pool's replica directory actor (None for models distillery does not launch)."""
        return self._pool(model).directory if model.launched else None

    def _pool(self, model: ModelConfig) -> Any:
        key = server_key(model)
        with self._lock:
            if key in self._running:
                return self._running[key]
            starting = self._starting.setdefault(key, threading.Lock())
        with starting:  # a second stage of the model waits for the first one's start
            with self._lock:
                if key in self._running:
                    return self._running[key]
                if key in self._failed:
                    raise self._failed[key]
            try:
                pool = self._start(model)
            except BaseException as exc:
                with self._lock:
                    self._failed[key] = exc
                raise
            with self._lock:
                self._running[key] = pool
                self.held.setdefault(key, []).append((model, time.time(), None))
            return pool

    def _start(self, model: ModelConfig) -> Any:
        from distillery.workers.llm.pool import start_pool

        def report(event: Any) -> None:
            self.say(f"  model {event.model} replica {event.replica} {event.kind}: {event.detail}")

        pool = start_pool(
            self.placed(model),
            self.log_dir,
            report,
            self.node_address,
            self.placement_timeout_s,
        )
        self.say(f"  model {model.name}: {model.replicas} replicas on {len(set(pool.nodes))} nodes")
        return pool

    def placed(self, model: ModelConfig) -> ModelConfig:
        """The model as this cluster places it: a vLLM replica reserves its GPU group's
        resource (cluster.gpu_node_resource); a llama.cpp replica (CPUs only) the cpu
        group's (cluster.worker_resource, as the memory service: never a GPU pod, whose
        CPU belongs to its vLLM replica, nor a grading pod). Placement only: not the
        stage identity. A private local Ray has neither: unchanged."""
        cluster = self.graph.configs[0].cluster
        if model.backend == "vllm":
            extra = cluster.replica_resources(model.gpus_per_server)
        elif model.backend == "llama_cpp":
            extra = cluster.service_resources(model.server_num_cpus)
        else:
            return model
        if not extra:
            return model
        return model.model_copy(update={"server_resources": {**model.server_resources, **extra}})

    def gpus(self, model: ModelConfig | None) -> float:
        return gpus_of(model)

    def stats(self) -> Counter[str]:
        """Replica failures and restarts so far, for the logs and MLflow."""
        with self._lock:
            total = Counter(self.stopped_stats)
            running = list(self._running.values())
        for pool in running:
            total.update(pool.stats())
        return total

    def stage_ended(self, key: StageKey) -> None:
        """A stage ended (ran, was cached, failed or will not run): the servers of a
        model no stage still to end uses stop now."""
        with self._lock:
            for model in self.graph.stages[key].models.values():
                self._users[server_key(model)] -= 1
            idle = [k for k in self._running if self._users[k] <= 0]
        for server in idle:
            self._stop(server)

    def release_unused(self, remaining: Iterable[StageKey]) -> None:
        """Stop the servers of models no stage in `remaining` uses."""
        still = {
            server_key(model) for k in remaining for model in self.graph.stages[k].models.values()
        }
        with self._lock:
            idle = [k for k in self._running if k not in still]
        for server in idle:
            self._stop(server)

    def _stop(self, key: str) -> None:
        with self._lock:
            pool = self._running.pop(key, None)
            if pool is None:
                return
            spans = self.held[key]
            model, started, _ = spans[-1]
            spans[-1] = (model, started, time.time())
        self.stopped_stats.update(pool.stats())
        pool.shutdown()

    def _gpus_of_server(self, key: str) -> float:
        with self._lock:
            spans = self.held.get(key)
        return gpus_of(spans[0][0]) if spans else 0.0

    def gpu_time(self) -> list[ModelGpuTime]:
        """Each started model's GPU time so far in this invocation: held and serving."""
        now = time.time()
        with self._lock:
            held = {k: list(v) for k, v in self.held.items()}
        out = []
        for key, spans in held.items():
            model = spans[0][0]
            up = sum((end or now) - start for _, start, end in spans)
            serving = min(up, self.serving.serving_s(key))
            out.append(ModelGpuTime(model.name, gpus_of(model), up, serving))
        return sorted(out, key=lambda t: t.model)

    def in_flight(self, model: ModelConfig, key: StageKey, n: int) -> None:
        """Stage `key` has `n` requests (episodes) in flight on `model`'s servers now."""
        self.serving.set(server_key(model), (server_key(model), key), n)

    def calling(self, model: ModelConfig, key: StageKey) -> AbstractContextManager[None]:
        """A block in which stage `key` has one more call in flight on `model`'s servers."""
        return self.serving.serving(server_key(model), (server_key(model), key))

    def stage_gpu_s(self, key: StageKey) -> dict[str, float]:
        """The stage's share of each of its models' serving GPU-seconds, by model name."""
        out: dict[str, float] = {}
        for model in self.graph.stages[key].models.values():
            out[model.name] = out.get(model.name, 0.0) + self.serving.stage_gpu_s(
                (server_key(model), key)
            )
        return out

    def held_gpu_s(self, key: str, now: float | None = None) -> float:
        """GPU-seconds the model's servers have been up (until now while they run)."""
        now = time.time() if now is None else now
        with self._lock:
            spans = list(self.held.get(key, []))
        return sum(gpus_of(m) * ((end or now) - start) for m, start, end in spans)

    def close(self) -> None:
        with self._lock:
            running = list(self._running)
        for key in running:
            self._stop(key)
