"""The driver: sweep points -> a stage graph -> Ray workers and model servers ->
a ledger of Parquet episodes and banks under the output root -> MLflow.

Re-running the same command resumes: every finished stage and every finished episode
recorded in the ledger is reused, and only what is missing runs.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from distillery.orchestrator.config import ClusterConfig, DistilleryConfig, MethodConfig
from distillery.orchestrator.descriptors import name_sweep
from distillery.orchestrator.dispatch import INFRA_COUNTS, ray_get, run_agent
from distillery.orchestrator.ledger import Ledger, read_sweep_record
from distillery.orchestrator.locks import run_locks
from distillery.orchestrator.metrics import agent_metrics
from distillery.orchestrator.plan import (
    BankSource,
    EvalPoint,
    StageGraph,
    format_plan,
    plan_sweep,
    server_key,
    stage_line,
    stage_status,
)
from distillery.orchestrator.preflight import check_run
from distillery.orchestrator.protocols import TaskSplit
from distillery.orchestrator.stages import Stage, StageKey, digest_of, effective_seed
from distillery.orchestrator.tracking import EvalDataset, Tracker, safe_params, ui_hint
from distillery.redaction import install as install_redaction
from distillery.redaction import redact, redact_obj, register_secrets, secrets_in
from distillery.workers.envs.base import Task
from distillery.workers.episodes import AgentJob, EpisodeSummary
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.bank import BuiltBank, bank_id_for
from distillery.workers.memory.records import MEMORY_TYPES
from distillery.workers.memory_service import (
    MemoryJob,
    MemoryServiceImpl,
    build_bank_task,
    render_text_task,
)
from distillery.workers.storage import Location
from distillery.workers.trajectories import (
    EpisodeRecord,
    read_episode_file,
    read_episode_file_bytes,
    record_from_row,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class MethodResult:
    name: str
    method: MethodConfig
    role: str  # whose episodes: teacher | student
    model: ModelConfig
    episodes_dir: Path | str  # a local Path, or the URI of a remote output root
    summaries: list[EpisodeSummary]  # the evaluated split only
    metrics: dict[str, float]
    mlflow_run_id: str | None
    point_id: str = ""
    stage: str = ""  # the episode stage scored, e.g. evaluate:1f2e...
    descriptor: str = ""  # what tells this point from the sweep's others: "k_st=3 seed=1"


@dataclass(frozen=True)
class RunResult:
    """One sweep point (one composed config): its methods' results."""

    run_id: str  # the sweep id
    run_dir: Path | str  # the sweep's folder under the output root
    split: TaskSplit
    methods: list[MethodResult]
    parent_run_id: str | None
    tracking_uri: str

    @property
    def task_ids(self) -> list[str]:
        return list(self.split.eval_ids)

    def method(self, name: str) -> MethodResult:
        return next(m for m in self.methods if m.name == name)


@dataclass(frozen=True)
class SweepResult:
    sweep_id: str
    sweep_dir: Path | str
    points: list[RunResult]  # one per sweep point, in order
    stages_run: int
    stages_cached: int
    parent_run_id: str | None
    tracking_uri: str


def sweep_id_for(graph: StageGraph) -> str:
    """The same sweep (same points) resumes into the same folder and MLflow parent."""
    first = graph.configs[0]
    if first.run_name:
        return first.run_name
    return f"{first.experiment.name}-{digest_of(sorted(graph.points))[:10]}"


def _local(location: Location) -> Path | str:
    return location.local_path if location.is_local else location.uri


