"""The driver: validated config -> Ray workers and model servers -> Parquet + MLflow."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pandas as pd
from tqdm import tqdm

from distillery.orchestrator.config import ClusterConfig, DistilleryConfig, MethodConfig
from distillery.orchestrator.metrics import agent_metrics
from distillery.orchestrator.protocols import TaskSplit, split_tasks
from distillery.orchestrator.tracking import Tracker, safe_params, ui_hint
from distillery.workers.envs.base import Task
from distillery.workers.envs.registry import make_benchmark
from distillery.workers.episodes import AgentJob, EpisodeSummary, EpisodeWorkerImpl
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.bank import BuiltBank, bank_id_for
from distillery.workers.memory.retrieval import Isolation
from distillery.workers.memory_service import (
    MemoryJob,
    MemoryServiceImpl,
    build_bank_task,
    render_text_task,
)
from distillery.workers.trajectories import read_episodes


@dataclass(frozen=True)
class AgentRun:
    """One agent's episodes plus what running them cost the orchestrator."""

    summaries: list[EpisodeSummary]
    wall_s: float
    worker_cpu_s: float


@dataclass(frozen=True)
class MethodResult:
    name: str
    method: MethodConfig
    role: str  # whose episodes: teacher | student
    model: ModelConfig
    episodes_dir: Path
    summaries: list[EpisodeSummary]  # the evaluated split only
    metrics: dict[str, float]
    mlflow_run_id: str | None


@dataclass(frozen=True)
class RunResult:
    run_id: str
    run_dir: Path
    split: TaskSplit
    methods: list[MethodResult]
    parent_run_id: str | None
    tracking_uri: str

    @property
    def task_ids(self) -> list[str]:
        return list(self.split.eval_ids)

    def method(self, name: str) -> MethodResult:
        return next(m for m in self.methods if m.name == name)


