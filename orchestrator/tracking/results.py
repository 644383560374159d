"""A sweep's results and their provenance: the result records the driver returns, each
point logged as an MLflow child run, the points / episodes / stages tables of
`distillery report`, and what the parent run records (git SHA, package versions,
infrastructure retries).
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from distillery.orchestrator.core.config import MethodConfig
from distillery.orchestrator.core.protocols import TaskSplit
from distillery.orchestrator.execution.dispatch import INFRA_COUNTS
from distillery.orchestrator.planning.plan import EvalPoint
from distillery.orchestrator.stages.stage import StageKey, effective_seed
from distillery.orchestrator.state.sweep_tables import (
    EPISODES,
    METHOD_COLUMNS_TAG,
    POINTS,
    STAGES,
    write_sweep_table,
)
from distillery.orchestrator.tracking.tracker import EvalDataset, Tracker, safe_params
from distillery.redaction import redact_obj
from distillery.workers.envs.registry import (
    action_format_deviation,
    benchmark_class,
    known_deviations,
)
from distillery.workers.llm.config import ModelConfig, gpus_of
from distillery.workers.memory.registry import memory_method
from distillery.workers.storage import Location
from distillery.workers.trajectories import EpisodeSummary

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep

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
    descriptor: str = ""  # what tells this point from the sweep's others: "k=3 seed=1"


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


def local_or_uri(location: Location) -> Path | str:
    """A folder as the results show it: a local path, or the object store's URI."""
    return location.local_path if location.is_local else location.uri


def log_points(
    sweep: Sweep,
    tracker: Tracker,
    parent_id: str,
    tags: dict[str, str],
    logged: dict[str, MethodResult] | None = None,
) -> dict[str, MethodResult]:
    """Every point's result, in the graph's order: those `logged` already (live runs
    close a point's run when its stage ends), the others logged now."""
    logged = logged or {}
    out: dict[str, MethodResult] = {}
    for point in sweep.graph.points.values():
        found = logged.get(point.point_id)
        out[point.point_id] = found or log_point(sweep, tracker, parent_id, tags, point)
    return out


@dataclass(frozen=True)
class PointRun:
    """What a point's MLflow child run carries from the moment it is opened."""

    name: str
    params: dict[str, str]
    tags: dict[str, str]


def point_run(sweep: Sweep, point: EvalPoint, tags: dict[str, str]) -> PointRun:
    """The child run's name (what tells the point from the sweep's others first, so a
    name cut short in the runs table still tells them apart), its params (the point's
    own settings and its method's catalog entry, never the whole catalog) and tags."""
    method = point.method
    retrieval = point.retrieval
    episodes_dir = sweep.ledger.episodes_dir(point.stage)
    descriptor = sweep.names.point(point.point_id)
    point_tags = {
        **tags,
        **point_descriptors(point),
        "distillery.point_id": point.point_id,
        "distillery.descriptor": descriptor,
        "stage": str(point.stage),
        "stages": ",".join(str(k) for k in point.upstream),
        # Where the point's episode Parquet files are (a remote root's are not copied
        # into MLflow's artifacts).
        "distillery.episodes_uri": episodes_dir.uri,
    }
    if retrieval is not None:
        # Which tags are the method's own report columns (`distillery compare` shows
        # them for a run it reads from MLflow).
        own = memory_method(method.kind).report_columns(retrieval)
        point_tags[METHOD_COLUMNS_TAG] = ",".join(k for k in own if k not in POINTS.names)
    params = {
        **point_params(point),
        "method": point.method_name,
        "method.kind": method.kind,
        # The collections a memory method reads, where its settings name them.
        "method.types": ",".join(getattr(retrieval, "types", None) or ()),
        "eval_task_ids_sha": point.split.eval_ids_sha,
        "eval_n_tasks": str(len(point.split.eval_ids)),
    }
    model = point.model.name
    parts = [descriptor, point.method_name]
    if f"student={model}" not in descriptor.split():
        parts.append(model)
    name = " · ".join(p for p in parts if p)
    return PointRun(name, params, point_tags)