class Sweep:
    """Runs a stage graph: each stage once, each missing episode once, then logs."""

    def __init__(self, graph: StageGraph, progress: bool = True) -> None:
        self.graph = graph
        self.progress = progress
        self.cfg = graph.configs[0]  # runtime knobs are shared by all points
        self.ledger = Ledger(self.cfg.output_dir)
        self.sweep_id = sweep_id_for(graph)
        self.sweep_dir = self.ledger.sweep_dir(self.sweep_id)
        self.memory = MemoryStage(self)
        self.servers = ServerPool(graph, self.sweep_dir / "logs", self._say)
        self.infra: Counter[str] = Counter()  # what was retried, for logs and MLflow
        self.names = name_sweep(graph)
        self.stages_run = 0
        self.stages_cached = 0

    # -- stages --------------------------------------------------------------------

    def run_stages(self) -> None:
        order = sorted(
            self.graph.stages,
            key=lambda k: (self.graph.depth(k), self._model_order(k)),
        )
        for index, key in enumerate(order, 1):
            stage = self.graph.stages[key]
            self.ledger.describe(stage)
            started = time.perf_counter()
            if stage.plays_episodes:
                ran = self._play(stage, f"[{index}/{len(order)}]")
            else:
                ran = self.memory.ensure(stage, f"[{index}/{len(order)}]")
            if ran:
                self.stages_run += 1
                wall = time.perf_counter() - started
                self.ledger.record_run(key, wall, wall * self.servers.gpus(stage.model))
            else:
                self.stages_cached += 1
            self.servers.release_unused(order[index:])

    def _model_order(self, key: StageKey) -> str:
        model = self.graph.stages[key].model
        return server_key(model) if model else ""

    def _play(self, stage: Stage, prefix: str) -> bool:
        needed = self.graph.needs.get(stage.key, set())
        done = self.ledger.episodes(stage.key)
        missing = longest_first(sorted(needed - set(done), key=_task_order), self.graph.tasks)
        if not missing:
            self._say(f"{prefix} {stage.key} cached: {len(needed)} episodes  {self.line(stage)}")
            return False
        self._say(
            f"{prefix} {stage.key} running {len(missing)} episodes "
            f"({len(needed) - len(missing)} cached)  {self.line(stage)}"
        )
        cfg = self._config_of(stage)
        model = cfg.teacher if stage.role == "teacher" else cfg.student
        memory = None
        if stage.key in self.graph.memory_of:
            bank_stage, isolation, retrieval = self.graph.memory_of[stage.key]
            bank_id = self.memory.bank_of(bank_stage)
            ray_get(self.memory.service.open_bank.remote(bank_id, isolation))
            memory = MemoryJob(self.memory.service, bank_id, isolation, retrieval)
        seed = effective_seed(model, cfg.seed if stage.role == "student" else 0)
        job = AgentJob(
            run_id=self.sweep_id,
            stage=stage.key.kind,
            role=stage.role,
            model=model.model_copy(update={"seed": seed}),
            benchmark=cfg.benchmark.name,
            episodes_dir=self.ledger.episodes_dir(stage.key).uri,
            max_steps_per_turn=cfg.benchmark.max_steps_per_turn,
            episode_timeout_s=cfg.agent.episode_timeout_s,
            episode_retries=cfg.agent.episode_retries,
            retry_backoff_s=cfg.agent.retry_backoff_s,
            memory=memory,
            options=cfg.agent.options(),
        )
        endpoints = self.servers.endpoints(model)
        run = run_agent(
            job,
            endpoints,
            missing,
            self.cfg.cluster,
            self.progress,
            on_summary=lambda s: self.ledger.record_episode(stage.key, s),
            directory=self.servers.directory(model),
            desc=f"{stage.key.kind} {stage.role}:{model.name} {self.names.stage(stage.key)}".strip(),
        )
        self.infra.update(run.infra)
        return True

    def _config_of(self, stage: Stage) -> DistilleryConfig:
        """A sweep point's config that uses this stage (all agree on its identity)."""
        for point in self.graph.points.values():
            if stage.key in point.upstream:
                return point.cfg
        return self.cfg

    def line(self, stage: Stage) -> str:
        return stage_line(self.graph, stage.key, self.names)

    def _say(self, text: str) -> None:
        if self.progress:
            tqdm.write(text)

    # -- results -------------------------------------------------------------------

    def point_summaries(self, point: EvalPoint) -> list[EpisodeSummary]:
        records = self.ledger.all_records(point.stage)
        missing = [t for t in point.split.eval_ids if t not in records]
        if missing:
            raise RuntimeError(f"{point.stage} has no episode for {missing[:3]}...")
        return [records[t] for t in point.split.eval_ids]

    def point_records(self, summaries: list[EpisodeSummary]) -> list[EpisodeRecord]:
        """The full episode records of a point's evaluated tasks: the files the ledger
        names (a stray or damaged file in the folder is no episode of the point)."""
        out = []
        for summary in summaries:
            if not summary.file:
                continue
            try:
                rows = read_episode_file_bytes(Location.of(summary.file).read_bytes())
            except Exception as exc:  # pyarrow raises several kinds on a damaged file
                log.warning("episode file %s is unreadable (%s); skipped", summary.file, exc)
                continue
            out.extend(r for r in rows if r.task_id == summary.task_id)
        return out

    def point_metrics(
        self, point: EvalPoint, summaries: list[EpisodeSummary], records: list[EpisodeRecord]
    ) -> dict:
        metrics = agent_metrics(summaries)
        if point.bank_stage is not None:
            metrics.update(memory_metrics(records))
            output = self.ledger.output(point.bank_stage) or {}
            metrics.update({f"bank_{t}": float(n) for t, n in output.get("counts", {}).items()})
            metrics.update(
                {
                    f"build.{k.replace(':', '.')}": float(v)
                    for k, v in output.get("stats", {}).items()
                }
            )
        return metrics