def new_run_id(cfg: DistilleryConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return cfg.run_name or f"{stamp}-{cfg.experiment.name}"


def resolve_tasks(cfg: DistilleryConfig) -> list[Task]:
    """Load the split on the driver, so a bad task id fails before Ray starts."""
    bench = make_benchmark(cfg.benchmark.name)
    ids = list(cfg.benchmark.task_ids) if cfg.benchmark.task_ids else None
    return bench.load_tasks(limit=cfg.benchmark.limit, task_ids=ids)


class Experiment:
    """One invocation: its stages share servers, episodes and memory banks."""

    def __init__(self, cfg: DistilleryConfig, progress: bool = True) -> None:
        self.cfg = cfg
        self.progress = progress
        tasks = resolve_tasks(cfg)
        bench = make_benchmark(cfg.benchmark.name)
        self.split = split_tasks(
            [t.task_id for t in tasks],
            cfg.protocol,
            {t.task_id: t.group_id for t in tasks},
            group_by_default=getattr(bench, "groups_are_scenarios", False),
        )
        self.run_id = new_run_id(cfg)
        self.run_dir = Path(cfg.output_dir).resolve() / self.run_id
        self.tasks = {t.task_id: t for t in tasks}
        self.bank_of: dict[str, str] = {}  # memory method -> the bank it read
        self._episodes: dict[tuple[str, str], dict[str, EpisodeSummary]] = {}
        self.memory = MemoryStage(self)

    # -- stages --------------------------------------------------------------------

    def play(
        self,
        role: str,
        stage: str,
        episodes_dir: Path,
        task_ids: list[str],
        memory: Any = None,
    ) -> dict[str, EpisodeSummary]:
        """Run `role`'s agent on the tasks not yet played in `episodes_dir`."""
        key = (role, str(episodes_dir))
        done = self._episodes.setdefault(key, {})
        missing = [t for t in task_ids if t not in done]
        if missing:
            model = self.cfg.teacher if role == "teacher" else self.cfg.student
            job = AgentJob(
                run_id=self.run_id,
                stage=stage,
                role=role,
                model=model,
                benchmark=self.cfg.benchmark.name,
                episodes_dir=str(episodes_dir),
                max_steps_per_turn=self.cfg.benchmark.max_steps_per_turn,
                episode_timeout_s=self.cfg.agent.episode_timeout_s,
                episode_retries=self.cfg.agent.episode_retries,
                retry_backoff_s=self.cfg.agent.retry_backoff_s,
                memory=memory,
            )
            with served(model, self.run_dir / "logs") as endpoints:
                run = run_agent(job, endpoints, missing, self.cfg.cluster, self.progress)
            done.update({s.task_id: s for s in run.summaries})
        return {t: done[t] for t in task_ids}

    def teacher_dir(self) -> Path:
        return self.run_dir / "collect" / _slug(self.cfg.teacher.name) / "episodes"

    def student_dir(self, method: str) -> Path:
        return self.run_dir / "evaluate" / _slug(self.cfg.student.name) / method / "episodes"

    def evaluate(self, name: str) -> tuple[str, Path, dict[str, EpisodeSummary]]:
        method = self.cfg.method(name)
        eval_ids = list(self.split.eval_ids)
        if method.kind == "teacher":
            return (
                "teacher",
                self.teacher_dir(),
                self.play("teacher", "collect", self.teacher_dir(), eval_ids),
            )
        if method.kind == "zero_shot":
            return (
                "student",
                self.student_dir("zero_shot"),
                self.play("student", "evaluate", self.student_dir("zero_shot"), eval_ids),
            )
        # Memory methods: collect on the memory split, build (or reuse) the bank, then
        # evaluate the student reading it.
        memory_ids = list(self.split.memory_ids)
        if method.kind == "amd":
            source_dir = self.teacher_dir()
            self.play("teacher", "collect", source_dir, memory_ids)
        else:  # student_memory: the student's own successful zero-shot runs
            source_dir = self.student_dir("zero_shot")
            self.play("student", "evaluate", source_dir, memory_ids)
        retrieval = self.cfg.retrieval_for(name)
        with_text = any(
            t in retrieval.types and retrieval.representation(t) == "text" for t in ("st", "fn")
        )
        bank_id = self.memory.ensure_bank(
            source_dir, memory_ids, self.split.memory_split, with_text
        )
        isolation = Isolation(self.cfg.protocol.name, (self.split.memory_split,))
        self.bank_of[name] = bank_id
        job = MemoryJob(self.memory.service, bank_id, isolation, retrieval)
        ray_get(self.memory.service.open_bank.remote(bank_id, isolation))
        directory = self.student_dir(name)
        return "student", directory, self.play("student", "evaluate", directory, eval_ids, job)


class MemoryStage:
    """Builds banks (once per content hash) and owns the memory service actor."""

    def __init__(self, exp: Experiment) -> None:
        self.exp = exp
        self._service: Any = None
        self.built: dict[str, dict[str, Any]] = {}  # bank id -> counts and build stats

    @property
    def service(self) -> Any:
        if self._service is None:
            import ray

            cfg = self.exp.cfg
            default_path = str(Path(cfg.output_dir).resolve() / "qdrant")
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

    def ensure_bank(
        self, source_dir: Path, memory_ids: list[str], split: str, with_text: bool
    ) -> str:
        cfg = self.exp.cfg
        wanted = set(memory_ids)
        episodes = [e for e in read_episodes(source_dir) if e.task_id in wanted]
        builder_model = cfg.builder_model()
        model_name = builder_model.name if builder_model else "none"
        bank_id = bank_id_for(episodes, cfg.memory.builder, model_name, split, False)
        if not ray_get(self.service.has_bank.remote(bank_id)):
            tasks = [self.exp.tasks[e.task_id] for e in episodes]
            bank = self._run_built(build_bank_task, episodes, tasks, split, False)
            counts = ray_get(self.service.write_bank.remote(bank_id, bank))
            self.built[bank_id] = {"counts": counts, "stats": bank.stats.as_dict(), "reused": False}
        else:
            self.built.setdefault(bank_id, {"reused": True})
        if not with_text:
            return bank_id
        text_id = hashlib.sha256(f"{bank_id}:text:{model_name}".encode()).hexdigest()
        if not ray_get(self.service.has_bank.remote(text_id)):
            base = ray_get(self.service.load_bank.remote(bank_id))
            bank = self._run_built(render_text_task, base)
            counts = ray_get(self.service.write_bank.remote(text_id, bank))
            self.built[text_id] = {"counts": counts, "stats": bank.stats.as_dict(), "reused": False}
        else:
            self.built.setdefault(text_id, {"reused": True})
        return text_id

    def _run_built(self, body: Any, *args: Any) -> BuiltBank:
        """Run a build body as a Ray task next to the builder model's servers."""
        import ray

        cfg = self.exp.cfg
        model = cfg.builder_model()
        remote = ray.remote(num_cpus=0.5)(_run_async)
        log_dir = self.exp.run_dir / "logs"
        if model is None:  # deterministic entries, no server needed
            return ray_get(remote.remote(body, *args, cfg.memory.builder, None, []))
        with served(model, log_dir) as endpoints:
            return ray_get(remote.remote(body, *args, cfg.memory.builder, model, endpoints))


def memory_metrics(episodes_dir: Path, eval_ids: tuple[str, ...]) -> dict[str, float]:
    """Isolation audit and injection counts from the episodes' retrieval logs."""
    wanted = set(eval_ids)
    totals = {"isolation_violations": 0.0, "isolation_checked": 0.0}
    injected = {"wf": 0.0, "st": 0.0, "fn": 0.0}
    fallbacks = 0.0
    for record in read_episodes(episodes_dir):
        if record.task_id not in wanted or not record.extra_json:
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

    return asyncio.run(body(*args))


def ray_get(ref: Any) -> Any:
    import ray

    return ray.get(ref)


def run_experiment(cfg: DistilleryConfig, progress: bool = True) -> RunResult:
    exp = Experiment(cfg, progress)
    exp.run_dir.mkdir(parents=True, exist_ok=True)
    (exp.run_dir / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))

    tracker = Tracker(cfg.tracking_uri, cfg.tracking.experiment)
    params = safe_params(cfg.model_dump(mode="json"))
    tags = {
        "distillery.run_id": exp.run_id,
        "git_sha": git_sha(),
        "benchmark": cfg.benchmark.name,
        "protocol": cfg.protocol.name,
        "teacher": cfg.teacher.name,
        "student": cfg.student.name,
    }
    results: list[MethodResult] = []
    with (
        tracker.parent(exp.run_id, params, tags) as parent_id,
        ray_session(cfg.cluster),
        contextlib.closing(exp.memory),
    ):
        for name in cfg.methods:
            method = cfg.method(name)
            role, episodes_dir, by_task = exp.evaluate(name)
            summaries = [by_task[t] for t in exp.split.eval_ids]
            metrics = agent_metrics(summaries)
            bank_params: dict[str, str] = {}
            if method.uses_memory:
                metrics.update(memory_metrics(episodes_dir, exp.split.eval_ids))
                bank_id = exp.bank_of[name]
                built = exp.memory.built.get(bank_id, {})
                metrics.update({f"bank_{t}": float(n) for t, n in built.get("counts", {}).items()})
                metrics.update(
                    {
                        f"build.{k.replace(':', '.')}": float(v)
                        for k, v in built.get("stats", {}).items()
                    }
                )
                bank_params = {
                    "memory.bank_id": bank_id,
                    "memory.bank_reused": str(built.get("reused")),
                }
            model = cfg.teacher if role == "teacher" else cfg.student
            child_tags = {**tags, "method": name, "method_kind": method.kind, "role": role}
            child_params = {
                **params,
                "method": name,
                "method.kind": method.kind,
                "method.types": ",".join(method.types) if method.uses_memory else "",
                "eval_task_ids_sha": exp.split.eval_ids_sha,
                "eval_n_tasks": str(len(exp.split.eval_ids)),
                **bank_params,
            }
            child_id = tracker.log_agent(
                run_name=f"{name}:{model.name}",
                params=child_params,
                tags=child_tags,
                metrics=metrics,
                results=results_frame(summaries),
                episodes_dir=episodes_dir if cfg.tracking.log_trajectories else None,
                documents={
                    "split.json": {
                        "protocol": cfg.protocol.name,
                        "eval_task_ids": list(exp.split.eval_ids),
                        "eval_task_ids_sha": exp.split.eval_ids_sha,
                        "memory_task_ids": list(exp.split.memory_ids),
                    }
                },
            )
            results.append(
                MethodResult(name, method, role, model, episodes_dir, summaries, metrics, child_id)
            )
    return RunResult(exp.run_id, exp.run_dir, exp.split, results, parent_id, cfg.tracking_uri)


