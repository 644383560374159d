"""A sweep: its stage graph run as a graph (`schedule.StageScheduler`: every stage once,
several at a time as the capacity allows; each missing episode once), and each sweep
point's episodes, records and metrics read back from the ledger.

Each stage is run by its own node type (`Stage.run`, registered in `stage_kinds`): the
sweep names no kind. What a runner may use is this class's public side: `play` (an
episode stage's missing episodes), `memory` (banks, `memory_stage.MemoryStage`),
`servers` (the model pools), `ledger`, `graph`, `say` and `line`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

from tqdm import tqdm

from distillery.orchestrator.core.config import ClusterConfig, DistilleryConfig
from distillery.orchestrator.execution.capacity import Capacity, Grant
from distillery.orchestrator.execution.dispatch import run_agent
from distillery.orchestrator.execution.memory_stage import MemoryStage
from distillery.orchestrator.execution.metrics import agent_metrics
from distillery.orchestrator.execution.observers import StageObserver
from distillery.orchestrator.execution.observers import notify as notify_observers
from distillery.orchestrator.execution.server_pool import ServerPool
from distillery.orchestrator.planning.descriptors import name_sweep
from distillery.orchestrator.planning.plan import EvalPoint, StageGraph, server_key
from distillery.orchestrator.planning.plan_listing import stage_line
from distillery.orchestrator.stages.stage import (
    EpisodeStage,
    MemoryRead,
    Stage,
    StageKey,
    digest_of,
    effective_seed,
)
from distillery.orchestrator.state.ledger import Ledger
from distillery.workers.envs.base import Task
from distillery.workers.envs.registry import summed_benchmark_counters
from distillery.workers.episodes import AgentJob, EpisodeSummary
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory_service import MemoryJob
from distillery.workers.storage import Location
from distillery.workers.trajectories import EpisodeRecord, read_episode_file_bytes

log = logging.getLogger(__name__)


def sweep_id_for(graph: StageGraph) -> str:
    """The same sweep (same points) resumes into the same folder and MLflow parent."""
    first = graph.configs[0]
    if first.run_name:
        return first.run_name
    return f"{first.experiment.name}-{digest_of(sorted(graph.points))[:10]}"


class Sweep:
    """Runs a stage graph: each stage once, each missing episode once, then logs."""

    def __init__(self, graph: StageGraph, progress: bool = True) -> None:
        self.graph = graph
        self.progress = progress
        self.cfg = graph.configs[0]  # runtime knobs are shared by all points
        self.ledger = Ledger(self.cfg.output_dir)
        self.sweep_id = sweep_id_for(graph)
        self.sweep_dir = self.ledger.sweep_dir(self.sweep_id)
        self.servers = ServerPool(graph, self.sweep_dir / "logs", self.say)
        self.memory = MemoryStage(
            self.cfg, self.ledger, self.servers, graph.tasks, self.say, self.line
        )
        self.infra: Counter[str] = Counter()  # what was retried, for logs and MLflow
        self.names = name_sweep(graph)
        self.stages_run = 0
        self.stages_cached = 0
        # Told when each stage starts and ends and when each episode lands (live MLflow
        # runs, the heartbeat): `observers.StageObserver`.
        self.observers: list[StageObserver] = []
        # Observers are told one event at a time, whichever stage's thread it comes from.
        self._observing = threading.Lock()
        # What each running stage that plays episodes was granted (the scheduler's).
        self.grants: dict[StageKey, Grant] = {}
        self.capacity: Capacity | None = None  # the scheduler's, while it runs
        # Episodes each running stage still has to dispatch (its dispatcher's last
        # word): a stage with some left may widen (`Capacity.grow`).
        self.dispatch_left: dict[StageKey, int] = {}
        # When each stage of this run started (epoch seconds): a queued observer told
        # of it later still knows.
        self.started_at: dict[StageKey, float] = {}
        self._bars = _BarRows()

    # -- stages --------------------------------------------------------------------

    def run_stages(self) -> None:
        """Every stage, several at once as far as the capacity allows (at most
        `cluster.max_stages_in_flight`; 0: no cap); the first failure is raised after
        the stages that do not read it have ended."""
        from distillery.orchestrator.execution.schedule import StageScheduler

        StageScheduler(self, self.cfg.cluster.max_stages_in_flight).run()

    def notify(self, event: str, *args: Any) -> None:
        with self._observing:
            notify_observers(self.observers, event, *args)

    def model_order(self, key: StageKey) -> str:
        models = self.graph.stages[key].models.values()
        return ",".join(server_key(m) for m in models)

    def episode_model(self, stage: Stage) -> ModelConfig:
        """The model a stage's episodes are played by (its own, else its role's)."""
        if stage.model is not None:
            return stage.model
        if isinstance(stage, EpisodeStage):
            return self.model_of(stage)
        raise ValueError(f"{stage.key} plays episodes but names no model")

    def granted(self, stage: Stage, model: ModelConfig) -> tuple[ClusterConfig, ModelConfig]:
        """The cluster and model a stage's episodes run with: workers sized to its
        grant's episodes (each reserving its part of a worker's CPUs) and its share of
        each replica's request slots (runtime fields: not the stage's identity, nor the
        servers' key). Without a grant (a stage run by itself): all of them."""
        grant = self.grants.get(stage.key)
        cluster = self.cfg.cluster
        if grant is None:
            return cluster, model
        workers, each = grant.workers, grant.each
        cluster = cluster.model_copy(
            update={
                "num_workers": workers,
                "episodes_per_worker": each,
                "worker_num_cpus": cluster.worker_num_cpus * each / cluster.episodes_per_worker,
            }
        )
        if grant.per_replica > 0:
            model = model.model_copy(update={"max_concurrency_per_server": grant.per_replica})
        return cluster, model

    def bar_row(self, key: StageKey) -> int | None:
        """The terminal row of a running stage's progress bar (None: one stage at a
        time, the bar where the cursor is)."""
        if self.cfg.cluster.max_stages_in_flight == 1:
            return None
        return self._bars.row(key)

    def bar_done(self, key: StageKey) -> None:
        self._bars.free(key)

    def play(self, stage: EpisodeStage, prefix: str, read: MemoryRead | None = None) -> bool:
        """Play the stage's missing episodes (`read`: the bank its student reads);
        False when none is missing."""
        needed = self.graph.needs.get(stage.key, set())
        done = self.ledger.episodes(stage.key)
        missing = longest_first(
            in_benchmark_order(needed - set(done), self.graph.tasks), self.graph.tasks
        )
        if not missing:
            self.say(f"{prefix} {stage.key} cached: {len(needed)} episodes  {self.line(stage)}")
            return False
        self.say(
            f"{prefix} {stage.key} running {len(missing)} episodes "
            f"({len(needed) - len(missing)} cached)  {self.line(stage)}"
        )
        model = self.model_of(stage)
        cfg = self._config_of(stage)
        bound = cfg.memory.bounds.max_injected_chars
        memory = self.memory.read_job(read, bound) if read is not None else None
        endpoints = self.servers.endpoints(model)
        directory = self.servers.directory(model)
        cluster, share = self.granted(stage, model)
        job = self.agent_job(stage, share, memory)
        try:
            run = run_agent(
                job,
                endpoints,
                missing,
                cluster,
                self.progress,
                on_summary=lambda s: self._episode_done(stage.key, s),
                directory=directory,
                desc=stage.progress_line(self.names.stage(stage.key)),
                position=self.bar_row(stage.key),
                on_load=lambda n, left: self._load(stage.key, model, n, left),
                live_grant=lambda: self.grants.get(stage.key),
                max_per_worker=self.cfg.cluster.episodes_per_worker,
            )
        finally:
            self.dispatch_left.pop(stage.key, None)
            self.bar_done(stage.key)
        with self._observing:
            self.infra.update(run.infra)
        # Its bar is cleared when several stages run (each had its own row): its end is
        # a line of its own.
        scored = [x for x in run.summaries if x.success is not None]
        won = sum(1 for x in scored if x.success)
        self.say(
            f"{prefix} {stage.key} done: {len(run.summaries)} episodes in {run.wall_s:.0f} s "
            f"(success {won}, failed {len(scored) - won}, infra errors "
            f"{len(run.summaries) - len(scored)})  {self.line(stage)}"
        )
        return True

    def _load(self, key: StageKey, model: ModelConfig, in_flight: int, left: int) -> None:
        """A stage's episodes in flight (its model's serving time); once nothing is left
        to dispatch, the slots its tail no longer uses go back to the waiting stages."""
        self.servers.in_flight(model, key, in_flight)
        self.dispatch_left[key] = left
        if left == 0 and self.capacity is not None:
            self.capacity.shrink(str(key), in_flight)

    def _episode_done(self, key: StageKey, summary: EpisodeSummary) -> None:
        self.ledger.record_episode(key, summary)  # first: no result is lost
        self.notify("episode", key, summary)

    def model_of(self, stage: EpisodeStage) -> ModelConfig:
        """The model an episode stage plays (the oracle included), as its config has it."""
        cfg = self._config_of(stage)
        return cfg.teacher if stage.role == "teacher" else cfg.student

    def agent_job(
        self, stage: EpisodeStage, model: ModelConfig, memory: MemoryJob | None
    ) -> AgentJob:
        """What an episode worker needs to play `model` on the stage's benchmark; its
        sampling seed is the sweep point's for students (every seed reads the same
        teacher memory)."""
        cfg = self._config_of(stage)
        seed = effective_seed(model, cfg.seed if stage.role == "student" else 0)
        return AgentJob(
            run_id=self.sweep_id,
            stage=stage.key.kind,
            role=stage.role,
            model=model.model_copy(update={"seed": seed}),
            benchmark=cfg.benchmark.name,
            benchmark_options=dict(
                stage.options if stage.options is not None else cfg.benchmark.options
            ),
            episodes_dir=self.ledger.episodes_dir(stage.key).uri,
            max_steps_per_turn=cfg.benchmark.max_steps_per_turn,
            episode_timeout_s=cfg.agent.episode_timeout_s,
            episode_retries=cfg.agent.episode_retries,
            retry_backoff_s=cfg.agent.retry_backoff_s,
            memory=memory,
        )

    def _config_of(self, stage: Stage) -> DistilleryConfig:
        """A sweep point's config that uses this stage (all agree on its identity)."""
        for point in self.graph.points.values():
            if stage.key in point.upstream:
                return point.cfg
        return self.cfg

    def line(self, stage: Stage) -> str:
        return stage_line(self.graph, stage.key, self.names)

    def say(self, text: str) -> None:
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
        # What the benchmark counted (e.g. grader timeouts), summed over the episodes.
        metrics.update(summed_benchmark_counters(point.cfg.benchmark.name, records))
        if point.retrieval is not None:
            metrics.update(memory_method(point.method.kind).metrics(records))
        if point.bank_stage is not None:
            output = self.ledger.output(point.bank_stage)
            if output is not None:
                metrics.update({f"bank_{t}": float(n) for t, n in output.counts.items()})
                metrics.update(
                    {f"build.{k.replace(':', '.')}": float(v) for k, v in output.stats.items()}
                )
        return metrics