class ServerPool:
    """Each model's replica pool starts once for every stage that uses it, and stops
    after the last one (so a teacher's GPUs are free before the students' stages)."""

    def __init__(self, graph: StageGraph, log_dir: Location, say: Callable[[str], None]) -> None:
        self.graph = graph
        # Joined cluster: servers listen on their node's address for workers elsewhere.
        self.node_address = graph.configs[0].cluster.ray_address is not None
        self.log_dir = Path(log_dir.uri) if log_dir.is_local else Path("distillery_logs")
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

            pool = start_pool(model, self.log_dir, report, self.node_address)
            self.say(
                f"  model {model.name}: {model.replicas} replicas on {len(set(pool.nodes))} nodes"
            )
            self._running[key] = pool
        return self._running[key]

    def gpus(self, model: ModelConfig | None) -> float:
        if model is None or model.backend != "vllm":
            return 0.0
        return float(model.replicas * max(model.gpus_per_server, 1))

    def stats(self) -> Counter[str]:
        """Replica failures and restarts so far, for the logs and MLflow."""
        total = Counter(self.stopped_stats)
        for pool in self._running.values():
            total.update(pool.stats())
        return total

    def release_unused(self, remaining: list[StageKey]) -> None:
        """Stop the servers of models no remaining stage uses."""
        still = {
            server_key(self.graph.stages[k].model)  # type: ignore[arg-type]
            for k in remaining
            if self.graph.stages[k].model is not None
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


class MemoryStage:
    """Builds banks (once per stage key and content hash); owns the memory service."""

    def __init__(self, sweep: Sweep) -> None:
        self.sweep = sweep
        self._service: Any = None

    @property
    def service(self) -> Any:
        if self._service is None:
            import ray

            cfg = self.sweep.cfg
            root = self.sweep.ledger.root  # a remote root without a store: preflight
            default_path = str(root / "qdrant") if root.is_local else ""
            actor = ray.remote(MemoryServiceImpl).options(num_cpus=0.25, max_concurrency=1)
            self._service = actor.remote(cfg.memory.store, cfg.memory.embedder, default_path)
            ray_get(self._service.ready.remote())
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
            ray.kill(service)

    def bank_of(self, key: StageKey) -> str:
        output = self.sweep.ledger.output(key)
        if output is None:
            raise RuntimeError(f"{key} has not produced a bank")
        return output["bank_id"]

    def ensure(self, stage: Stage, prefix: str) -> bool:
        """Build (or render) the stage's bank unless the ledger and the store have it."""
        ledger = self.sweep.ledger
        output = ledger.output(stage.key)
        if output is not None:
            damage = self.damage(output)
            if damage is None:
                self.sweep._say(f"{prefix} {stage.key} cached: bank {output['bank_id'][:16]}")
                return False
            # The store lost (part of) a finished bank: never trust it, build it again.
            message = f"{stage.key}: bank {output['bank_id'][:16]} is damaged ({damage})"
            log.warning("%s; rebuilding it", message)
            self.sweep._say(f"{prefix} {message}; rebuilding")
            ray_get(self.service.drop_bank.remote(output["bank_id"]))
        self.sweep._say(f"{prefix} {stage.key} building  {self.sweep.line(stage)}")
        output = self._build(stage) if stage.key.kind == "build" else self._render(stage)
        ledger.record_output(stage.key, output)
        return True

    def damage(self, output: dict[str, Any]) -> str | None:
        """What is wrong with a recorded bank in the store (None: it is whole): its
        collections must exist, be complete, and hold the entries the build recorded."""
        bank_id = output["bank_id"]
        if not ray_get(self.service.has_bank.remote(bank_id)):
            return "its collections are missing or incomplete in the store"
        stored = ray_get(self.service.bank_counts.remote(bank_id))
        recorded = output.get("counts") or {}
        wrong = [
            f"{t}: {stored.get(t, 0)} entries, the build recorded {recorded[t]}"
            for t in MEMORY_TYPES
            if isinstance(recorded.get(t), int) and stored.get(t, 0) != recorded[t]
        ]
        return "; ".join(wrong) or None

    def _build(self, stage: Stage) -> dict[str, Any]:
        source = self.sweep.graph.bank_sources[stage.key]
        cfg = source.cfg
        ledger = self.sweep.ledger
        finished = ledger.episodes(source.source)
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
                "content": bank_id_for(
                    episodes, cfg.memory.builder, model_name, source.split, False
                ),
                "embedder": stage.identity["embedder"],
            }
        )
        if ray_get(self.service.has_bank.remote(bank_id)):
            counts = ray_get(self.service.bank_counts.remote(bank_id))
            return {"bank_id": bank_id, "counts": counts, "reused": True}
        tasks = [self.sweep.graph.tasks[e.task_id] for e in episodes]
        bank = self._run_built(source, build_bank_task, episodes, tasks, source.split, False)
        counts = ray_get(self.service.write_bank.remote(bank_id, bank))
        return {"bank_id": bank_id, "counts": counts, "stats": bank.stats.as_dict()}

    def _render(self, stage: Stage) -> dict[str, Any]:
        base_key = self.sweep.graph.render_base[stage.key]
        base_id = self.bank_of(base_key)
        source = self.sweep.graph.bank_sources[base_key]
        text_id = digest_of({"bank": base_id, "render": stage.identity})
        if ray_get(self.service.has_bank.remote(text_id)):
            counts = ray_get(self.service.bank_counts.remote(text_id))
            return {"bank_id": text_id, "counts": counts, "reused": True}
        base = ray_get(self.service.load_bank.remote(base_id))
        bank = self._run_built(source, render_text_task, base)
        counts = ray_get(self.service.write_bank.remote(text_id, bank))
        return {"bank_id": text_id, "counts": counts, "stats": bank.stats.as_dict()}

    def _run_built(self, source: BankSource, body: Any, *args: Any) -> BuiltBank:
        """Run a build body as a Ray task next to the builder model's servers."""
        import ray

        cfg = source.cfg
        model = source.builder_model
        remote = ray.remote(num_cpus=0.5)(_run_async)
        if model is None:  # deterministic entries, no server needed
            return ray_get(remote.remote(body, *args, cfg.memory.builder, None, []))
        endpoints = self.sweep.servers.endpoints(model)
        return ray_get(remote.remote(body, *args, cfg.memory.builder, model, endpoints))