def run_agent(
    job: AgentJob,
    endpoints: list[str],
    task_ids: list[str],
    cluster: ClusterConfig,
    progress: bool = True,
) -> AgentRun:
    """Spread the tasks over episode workers with a bounded number in flight."""
    import ray

    in_flight_cap = cluster.num_workers * cluster.episodes_per_worker
    if job.model.backend != "oracle":
        # Beyond the servers' capacity episodes would only queue, with their episode
        # timeout running.
        server_slots = max(1, len(endpoints)) * job.model.max_concurrency_per_server
        in_flight_cap = min(in_flight_cap, server_slots)
    n_workers = max(1, min(cluster.num_workers, in_flight_cap, len(task_ids)))
    worker_cls = ray.remote(EpisodeWorkerImpl)
    workers = [
        worker_cls.options(
            num_cpus=cluster.worker_num_cpus, max_concurrency=cluster.episodes_per_worker
        ).remote(job, endpoints)
        for _ in range(n_workers)
    ]
    ray.get([w.ready.remote() for w in workers])
    cpu_before = sum(ray.get([w.cpu_time_s.remote() for w in workers]))
    started = time.perf_counter()

    pending = list(reversed(task_ids))
    busy = [0] * n_workers
    owner: dict[object, int] = {}
    summaries: list[EpisodeSummary] = []
    bar = tqdm(
        total=len(task_ids),
        desc=f"{job.stage} {job.role}:{job.model.name}",
        unit="ep",
        disable=not progress,
    )
    try:
        while pending or owner:
            while pending and len(owner) < in_flight_cap:
                index = busy.index(min(busy))
                ref = workers[index].run_task.remote(pending.pop())
                owner[ref] = index
                busy[index] += 1
            done, _ = ray.wait(list(owner), num_returns=1)
            for ref in done:
                busy[owner.pop(ref)] -= 1
                summary = ray.get(ref)
                summaries.append(summary)
                bar.update(1)
                wins = sum(1 for s in summaries if s.success)
                infra = sum(1 for s in summaries if s.success is None)
                bar.set_postfix(success=wins, infra_errors=infra)
        wall_s = time.perf_counter() - started
        worker_cpu_s = sum(ray.get([w.cpu_time_s.remote() for w in workers])) - cpu_before
    finally:
        bar.close()
        for w in workers:
            ray.kill(w)
    order = {t: i for i, t in enumerate(task_ids)}
    ordered = sorted(summaries, key=lambda s: order[s.task_id])
    return AgentRun(ordered, wall_s, worker_cpu_s)


