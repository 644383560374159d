"""A sweep's memory stages: banks built from a stage's episodes (or rendered from a
built bank), checked against the store before reuse, and the memory service actor that
owns the store. The `build` and `render` kinds' runners (`stages.BuildStage.run`,
`RenderStage.run`) and any kind that writes a bank use it through the sweep
(`sweep.memory`); it has its own collaborators (the ledger, the server pool, the
sweep's tasks and its progress lines), never the sweep itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, cast

from distillery.orchestrator.execution.dispatch import ray_get
from distillery.orchestrator.stages.stage import (
    BankSource,
    BankStage,
    BuildStage,
    RenderStage,
    StageKey,
    digest_of,
)
from distillery.orchestrator.state.ledger import BankOutput
from distillery.workers.memory.bounds import bound_bank, memory_delimiters
from distillery.workers.memory.method import own_embedder
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory_service import (
    BuiltBank,
    MemoryJob,
    MemoryServiceImpl,
    build_task,
    render_task,
)
from distillery.workers.placement import PlacementTimeout, WaitTimeout, placement_message
from distillery.workers.trajectories import read_episode_file, record_from_row

if TYPE_CHECKING:
    from ray.actor import ActorProxy

    from distillery.orchestrator.core.config import ClusterConfig, DistilleryConfig
    from distillery.orchestrator.execution.server_pool import ServerPool
    from distillery.orchestrator.stages.stage import MemoryRead, Stage
    from distillery.orchestrator.state.ledger import Ledger
    from distillery.workers.envs.base import Task
    from distillery.workers.memory.config import EmbedderConfig
    from distillery.workers.memory.retrieval import Isolation

# A Ray task body that makes a bank: `build_task` or `render_task` of the memory service.
BankBody = Callable[..., Coroutine[Any, Any, BuiltBank]]

log = logging.getLogger(__name__)

# CPUs of the memory service actor and of one bank build task (ours: the service mostly
# waits on the store; a build runs an embedder and its builder model's calls).
SERVICE_CPUS = 0.25
BUILD_CPUS = 0.5
# Deadlines (ours): one answer of the memory service (the longest, a bank's write,
# embeds tens of thousands of entries), and one bank build, placed and run (the paper's
# largest builds are a few hours of builder calls). Past one, one line and exit 2.
SERVICE_CALL_TIMEOUT_S = 1800.0
BUILD_TIMEOUT_S = 12 * 3600.0


def service_options(cluster: ClusterConfig, num_cpus: float) -> dict[str, Any]:
    """Ray options of the memory service (and a bank build): its CPUs and the cluster's
    resource for them (`ClusterConfig.service_resources`: never a GPU pod)."""
    return {"num_cpus": num_cpus, "resources": cluster.service_resources(num_cpus)}


class MemoryStage:
    """Builds banks (once per stage key and content hash); owns the memory service."""

    def __init__(
        self,
        cfg: DistilleryConfig,
        ledger: Ledger,
        servers: ServerPool,
        tasks: Mapping[str, Task],
        say: Callable[[str], None],
        line: Callable[[Stage], str],
    ) -> None:
        self.cfg = cfg  # the sweep's runtime (store, embedder): shared by its points
        self.ledger = ledger
        self.servers = servers
        self.tasks = tasks
        self.say = say
        self.line = line  # a stage's label for progress lines
        self._service: ActorProxy[MemoryServiceImpl] | None = None
        self._starting = threading.Lock()  # stages running at once start one service

    @property
    def service(self) -> ActorProxy[MemoryServiceImpl]:
        """The memory service actor (started now, on first use)."""
        with self._starting:
            return self._started_service()

    def _started_service(self) -> ActorProxy[MemoryServiceImpl]:
        if self._service is None:
            import ray

            cfg = self.cfg
            root = self.ledger.root  # a remote root without a store: preflight
            default_path = str(root / "qdrant") if root.is_local else ""
            options = service_options(cfg.cluster, SERVICE_CPUS)
            actor = ray.remote(MemoryServiceImpl).options(**options, max_concurrency=1)
            service = actor.remote(cfg.memory.store, cfg.memory.embedder, default_path)
            timeout = cfg.cluster.placement_timeout_s
            try:  # placed and its store open within the cluster's placement deadline
                ray_get(service.ready.remote(), timeout_s=timeout, what="the memory service")
            except WaitTimeout:
                ray.kill(cast(Any, service))
                each = {"CPU": SERVICE_CPUS, **cfg.cluster.service_resources(SERVICE_CPUS)}
                raise PlacementTimeout(
                    placement_message("memory service", 1, 1, timeout, [each])
                ) from None
            self._service = service
        return self._service

    def close(self) -> None:
        """Release the store (embedded Qdrant holds a lock on its folder) and the actor."""
        if self._service is None:
            return
        import ray

        service, self._service = self._service, None
        try:
            ray.get(service.close.remote(), timeout=60)
        finally:
            ray.kill(cast(Any, service))

    def call(self, method: str, *args: Any) -> Any:
        """The memory service's answer to `method(*args)`, within SERVICE_CALL_TIMEOUT_S."""
        remote = getattr(self.service, method)
        return ray_get(
            remote.remote(*args),
            timeout_s=SERVICE_CALL_TIMEOUT_S,
            what=f"the memory service's answer to {method}",
        )

    def read_job(self, read: MemoryRead, max_injected_chars: int) -> MemoryJob:
        """What an episode worker needs to let its student read `read`'s bank (opened
        in the service now; `max_injected_chars`: what one hook call may inject, the
        point's `memory.bounds`); a method without a bank gets a job with none."""
        if read.bank_stage is None:
            return MemoryJob(
                None, None, read.isolation, read.settings, read.kind, max_injected_chars
            )
        bank_id = self.bank_of(read.bank_stage)
        # The embedder the bank was written with (a method's own, or the sweep's).
        own = own_embedder(memory_method(read.kind), read.settings)
        self.call("open_bank", bank_id, read.isolation, own)
        return MemoryJob(
            self.service, bank_id, read.isolation, read.settings, read.kind, max_injected_chars
        )

    def put_view(
        self,
        view_id: str,
        bank: BuiltBank,
        isolation: Isolation,
        embedder: EmbedderConfig | None = None,
    ) -> None:
        """A live view (a bank a stage is still writing) searchable as `view_id`
        (`embedder`: its method's own; None: the sweep's)."""
        self.call("put_view", view_id, bank, isolation, embedder)

    def drop_views(self, prefix: str) -> None:
        self.call("drop_views", prefix)

    def bank_of(self, key: StageKey) -> str:
        output = self.ledger.output(key)
        if output is None:
            raise RuntimeError(f"{key} has not produced a bank")
        return output.bank_id

    def ensure(self, stage: BankStage, prefix: str, make: Callable[[], BankOutput]) -> bool:
        """Make the stage's bank (`make`: its kind's build) unless the ledger and the
        store have it."""
        ledger = self.ledger
        output = ledger.output(stage.key)
        if output is not None:
            damage = self.damage(output)
            if damage is None:
                self.say(f"{prefix} {stage.key} cached: bank {output.bank_id[:16]}")
                return False
            # The store lost (part of) a finished bank: never trust it, build it again.
            message = f"{stage.key}: bank {output.bank_id[:16]} is damaged ({damage})"
            log.warning("%s; rebuilding it", message)
            self.say(f"{prefix} {message}; rebuilding")
            self.call("drop_bank", output.bank_id)
        self.say(f"{prefix} {stage.key} building  {self.line(stage)}")
        ledger.record_output(stage.key, make())
        return True

    def damage(self, output: BankOutput) -> str | None:
        """What is wrong with a recorded bank in the store (None: it is whole): its
        collections must exist, be complete, and hold the entries the build recorded."""
        if not self.call("has_bank", output.bank_id):
            return "its collections are missing or incomplete in the store"
        stored = self.call("bank_counts", output.bank_id)
        recorded = output.counts
        # `stored` counts each of the bank's collections; the recorded counts also hold
        # totals of other things (trajectories, embedded_chars), not compared.
        wrong = [
            f"{t}: {n} entries, the build recorded {recorded[t]}"
            for t, n in stored.items()
            if t in recorded and n != recorded[t]
        ]
        return "; ".join(wrong) or None

    def reused(self, bank_id: str) -> BankOutput | None:
        """The output of an equal bank already in the store (None: there is none)."""
        if not self.call("has_bank", bank_id):
            return None
        counts = self.call("bank_counts", bank_id)
        return BankOutput(bank_id, counts, reused=True)

    def written(
        self, bank_id: str, bank: BuiltBank, embedder: EmbedderConfig | None = None
    ) -> BankOutput:
        """Store a bank just made (`embedder`: its method's own; None: the sweep's);
        its output (entry counts and the build's stats)."""
        counts = self.call("write_bank", bank_id, bank, embedder)
        return BankOutput(bank_id, counts, dict(bank.stats))

    def build(self, stage: BuildStage) -> BankOutput:
        source = stage.source
        cfg = source.cfg
        finished = self.ledger.episodes(source.source)
        episodes = []
        for task_id in source.task_ids:
            summary = finished.get(task_id)
            if summary is None:
                raise RuntimeError(f"{source.source} has no finished episode for {task_id}")
            table = read_episode_file(summary.file)
            episodes.extend(record_from_row(row) for row in table.to_pylist())
        builder_model = source.builder_model
        model_name = builder_model.name if builder_model else "none"
        bank_id = digest_of(
            {
                "content": memory_method(source.kind).bank_id(
                    episodes, cfg.memory, model_name, source.split
                ),
                "embedder": stage.identity["embedder"],
                # Bounds off their defaults make other entries (absent: the keys of old).
                **({"bounds": stage.identity["bounds"]} if "bounds" in stage.identity else {}),
            }
        )
        reused = self.reused(bank_id)
        if reused is not None:
            return reused
        tasks = [self.tasks[e.task_id] for e in episodes]
        bank = self._run_built(
            stage.key, source, build_task, source.kind, episodes, tasks, source.split
        )
        return self.written(bank_id, bank)

    def render(self, stage: RenderStage) -> BankOutput:
        base_id = self.bank_of(stage.base)
        source = stage.source
        text_id = digest_of({"bank": base_id, "render": stage.identity})
        reused = self.reused(text_id)
        if reused is not None:
            return reused
        base = self.call("load_bank", base_id)
        bank = self._run_built(stage.key, source, render_task, source.kind, base)
        return self.written(text_id, bank)

    def _run_built(
        self, key: StageKey, source: BankSource, body: BankBody, *args: Any
    ) -> BuiltBank:
        """Run a build body as a Ray task next to the builder model's servers."""
        import ray

        cfg = source.cfg
        model = source.builder_model
        remote: Any = ray.remote(**service_options(self.cfg.cluster, BUILD_CPUS))(_run_async)
        if model is None:  # deterministic entries, no server needed
            bank = ray_get(
                remote.remote(body, *args, cfg.memory.builder, None, []),
                timeout_s=BUILD_TIMEOUT_S,
                what=f"the bank build of {key}",
            )
        else:
            endpoints = self.servers.endpoints(model)
            # The build calls its builder model for as long as it runs (serving time).
            with self.servers.calling(model, key):
                bank = ray_get(
                    remote.remote(body, *args, cfg.memory.builder, model, endpoints),
                    timeout_s=BUILD_TIMEOUT_S,
                    what=f"the bank build of {key}",
                )
        # Builder output is model output: every method's entries within the same bounds.
        return bound_bank(bank, cfg.memory.bounds, memory_delimiters(source.kind))


def _run_async(body: BankBody, *args: Any) -> BuiltBank:
    """A Ray task body for a coroutine function (Ray tasks cannot be `async def`)."""
    import asyncio

    from distillery import redaction

    # The last three arguments are the builder config, its model and endpoints.
    redaction.protect(list(args[-3:]))

    return asyncio.run(body(*args))