def longest_first(task_ids: list[str], tasks: dict[str, Task]) -> list[str]:
    """Dispatch order: tasks with more user turns first (stable otherwise).

    With C slots the run ends when its last episode does; starting the long ones early
    keeps one long episode from running alone at the end (on BFCL at C=64 this raises
    the best possible speed-up from 0.79 to 0.89 of C for 200 episodes). Turn counts
    are what the agent sees anyway: no ground truth is used."""
    return sorted(task_ids, key=lambda t: -len(tasks[t].turns) if t in tasks else 0)


def _task_order(task_id: str) -> tuple:
    """Benchmark order (multi_turn_base_10 after _9), not string order."""
    head, _, tail = task_id.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (task_id, 0)


def memory_metrics(records: list[EpisodeRecord]) -> dict[str, float]:
    """Isolation audit and injection counts from the episodes' retrieval logs."""
    totals = {"isolation_violations": 0.0, "isolation_checked": 0.0}
    injected = {"wf": 0.0, "st": 0.0, "fn": 0.0}
    fallbacks = 0.0
    for record in records:
        if not record.extra_json:
            continue
        log = json.loads(record.extra_json)
        totals["isolation_violations"] += log.get("isolation_violations", 0)
        totals["isolation_checked"] += log.get("isolation_checked", 0)
        fallbacks += bool(log.get("decomposition_fallback"))
        for event in log.get("retrievals", []):
            if event.get("allowed"):
                injected[event["type"]] += 1
    return {
        **totals,
        **{f"injected_{t}": n for t, n in injected.items()},
        "decomposition_fallbacks": fallbacks,
    }


def _run_async(body: Any, *args: Any) -> Any:
    """A Ray task body for a coroutine function (Ray tasks cannot be `async def`)."""
    import asyncio

    from distillery import redaction

    # The last three arguments are the builder config, its model and endpoints.
    redaction.register_secrets(redaction.secrets_in(list(args[-3:])))
    redaction.install()

    return asyncio.run(body(*args))


def run_experiment(cfg: DistilleryConfig, progress: bool = True) -> RunResult:
    """One composed config: a sweep of one point."""
    return run_sweep([cfg], progress).points[0]


def plan(configs: list[DistilleryConfig]) -> str:
    """The stage graph and what is cached, without running anything."""
    graph = plan_sweep(configs)
    return format_plan(graph, stage_status(graph, Ledger(graph.configs[0].output_dir)))


