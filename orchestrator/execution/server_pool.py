"""The model servers of a sweep: each model's replica pool, started for the first stage
that uses it and stopped after the last.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from distillery.orchestrator.planning.plan import StageGraph, server_key
from distillery.orchestrator.stages.stage import StageKey
from distillery.workers.llm.config import ModelConfig
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
        if key not in self._running:
            from distillery.workers.llm.pool import start_pool

            def report(event: Any) -> None:
                self.say(
                    f"  model {event.model} replica {event.replica} {event.kind}: {event.detail}"
                )

            pool = start_pool(
                self.placed(model),
                self.log_dir,
                report,
                self.node_address,
                self.placement_timeout_s,
            )
            self.say(
                f"  model {model.name}: {model.replicas} replicas on {len(set(pool.nodes))} nodes"
            )
            self._running[key] = pool
        return self._running[key]

    def placed(self, model: ModelConfig) -> ModelConfig:
        """The model as this cluster places it: a vLLM replica reserves its GPU group's
        resource (cluster.gpu_node_resource). Placement only: not the stage identity."""
        if model.backend != "vllm":
            return model
        extra = self.graph.configs[0].cluster.replica_resources(model.gpus_per_server)
        if not extra:
            return model
        return model.model_copy(update={"server_resources": {**model.server_resources, **extra}})

    def gpus(self, model: ModelConfig | None) -> float:
        return gpus_of(model)

    def stats(self) -> Counter[str]:
        """Replica failures and restarts so far, for the logs and MLflow."""
        total = Counter(self.stopped_stats)
        for pool in self._running.values():
            total.update(pool.stats())
        return total

    def release_unused(self, remaining: list[StageKey]) -> None:
        """Stop the servers of models no remaining stage uses."""
        still = {
            server_key(model) for k in remaining for model in self.graph.stages[k].models.values()
        }
        for key in list(self._running):
            if key not in still:
                self._stop(key)

    def _stop(self, key: str) -> None:
        pool = self._running.pop(key)
        self.stopped_stats.update(pool.stats())
        pool.shutdown()

    def close(self) -> None:
        for key in list(self._running):
            self._stop(key)


def gpus_of(model: ModelConfig | None) -> float:
    """The GPUs a model's servers hold (vLLM replicas; 0 for what distillery does not
    launch on GPUs)."""
    if model is None or model.backend != "vllm":
        return 0.0
    return float(model.replicas * max(model.gpus_per_server, 1))