def point_params(point: EvalPoint) -> dict[str, str]:
    """The MLflow params of a point: the settings its result depends on (the benchmark,
    protocol, agent and seed; the student where it plays, the teacher where its
    episodes are read, memory settings where it reads memory) and its own catalog
    entry, flattened, secrets redacted."""
    return safe_params(config_params(point.cfg, point_sections(point), [point.method_name]))


def point_sections(point: EvalPoint) -> set[str]:
    """The top-level config keys a point's result depends on."""
    keep = {"experiment", "benchmark", "protocol", "agent", "seed", "run_name", "output_dir"}
    if point.role == "student":
        keep.add("student")
    if point.uses_teacher:
        keep.add("teacher")
    if point.bank_stage is not None or point.retrieval is not None:
        keep.update({"memory", "builder_models"})
    return keep


def config_params(
    cfg: Any, sections: Iterable[str] | None, methods: Iterable[str]
) -> dict[str, Any]:
    """The config as a dict for params: `sections` of it (None: all) with the catalog
    cut down to `methods`' entries."""
    data = cfg.model_dump(mode="json")
    wanted = set(methods)
    data["method_catalog"] = {k: v for k, v in data["method_catalog"].items() if k in wanted}
    data.pop("sweep", None)  # the grid's axes: each point's values are its own settings
    if sections is not None:
        keep = set(sections) | {"method_catalog"}
        data = {k: v for k, v in data.items() if k in keep}
    return data


def log_point(
    sweep: Sweep,
    tracker: Tracker,
    parent_id: str,
    tags: dict[str, str],
    point: EvalPoint,
    *,
    run_id: str | None = None,
    end_time_ms: int | None = None,
) -> MethodResult:
    """Log a point whose stage is finished as its child run (`run_id`, else the child
    of the parent tagged with its point id, else a new one): metrics, the per-task
    table, the split, trajectories and traces; the run is closed at `end_time_ms`
    (default: now)."""
    cfg = point.cfg
    summaries = sweep.point_summaries(point)
    needs_records = point.retrieval is not None or cfg.tracking.trace_sample != 0
    records = sweep.point_records(summaries) if needs_records else []
    metrics = {
        **sweep.point_metrics(point, summaries, records),
        **point_cost_metrics(sweep, point),
    }
    episodes_dir = sweep.ledger.episodes_dir(point.stage)
    run = point_run(sweep, point, tags)
    point_tags = {
        **run.tags,
        # Said in words too: a point without a scored episode has a NaN success rate.
        "distillery.unscored_episodes": str(int(metrics["n_unscored"])),
    }
    params = dict(run.params)
    if point.bank_stage is not None:
        params["memory.bank_id"] = sweep.memory.bank_of(point.bank_stage)
    child_id = tracker.log_agent(
        run_name=run.name,
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
        run_id=run_id,
        parent_run_id=parent_id,
        dataset=EvalDataset(
            cfg.benchmark.name, list(point.split.eval_ids), point.split.eval_ids_sha
        ),
        traces=records,
        trace_sample=cfg.tracking.trace_sample,
        trace_tags={k: point_tags[k] for k in TRACE_TAGS if point_tags.get(k)},
        end_time_ms=end_time_ms,
    )
    return MethodResult(
        point.method_name,
        point.method,
        point.role,
        point.model,
        local_or_uri(episodes_dir),
        summaries,
        metrics,
        child_id,
        point.point_id,
        str(point.stage),
        run.tags["distillery.descriptor"],
    )


# The point's tags every one of its traces carries (the traces list filters by them).
TRACE_TAGS = ("method", "method_kind", "student", "teacher", "benchmark", "protocol", "seed")


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
        "memory_types": "",  # a memory method's tags say which
        # Deviations from the benchmark's own pipeline ("none": faithful to it): those
        # its adapter declares (always on), those its options turn on, and the agent's
        # action format where the benchmark's harness plays another (AppWorld: native).
        "deviations": ",".join(point_deviations(point)) or "none",
    }
    if point.bank_stage is not None:  # who wrote the bank it reads
        out["memory_writer"] = point.memory_writer or "deterministic"
    if r is not None:
        out.update(memory_method(point.method.kind).tags(r, cfg.memory.embedder.model))
    return out