def run_sweep(configs: list[DistilleryConfig], progress: bool = True) -> SweepResult:
    """Plan, check what the run will touch, take the output root, then run. Every user
    error (a bad path, an unset key variable, a busy output root) is raised before Ray
    starts or an MLflow run is created."""
    graph = plan_sweep(configs)
    for c in graph.configs:
        register_secrets(secrets_in(c))
    install_redaction(streams=False)  # this process's logs (the CLI adds its streams)
    check_run(graph)
    cfg = graph.configs[0]
    store = cfg.memory.store
    with run_locks(cfg.output_dir, store.path, store.url, cfg.tracking_uri):
        return _run_locked(graph, progress)


def _run_locked(graph: StageGraph, progress: bool) -> SweepResult:
    sweep = Sweep(graph, progress)
    cfg = sweep.cfg
    if progress:
        print(format_plan(graph, stage_status(graph, sweep.ledger)))
    sweep_json = sweep.sweep_dir / "sweep.json"
    previous = read_sweep_record(sweep_json)
    tracker = Tracker(cfg.tracking_uri, cfg.tracking.experiment)
    shared = _shared_params([safe_params(c.model_dump(mode="json")) for c in graph.configs])
    tags = {
        "distillery.sweep_id": sweep.sweep_id,
        "git_sha": git_sha(),
        **package_versions(),
        "n_points": str(len(graph.points)),
    }
    with (
        tracker.parent(
            sweep.sweep_id,
            shared,
            tags,
            run_id=previous.get("parent_run_id") or sweep_parent(tracker, sweep.sweep_id),
        ) as pid,
        ray_session(cfg.cluster),
        contextlib.closing(sweep.memory),
        contextlib.closing(sweep.servers),
    ):
        sweep_json.write_json(
            {
                "sweep_id": sweep.sweep_id,
                "tracking_uri": cfg.tracking_uri,
                "parent_run_id": pid,
                "mlflow_experiment_id": tracker.experiment_id,
                "experiment": cfg.experiment.name,
                "created_at": previous.get("created_at", time.time()),
                "updated_at": time.time(),
                "prices": cfg.cost.prices_dict(),
                "git_sha": tags["git_sha"],
                "points": [point_ids for point_ids in graph.point_ids_of],
            }
        )
        try:
            sweep.run_stages()
        finally:
            log_infra_counts(sweep, tracker, pid)
        logged = _log_points(sweep, tracker, pid, tags)
    write_sweep_tables(sweep, logged)
    results = []
    for cfg_i, ids in zip(graph.configs, graph.point_ids_of, strict=True):
        methods = [logged[i] for i in ids]
        split = graph.points[ids[0]].split
        results.append(
            RunResult(
                sweep.sweep_id, _local(sweep.sweep_dir), split, methods, pid, cfg_i.tracking_uri
            )
        )
    return SweepResult(
        sweep.sweep_id,
        _local(sweep.sweep_dir),
        results,
        sweep.stages_run,
        sweep.stages_cached,
        pid,
        cfg.tracking_uri,
    )


def log_infra_counts(sweep: Sweep, tracker: Tracker, parent_id: str) -> None:
    """What this invocation retried (episodes, workers, replicas), printed and logged
    on the sweep's parent run as `infra.*` metrics (one value per invocation)."""
    counts = Counter(sweep.infra)
    counts.update(sweep.servers.stats())
    if any(counts.values()):
        sweep._say(
            "infrastructure retries: " + ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
        )
    with contextlib.suppress(Exception):  # tracking trouble must not lose the sweep
        for name, value in sorted({**INFRA_COUNTS, **counts}.items()):
            tracker.client.log_metric(parent_id, f"infra.{name}", float(value))


def sweep_parent(tracker: Tracker, sweep_id: str) -> str | None:
    """The parent run of an earlier invocation of this sweep, found by its sweep id tag
    (when sweep.json, which names it, is missing or damaged): resumed, not duplicated."""
    if "'" in sweep_id:
        return None
    runs = tracker.client.search_runs(
        [tracker.experiment_id],
        filter_string=f"tags.`distillery.sweep_id` = '{sweep_id}'",
        order_by=["attributes.start_time ASC"],
        max_results=50,
    )
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    return parents[0].info.run_id if parents else None


def _shared_params(all_params: list[dict[str, str]]) -> dict[str, str]:
    first = all_params[0]
    return {k: v for k, v in first.items() if all(p.get(k) == v for p in all_params[1:])}


