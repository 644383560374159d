"""The driver: validated config -> Ray workers and model servers -> Parquet + MLflow."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from distillery.orchestrator.config import ClusterConfig, DistilleryConfig, Role
from distillery.orchestrator.metrics import agent_metrics
from distillery.orchestrator.tracking import Tracker, safe_params, ui_hint
from distillery.workers.envs.registry import make_benchmark
from distillery.workers.episodes import AgentJob, EpisodeSummary, EpisodeWorkerImpl
from distillery.workers.llm.config import ModelConfig

STAGE_OF_ROLE: dict[str, str] = {"teacher": "collect", "student": "evaluate"}


@dataclass(frozen=True)
class AgentRun:
    """One agent's episodes plus what running them cost the orchestrator."""

    summaries: list[EpisodeSummary]
    wall_s: float
    worker_cpu_s: float


@dataclass(frozen=True)
class AgentResult:
    role: Role
    model: ModelConfig
    episodes_dir: Path
    summaries: list[EpisodeSummary]
    metrics: dict[str, float]
    mlflow_run_id: str | None


@dataclass(frozen=True)
class RunResult:
    run_id: str
    run_dir: Path
    task_ids: list[str]
    agents: list[AgentResult]
    parent_run_id: str | None
    tracking_uri: str


def new_run_id(cfg: DistilleryConfig) -> str:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return cfg.run_name or f"{stamp}-{cfg.experiment.name}"


def resolve_task_ids(cfg: DistilleryConfig) -> list[str]:
    """Load the split on the driver, so a bad task id fails before Ray starts."""
    bench = make_benchmark(cfg.benchmark.name)
    ids = list(cfg.benchmark.task_ids) if cfg.benchmark.task_ids else None
    tasks = bench.load_tasks(limit=cfg.benchmark.limit, task_ids=ids)
    return [t.task_id for t in tasks]


def run_experiment(cfg: DistilleryConfig, progress: bool = True) -> RunResult:
    task_ids = resolve_task_ids(cfg)
    run_id = new_run_id(cfg)
    run_dir = Path(cfg.output_dir).resolve() / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(cfg.model_dump(mode="json"), indent=2))

    tracker = Tracker(cfg.tracking_uri, cfg.tracking.experiment)
    params = safe_params(cfg.model_dump(mode="json"))
    tags = {"distillery.run_id": run_id, "git_sha": git_sha(), "benchmark": cfg.benchmark.name}
    results: list[AgentResult] = []
    with tracker.parent(run_id, params, tags) as parent_id, ray_session(cfg.cluster):
        for role in cfg.experiment.agents:
            model = cfg.model_for(role)
            episodes_dir = run_dir / STAGE_OF_ROLE[role] / _slug(model.name) / "episodes"
            job = AgentJob(
                run_id=run_id,
                stage=STAGE_OF_ROLE[role],
                role=role,
                model=model,
                benchmark=cfg.benchmark.name,
                episodes_dir=str(episodes_dir),
                max_steps_per_turn=cfg.benchmark.max_steps_per_turn,
                episode_timeout_s=cfg.agent.episode_timeout_s,
                episode_retries=cfg.agent.episode_retries,
                retry_backoff_s=cfg.agent.retry_backoff_s,
            )
            with served(model) as endpoints:
                summaries = run_agent(job, endpoints, task_ids, cfg.cluster, progress).summaries
            metrics = agent_metrics(summaries)
            child_tags = {
                **tags,
                "role": role,
                "stage": job.stage,
                "agent": model.name,
                "backend": model.backend,
            }
            child_params = {
                **params,
                "role": role,
                "agent.model": model.model or model.name,
                "agent.backend": model.backend,
                "agent.action_format": job.model.action_format,
                "task_ids_sha": _hash_ids(task_ids),
            }
            child_id = tracker.log_agent(
                run_name=f"{role}:{model.name}",
                params=child_params,
                tags=child_tags,
                metrics=metrics,
                results=results_frame(summaries),
                episodes_dir=episodes_dir if cfg.tracking.log_trajectories else None,
            )
            results.append(AgentResult(role, model, episodes_dir, summaries, metrics, child_id))
    return RunResult(run_id, run_dir, task_ids, results, parent_id, cfg.tracking_uri)


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
def served(model: ModelConfig) -> Iterator[list[str]]:
    """Endpoints for a model: launched servers for its lifetime, or the external URL."""
    if model.backend == "oracle":
        yield []
        return
    if model.backend == "external":
        yield [model.base_url or ""]
        return
    from distillery.workers.llm.servers import launch_servers

    group = launch_servers(model)
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


def _hash_ids(task_ids: list[str]) -> str:
    import hashlib

    return hashlib.sha256("\n".join(task_ids).encode()).hexdigest()[:16]


def print_summary(result: RunResult) -> None:
    print()
    print(f"run {result.run_id}: {len(result.task_ids)} tasks -> {result.run_dir}")
    for agent in result.agents:
        m = agent.metrics
        print(
            f"  {agent.role:8s} {agent.model.name:20s} success {m['success_rate']:.1%} "
            f"[95% CI {m['success_rate_ci_low']:.1%}-{m['success_rate_ci_high']:.1%}] "
            f"n={int(m['n_scored'])} steps={m['mean_steps']:.1f} "
            f"tokens={int(m['tokens_in'])}/{int(m['tokens_out'])} "
            f"infra_errors={int(m['infra_errors'])}"
        )
        print(f"           episodes: {agent.episodes_dir}")
    print()
    print("Open the runs in MLflow:")
    print(f"  {ui_hint(result.tracking_uri)}")