def point_deviations(point: EvalPoint) -> tuple[str, ...]:
    """The deviations of a point's episodes from the benchmark's own pipeline."""
    cfg = point.cfg
    found = (*known_deviations(cfg.benchmark.name), *cfg.benchmark.deviations())
    if point.model.backend != "oracle":
        by_format = action_format_deviation(cfg.benchmark.name, point.model.action_format)
        if by_format:
            found = (*found, by_format)
    return found


def write_sweep_tables(sweep: Sweep, logged: dict[str, MethodResult]) -> None:
    """points / episodes / stages tables for `distillery report` (their columns:
    `sweep_tables.py`, which the report reads them with)."""
    graph = sweep.graph
    points, episodes = [], []
    for point in graph.points.values():
        r = point.retrieval
        result = logged[point.point_id]
        rollouts, feedback = graph.stages[point.stage].test_time()
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
            "benchmark_variant": benchmark_variant(point.cfg),
            "protocol": point.cfg.protocol.name,
            "memory_types": "",  # a memory method's report columns say which
            "seed": point.cfg.seed,
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
            "uses_teacher": point.uses_teacher,
            "test_time_rollouts": rollouts,
            "test_time_feedback": feedback,
        }
        if r is not None:
            # The method's own columns (the writer lists them in `method_columns`).
            row.update(memory_method(point.method.kind).report_columns(r))
        points.append(row)
        for s in result.summaries:
            episodes.append({"point_id": point.point_id, **_episode_columns(s)})
    stages = [row for key in graph.stages for row in stage_rows(sweep, key)]
    for spec, rows in ((POINTS, points), (EPISODES, episodes), (STAGES, stages)):
        write_sweep_table(sweep.sweep_dir / spec.file, spec, redact_obj(rows))


# Identity options that are digests of data or prompt files, not what a reader names.
_DIGEST_OPTIONS = frozenset({"data", "prompt"})


def benchmark_variant(cfg: Any) -> str:
    """The benchmark's options that decide what is played, off their defaults, as
    `key=value` (sorted, comma-joined): "" for the defaults."""
    options = cfg.benchmark.identity_options()
    return ",".join(
        f"{k}={v}"
        for k, v in sorted(options.items())
        if k not in _DIGEST_OPTIONS and isinstance(v, str | int | float | bool)
    )


def _episode_columns(summary: EpisodeSummary) -> dict[str, Any]:
    """The episodes table's columns of one summary (the fields of the same name)."""
    values = asdict(summary)
    return {name: values[name] for name in EPISODES.names if name != "point_id"}


def stage_rows(sweep: Sweep, key: StageKey) -> list[dict[str, Any]]:
    """The stages table's rows of one stage: one per model and role it used (its node
    type's `cost_rows`). Its wall time is on its first row; each row holds the
    GPU-seconds of its own model's servers that were the stage's: its share of their
    serving time as recorded (`RunRecord.gpu_s_by_model`), or, for a run recorded before
    stages ran at once, the stage's wall time times the model's GPUs."""
    stage = sweep.graph.stages[key]
    runs = sweep.ledger.runs(key)
    needs = set(sweep.graph.needs.get(key, set()))
    wall = float(sum(r.wall_s for r in runs))
    models = {m.name: m for m in stage.models.values()}

    def gpu_s(model: ModelConfig | None) -> float:
        if model is None:
            return 0.0
        return sum(
            r.gpu_s_by_model.get(model.name, 0.0)
            if r.gpu_s_by_model is not None
            else r.wall_s * gpus_of(model)
            for r in runs
        )

    rows = []
    for index, cost in enumerate(stage.cost_rows(sweep.ledger, needs)):
        model = models.get(cost.model)
        rows.append(
            {
                "stage_hash": key.digest,
                "kind": key.kind,
                "label": stage.label,
                "role": cost.role,
                "model": cost.model,
                "tokens_in": cost.tokens_in,
                "tokens_out": cost.tokens_out,
                "n_llm_calls": cost.n_llm_calls,
                "embed_tokens": cost.embed_tokens,
                "wall_s": wall if index == 0 else 0.0,
                "gpu_s": gpu_s(model),
                "ran": bool(runs),
            }
        )
    return rows