def _log_points(
    sweep: Sweep, tracker: Tracker, parent_id: str, tags: dict[str, str]
) -> dict[str, MethodResult]:
    out: dict[str, MethodResult] = {}
    for point in sweep.graph.points.values():
        cfg = point.cfg
        summaries = sweep.point_summaries(point)
        needs_records = point.bank_stage is not None or cfg.tracking.trace_sample != 0
        records = sweep.point_records(summaries) if needs_records else []
        metrics = sweep.point_metrics(point, summaries, records)
        method = point.method
        retrieval = point.retrieval
        episodes_dir = sweep.ledger.episodes_dir(point.stage)
        point_tags = {
            **tags,
            **point_descriptors(point),
            # Said in words too: a point without a scored episode has a NaN success rate.
            "distillery.unscored_episodes": str(int(metrics["n_unscored"])),
            "distillery.point_id": point.point_id,
            "stage": str(point.stage),
            "stages": ",".join(str(k) for k in point.upstream),
            # Where the point's episode Parquet files are (a remote root's are not
            # copied into MLflow's artifacts).
            "distillery.episodes_uri": episodes_dir.uri,
        }
        params = {
            **safe_params(cfg.model_dump(mode="json")),
            "method": point.method_name,
            "method.kind": method.kind,
            "method.types": ",".join(retrieval.types) if retrieval else "",
            "eval_task_ids_sha": point.split.eval_ids_sha,
            "eval_n_tasks": str(len(point.split.eval_ids)),
        }
        if point.bank_stage is not None:
            params["memory.bank_id"] = sweep.memory.bank_of(point.bank_stage)
        descriptor = sweep.names.point(point.point_id)
        point_tags["distillery.descriptor"] = descriptor
        child_id = tracker.log_agent(
            run_name=" ".join([f"{point.method_name}:{point.model.name}", descriptor]).strip(),
            params=params,
            tags=point_tags,
            metrics=metrics,
            results=results_frame(summaries),
            episodes_dir=episodes_dir.local_path
            if cfg.tracking.log_trajectories and episodes_dir.is_local
            else None,
            documents={
                "split.json": {
                    "protocol": cfg.protocol.name,
                    "eval_task_ids": list(point.split.eval_ids),
                    "eval_task_ids_sha": point.split.eval_ids_sha,
                    "memory_task_ids": list(point.split.memory_ids),
                }
            },
            point_id=point.point_id,
            dataset=EvalDataset(
                cfg.benchmark.name, list(point.split.eval_ids), point.split.eval_ids_sha
            ),
            traces=records,
            trace_sample=cfg.tracking.trace_sample,
        )
        out[point.point_id] = MethodResult(
            point.method_name,
            method,
            point.role,
            point.model,
            _local(episodes_dir),
            summaries,
            metrics,
            child_id,
            point.point_id,
            str(point.stage),
            descriptor,
        )
    return out


def point_descriptors(point: EvalPoint) -> dict[str, str]:
    """What a researcher filters runs by in MLflow (and the report groups by)."""
    cfg = point.cfg
    r = point.retrieval
    out = {
        "benchmark": cfg.benchmark.name,
        "protocol": cfg.protocol.name,
        "teacher": cfg.teacher.name,
        "student": cfg.student.name,
        "method": point.method_name,
        "method_kind": point.method.kind,
        "role": point.role,
        "seed": str(cfg.seed),
        "memory_types": "+".join(r.types) if r else "",
        # Deviations from the benchmark's own pipeline ("none": BFCL-faithful).
        "deviations": ",".join(cfg.agent.options().deviations()) or "none",
    }
    if point.bank_stage is not None:  # who wrote the bank it reads
        out["memory_writer"] = cfg.bank_writer(point.method.kind == "student_memory")
        if r and r.thresholds_set_for != cfg.memory.embedder.model:
            out["thresholds_embedder"] = (
                f"set for {r.thresholds_set_for}, run with {cfg.memory.embedder.model}"
            )
    if r:
        for t in r.types:
            out[f"k_{t}"] = str(r.k(t))
            out[f"delta_{t}"] = str(r.threshold(t))
            out[f"repr_{t}"] = r.representation(t)
    return out