def results_frame(summaries: list[EpisodeSummary]) -> pd.DataFrame:
    columns = list(EpisodeSummary.__dataclass_fields__)
    return pd.DataFrame([asdict(s) for s in summaries], columns=columns)


@contextmanager
def served(model: ModelConfig, log_dir: Path) -> Iterator[list[str]]:
    """Endpoints for a model: launched servers for its lifetime, or the external URL."""
    if model.backend == "oracle":
        yield []
        return
    if model.backend == "external":
        yield [model.base_url or ""]
        return
    from distillery.workers.llm.servers import launch_servers

    group = launch_servers(model, log_dir)
    try:
        yield list(group.endpoints)
    finally:
        group.shutdown()


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
        ray.init(address=cluster.ray_address, log_to_driver=True)
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


def print_summary(result: RunResult) -> None:
    split = result.split
    print()
    print(
        f"run {result.run_id}: {len(split.eval_ids)} evaluated tasks "
        f"({len(split.memory_ids)} memory tasks) -> {result.run_dir}"
    )
    for m in result.methods:
        x = m.metrics
        print(
            f"  {m.name:16s} {m.model.name:16s} success {x['success_rate']:6.1%} "
            f"[95% CI {x['success_rate_ci_low']:.1%}-{x['success_rate_ci_high']:.1%}] "
            f"n={int(x['n_scored'])} steps={x['mean_steps']:.1f} "
            f"tokens={int(x['tokens_in'])}/{int(x['tokens_out'])} "
            f"infra_errors={int(x['infra_errors'])}"
        )
    print()
    print("Episodes (Parquet, one file per episode):")
    for path in sorted({str(m.episodes_dir) for m in result.methods}):
        print(f"  {path}")
    print()
    print("Open the runs in MLflow:")
    print(f"  {ui_hint(result.tracking_uri)}")