class _BarRows:
    """Rows for the progress bars of the stages running at once: each its own row,
    the lowest free one, so bars never interleave."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[StageKey, int] = {}

    def row(self, key: StageKey) -> int:
        with self._lock:
            if key not in self._rows:
                taken = set(self._rows.values())
                self._rows[key] = next(i for i in range(len(taken) + 1) if i not in taken)
            return self._rows[key]

    def free(self, key: StageKey) -> None:
        with self._lock:
            self._rows.pop(key, None)


def longest_first(task_ids: list[str], tasks: dict[str, Task]) -> list[str]:
    """Dispatch order: tasks with more user turns first (stable otherwise).

    With C slots the run ends when its last episode does; starting the long ones early
    keeps one long episode from running alone at the end (on BFCL at C=64 this raises
    the best possible speed-up from 0.79 to 0.89 of C for 200 episodes). Turn counts
    are what the agent sees anyway: no ground truth is used."""
    return sorted(task_ids, key=lambda t: -len(tasks[t].turns) if t in tasks else 0)


def in_benchmark_order(task_ids: set[str], tasks: dict[str, Task]) -> list[str]:
    """The benchmark's own task order (`load_tasks` order, which `tasks` keeps), so
    dispatch never depends on how a benchmark spells its ids (string order would put
    multi_turn_base_10 before _9)."""
    position = {task_id: i for i, task_id in enumerate(tasks)}
    return sorted(task_ids, key=lambda t: (position.get(t, len(position)), t))