def write_sweep_tables(sweep: Sweep, logged: dict[str, MethodResult]) -> None:
    """points / episodes / stages tables for `distillery report` (schema: report/load.py)."""
    graph = sweep.graph
    points, episodes = [], []
    for point in graph.points.values():
        r = point.retrieval
        result = logged[point.point_id]
        row: dict[str, Any] = {
            "point_id": point.point_id,
            "method": point.method_name,
            "method_kind": point.method.kind,
            "role": point.role,
            "agent": point.model.name,
            "student": point.cfg.student.name,
            "teacher": point.cfg.teacher.name,
            "student_params_b": point.cfg.student.params_b,
            "benchmark": point.cfg.benchmark.name,
            "protocol": point.cfg.protocol.name,
            "memory_types": "+".join(r.types) if r else "",
            "seed": point.cfg.seed,
            # the scored agent's sampling: the report tells repeated runs at temperature
            # 0 (the same greedy requests) from sampled ones
            "temperature": point.model.temperature,
            "sampling_seed": effective_seed(point.model, point.cfg.seed)
            if point.role == "student"
            else effective_seed(point.model, 0),
            "eval_task_ids_sha": point.split.eval_ids_sha,
            "upstream": [k.digest for k in point.upstream],
            "stage": point.stage.digest,
            "mlflow_run_id": result.mlflow_run_id,
            # None (not 0) when no episode was scored: there is no rate to report.
            "success_rate": result.metrics["success_rate"] if result.metrics["n_scored"] else None,
            "n_scored": int(result.metrics["n_scored"]),
            "n_unscored": int(result.metrics["n_unscored"]),
        }
        for t in ("wf", "st", "fn"):
            used = r is not None and t in r.types
            row[f"k_{t}"] = r.k(t) if used else None  # type: ignore[union-attr]
            row[f"delta_{t}"] = r.threshold(t) if used else None  # type: ignore[union-attr]
            row[f"repr_{t}"] = r.representation(t) if used else None  # type: ignore[union-attr]
        points.append(row)
        for s in result.summaries:
            episodes.append(
                {
                    "point_id": point.point_id,
                    "task_id": s.task_id,
                    "success": s.success,
                    "termination": s.termination,
                    "error_type": s.error_type,
                    "total_steps": s.total_steps,
                    "n_llm_calls": s.n_llm_calls,
                    "tokens_in": s.tokens_in,
                    "tokens_out": s.tokens_out,
                    "wall_s": s.wall_s,
                }
            )
    stages = [stage_row(sweep, key) for key in graph.stages]
    _write_table(sweep.sweep_dir / "points.parquet", points)
    _write_table(sweep.sweep_dir / "episodes.parquet", episodes)
    _write_table(sweep.sweep_dir / "stages.parquet", stages)


def stage_row(sweep: Sweep, key: StageKey) -> dict[str, Any]:
    stage = sweep.graph.stages[key]
    runs = sweep.ledger.runs(key)
    row: dict[str, Any] = {
        "stage_hash": key.digest,
        "kind": key.kind,
        "label": stage.label,
        "model": stage.model.name if stage.model else "oracle" if stage.plays_episodes else "none",
        "tokens_in": 0,
        "tokens_out": 0,
        "n_llm_calls": 0,
        "embed_tokens": 0,
        "wall_s": float(sum(r.get("wall_s", 0.0) for r in runs)),
        "gpu_s": float(sum(r.get("gpu_s", 0.0) for r in runs)),
        "ran": bool(runs),
    }
    if stage.plays_episodes and stage.model is not None:  # the oracle calls no LLM
        # The episodes this sweep needs: a record of another task (an earlier sweep's
        # larger split, or a file planted in the folder) is not this sweep's cost.
        needed = sweep.graph.needs.get(key, set())
        for task_id, s in sweep.ledger.all_records(key).items():
            if task_id not in needed:
                log.warning(
                    "ledger record %s is for task %r, which this sweep does not need: "
                    "not counted in the cost of %s",
                    sweep.ledger.record_path(key, task_id),
                    task_id,
                    key,
                )
                continue
            row["tokens_in"] += s.tokens_in
            row["tokens_out"] += s.tokens_out
            row["n_llm_calls"] += s.n_llm_calls
    elif not stage.plays_episodes:
        output = sweep.ledger.output(key) or {}
        stats = output.get("stats", {})
        row["tokens_in"] = int(sum(v for k, v in stats.items() if k.endswith(".tokens_in")))
        row["tokens_out"] = int(sum(v for k, v in stats.items() if k.endswith(".tokens_out")))
        row["n_llm_calls"] = int(sum(v for k, v in stats.items() if k.endswith(".requests")))
        row["embed_tokens"] = int(output.get("counts", {}).get("embedded_chars", 0) // 4)
    return row


def _write_table(target: Location, rows: list[dict[str, Any]]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = redact_obj(rows)
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(rows) if rows else pa.table({}), sink)
    target.write_bytes(sink.getvalue().to_pybytes())


def package_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("distillery", "ray", "mlflow", "bfcl-eval", "qdrant-client", "vllm", "openai"):
        try:
            out[f"version.{name}"] = version(name)
        except PackageNotFoundError:
            continue
    return out


def results_frame(summaries: list[EpisodeSummary]) -> pd.DataFrame:
    columns = list(EpisodeSummary.__dataclass_fields__)
    return pd.DataFrame([asdict(s) for s in summaries], columns=columns)


@contextmanager
def ray_session(cluster: ClusterConfig) -> Iterator[None]:
    import ray

    if ray.is_initialized():
        yield
        return
    # Workers inherit the driver's interpreter and installed package; keep uv from
    # rewriting their environment.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    if cluster.ray_address:
        try:
            ray.init(address=cluster.ray_address, log_to_driver=True)
        except ConnectionError as exc:
            raise ConnectionError(
                f"cannot join the Ray cluster at {cluster.ray_address} ({exc}). With token "
                "authentication (the default from Ray 2.59), export RAY_AUTH_MODE=token "
                "and the cluster's token as RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH; "
                "`ray get-auth-token` on the head prints it)"
            ) from exc
    else:
        # A private cluster on loopback: Ray may otherwise bind the machine's external
        # address.
        ray.init(
            num_cpus=cluster.num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=True,
        )
    try:
        yield
    finally:
        ray.shutdown()


def git_sha() -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            cwd=Path(__file__).resolve().parent,
        )
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def unscored_points(result: SweepResult) -> list[tuple[MethodResult, int]]:
    """Every point with unscored (infrastructure-failed) episodes, and how many."""
    seen: set[str] = set()
    out = []
    for point in result.points:
        for m in point.methods:
            n = sum(1 for s in m.summaries if s.success is None)
            if n and m.point_id not in seen:
                seen.add(m.point_id)
                out.append((m, n))
    return out