def point_cost_metrics(sweep: Sweep, point: EvalPoint) -> dict[str, float]:
    """`cost.<kind>.<role>.<count>` of every stage the point depends on, one metric per
    model and role (a brew's student, teacher and curator each), for MLflow."""
    out: dict[str, float] = {}
    for key in point.upstream:
        for row in stage_rows(sweep, key):
            for count in ("tokens_in", "tokens_out", "n_llm_calls"):
                name = f"cost.{row['kind']}.{row['role']}.{count}"
                out[name] = out.get(name, 0.0) + float(row[count])
    return out


def package_versions(benchmarks: Iterable[str]) -> dict[str, str]:
    """Installed versions of distillery's own stack plus the benchmark's packages."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("distillery", "ray", "mlflow", "qdrant-client", "vllm", "openai"):
        try:
            out[f"version.{name}"] = version(name)
        except PackageNotFoundError:
            continue
    # The benchmark declares its own packages (BFCL: bfcl-eval; a venv-hosted one: its venv's).
    for benchmark in sorted(set(benchmarks)):
        for name, ver in benchmark_class(benchmark).versions().items():
            out[f"version.{name}"] = ver
    return out


def results_frame(summaries: list[EpisodeSummary]) -> pd.DataFrame:
    columns = list(EpisodeSummary.__dataclass_fields__)
    return pd.DataFrame([asdict(s) for s in summaries], columns=columns)


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


def log_infra_counts(sweep: Sweep, tracker: Tracker, parent_id: str) -> None:
    """What this invocation retried (episodes, workers, replicas), printed and logged
    on the sweep's parent run as `infra.*` metrics (one value per invocation)."""
    counts = Counter(sweep.infra)
    counts.update(sweep.servers.stats())
    if any(counts.values()):
        sweep.say(
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


def shared_params(all_params: list[dict[str, str]]) -> dict[str, str]:
    """The parameters every point of a sweep has with the same value (its parent run's)."""
    first = all_params[0]
    return {k: v for k, v in first.items() if all(p.get(k) == v for p in all_params[1:])}


def log_gpu_time(sweep: Sweep, tracker: Tracker, parent_id: str) -> None:
    """Each model's GPU time in this invocation, held (servers up) and serving (a request
    in flight): printed, written to the sweep's folder (`gpu_time/<stamp>.json`, one per
    invocation: a resumed sweep adds its own) and logged on the parent run as
    `gpu.<model>.held_h`, `.serving_h` and `.busy` (serving / held)."""
    import time
    import uuid

    times = [t for t in sweep.servers.gpu_time() if t.gpus > 0 or t.held_s > 0]
    if not times:
        return
    for t in times:
        busy = f"{t.busy:.0%}" if t.busy is not None else "-"
        sweep.say(
            f"GPU time of {t.model}: {t.held_gpu_h:.3f} GPU-h held, "
            f"{t.serving_gpu_h:.3f} serving ({busy} busy; {t.gpus:g} GPUs, "
            f"servers up {t.held_s:.0f} s)"
        )
    stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
    with contextlib.suppress(Exception):  # a record for the report: never the sweep's end
        (sweep.sweep_dir / "gpu_time" / stamp).write_json(
            {"at": time.time(), "models": [t.as_json() for t in times]}
        )
    with contextlib.suppress(Exception):  # tracking trouble must not lose the sweep
        for t in times:
            tracker.client.log_metric(parent_id, f"gpu.{t.model}.held_h", t.held_gpu_h)
            tracker.client.log_metric(parent_id, f"gpu.{t.model}.serving_h", t.serving_gpu_h)
            if t.busy is not None:
                tracker.client.log_metric(parent_id, f"gpu.{t.model}.busy", t.busy)