def resume_command() -> str:
    """The command line that was run (redacted), to run again."""
    import shlex
    import sys

    if not sys.argv or not sys.argv[0].endswith(("distillery", "cli.py")):
        return "the same distillery command (same arguments, same output_dir)"
    return redact(" ".join(["distillery", *(shlex.quote(a) for a in sys.argv[1:])]))


def print_summary(result: SweepResult) -> None:
    print()
    print(
        f"sweep {result.sweep_id}: {len(result.points)} point(s); stages run "
        f"{result.stages_run}, reused {result.stages_cached} -> {result.sweep_dir}"
    )
    shown: set[str] = set()  # a point shared by sweep points (zero-shot) is shown once
    for point in result.points:
        split = point.split
        fresh = [m for m in point.methods if m.point_id not in shown]
        shown.update(m.point_id for m in fresh)
        if not fresh:
            continue
        print(f"  {len(split.eval_ids)} evaluated tasks ({len(split.memory_ids)} memory tasks)")
        for m in fresh:
            x = m.metrics
            if x["n_scored"] > 0:
                rate = (
                    f"success {x['success_rate']:6.1%} [95% CI "
                    f"{x['success_rate_ci_low']:.1%}-{x['success_rate_ci_high']:.1%}] "
                    f"n={int(x['n_scored'])} steps={x['mean_steps']:.1f}"
                )
            else:  # no scored episode: no rate, rather than a 0 % that reads as one
                rate = f"success   n/a (no scored episode of {int(x['n_tasks'])})"
            print(
                f"    {m.name:16s} {m.model.name:16s} "
                f"{m.descriptor + ' ' if m.descriptor else ''}{rate} "
                f"tokens={int(x['tokens_in'])}/{int(x['tokens_out'])} "
                f"infra_errors={int(x['infra_errors'])}"
            )
    print()
    print("Episodes (Parquet, one file per task) are under each stage folder:")
    for path in sorted({str(m.episodes_dir) for p in result.points for m in p.methods}):
        print(f"  {path}")
    print()
    unscored = unscored_points(result)
    if unscored:
        total = sum(n for _, n in unscored)
        print(
            f"INCOMPLETE: {total} episode(s) of {len(unscored)} point(s) are unscored "
            "(infrastructure errors or timeouts left after their retries):"
        )
        for m, n in unscored:
            print(f"  {m.name} {m.model.name}: {n} of {int(m.metrics['n_tasks'])} ({m.stage})")
        print("Their success rates leave them out. Fix the cause (see each episode's")
        print("error_message), then re-run the same command to retry only them:")
        print(f"  {resume_command()}")
    else:
        print("Re-run the same command to finish an interrupted sweep (finished work is reused).")
    print(f"Report: distillery report {result.sweep_dir}")
    print("Open the runs in MLflow:")
    print(f"  {ui_hint(result.tracking_uri)}")
