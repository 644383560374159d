"""Live MLflow runs: each evaluation point's child run is open (RUNNING) while its stage
runs, with running metrics, and closed with the stage's real start and end times.

A point's run opens when its stage starts: found by its point id under the sweep's
parent (a resumed sweep continues the same run) or created, with the point's params
and tags. Each finished episode of the stage updates the point's running metrics
(`progress.*`, logged at most every `tracking.progress_interval_s`, with the episodes
done as the step: MLflow draws their history). When the stage ends, the point's results
(metrics, tables, traces) are logged and the run is closed at the time the stage
ended, so its duration is the stage's wall time (for a stage reused from the ledger:
the times of the run that produced it). A sweep that stops early leaves its open runs
KILLED (Ctrl-C, SIGTERM) or FAILED.
"""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING

from mlflow.entities import RunStatus

from distillery.orchestrator.stages.stage import StageKey
from distillery.orchestrator.tracking.results import MethodResult, log_point, point_run
from distillery.workers.trajectories import EpisodeSummary

if TYPE_CHECKING:
    from distillery.orchestrator.execution.observers import QueuedObserver
    from distillery.orchestrator.execution.sweep import Sweep
    from distillery.orchestrator.planning.plan import EvalPoint
    from distillery.orchestrator.tracking.tracker import Tracker

log = logging.getLogger(__name__)

PROGRESS_PREFIX = "progress."


class LiveRuns:
    """The sweep's child runs while it runs (a stage observer of `Sweep`)."""

    def __init__(
        self, sweep: Sweep, tracker: Tracker, parent_id: str, tags: dict[str, str]
    ) -> None:
        self.sweep = sweep
        self.tracker = tracker
        self.parent_id = parent_id
        self.tags = tags
        self.interval_s = sweep.cfg.tracking.progress_interval_s
        self.points_of: dict[StageKey, list[EvalPoint]] = defaultdict(list)
        for point in sweep.graph.points.values():
            self.points_of[point.stage].append(point)
        self.eval_ids = {p.point_id: frozenset(p.split.eval_ids) for p in self.points()}
        self.open: dict[str, str] = {}  # point id -> its RUNNING child run
        self.tally: dict[str, Counter[str]] = {}
        # The tasks each open point has counted: told from a queue, `stage_started` may
        # read the ledger after some of the stage's episodes are in it, and each is
        # counted once, whether from the ledger or from its event.
        self.counted: dict[str, set[tuple[str, int]]] = {}
        self.logged: dict[str, MethodResult] = {}  # points whose run is closed
        self._flushed_at: dict[StageKey, float] = {}

    def points(self) -> list[EvalPoint]:
        return [p for points in self.points_of.values() for p in points]

    # -- the stage observer --------------------------------------------------------

    def stage_started(self, key: StageKey, prefix: str = "") -> None:
        points = self.points_of.get(key, [])
        if not points:
            return
        done = self.sweep.ledger.all_records(key)
        # A stage the ledger has whole is not run again: its runs keep the times of the
        # run that produced it. One that runs now starts now.
        needed = self.sweep.graph.needs.get(key, set())
        cached = needed <= {t for t, s in done.items() if s.finished}
        start = (_first_start(self.sweep, key) if cached else None) or self.sweep.started_at.get(
            key
        )
        start_ms = _ms(start or time.time())
        for point in points:
            run = point_run(self.sweep, point, self.tags)
            self.open[point.point_id] = self.tracker.open_child(
                run.name,
                run.params,
                run.tags,
                point_id=point.point_id,
                parent_run_id=self.parent_id,
                start_time_ms=start_ms,
            )
            tally: Counter[str] = Counter()
            earlier = [done[t] for t in point.split.eval_ids if t in done]
            for summary in earlier:  # what earlier runs of the stage finished
                _count(tally, summary)
            self.tally[point.point_id] = tally
            self.counted[point.point_id] = {(x.task_id, x.attempt) for x in earlier}
        self._flush(key)

    def episode(self, key: StageKey, summary: EpisodeSummary) -> None:
        points = self.points_of.get(key, [])
        counted = False
        for point in points:
            if point.point_id in self.open and summary.task_id in self.eval_ids[point.point_id]:
                seen = self.counted[point.point_id]
                if (summary.task_id, summary.attempt) not in seen:
                    seen.add((summary.task_id, summary.attempt))
                    _count(self.tally[point.point_id], summary)
                counted = True
        if counted and time.monotonic() - self._flushed_at.get(key, 0.0) >= self.interval_s:
            self._flush(key)

    def stage_finished(self, key: StageKey, ran: bool) -> None:
        points = [p for p in self.points_of.get(key, []) if p.point_id in self.open]
        if not points:
            return
        self._flush(key)
        end = _last_end(self.sweep, key) or time.time()
        for point in points:
            run_id = self.open.pop(point.point_id)
            self.counted.pop(point.point_id, None)
            self.logged[point.point_id] = log_point(
                self.sweep,
                self.tracker,
                self.parent_id,
                self.tags,
                point,
                run_id=run_id,
                end_time_ms=_ms(end),
            )

    def stop(self, told_by: QueuedObserver, interrupted: bool) -> None:
        """The sweep stopped early (`interrupted`: by Ctrl-C or SIGTERM): the points
        whose stages ended before the stop are logged (`told_by.drain`), then every run
        still open is closed (`abort`). A second Ctrl-C while they are logged skips the
        rest of them, and the runs are still closed; the next run of the same command
        logs what was skipped."""
        try:
            if interrupted and told_by.pending():
                print(
                    "distillery: stopping: logging the points that ended before the stop "
                    "(Ctrl-C again to skip them)",
                    file=sys.stderr,
                    flush=True,
                )
            told_by.drain()
        except KeyboardInterrupt:
            interrupted = True
            told_by.give_up()
            print(
                "distillery: skipped; the next run of the same command logs those points",
                file=sys.stderr,
                flush=True,
            )
        self.abort(interrupted)

    def abort(self, interrupted: bool) -> None:
        """The sweep stopped early: close every open run, KILLED when it was interrupted
        (Ctrl-C, SIGTERM), else FAILED. Never raises (the sweep's own error matters)."""
        status = RunStatus.to_string(RunStatus.KILLED if interrupted else RunStatus.FAILED)
        for run_id in list(self.open.values()):
            try:
                self.tracker.terminate(run_id, status)
            except Exception as exc:  # tracking trouble must not hide the sweep's error
                log.warning("could not mark run %s %s: %s", run_id, status, exc)
        self.open.clear()

    # -- running metrics -----------------------------------------------------------

    def _flush(self, key: StageKey) -> None:
        self._flushed_at[key] = time.monotonic()
        for point in self.points_of.get(key, []):
            run_id = self.open.get(point.point_id)
            if run_id is None:
                continue
            tally = self.tally[point.point_id]
            scored = tally["success"] + tally["failure"]
            metrics: dict[str, float] = {
                "episodes_done": tally["done"],
                "episodes_total": len(point.split.eval_ids),
                "success": tally["success"],
                "failure": tally["failure"],
                "infra_errors": tally["infra"],
                "tokens": tally["tokens"],
            }
            if scored:
                metrics["success_so_far"] = tally["success"] / scored
            self.tracker.log_progress(
                run_id, {PROGRESS_PREFIX + k: v for k, v in metrics.items()}, tally["done"]
            )


def _count(tally: Counter[str], summary: EpisodeSummary) -> None:
    tally["done"] += 1
    if summary.success is None:
        tally["infra"] += 1
    else:
        tally["success" if summary.success else "failure"] += 1
    tally["tokens"] += summary.tokens_in + summary.tokens_out


def _first_start(sweep: Sweep, key: StageKey) -> float | None:
    """When the stage's first recorded run started (its ledger's run records)."""
    runs = sweep.ledger.runs(key)
    return min((r.at - r.wall_s for r in runs), default=None)


def _last_end(sweep: Sweep, key: StageKey) -> float | None:
    runs = sweep.ledger.runs(key)
    return max((r.at for r in runs), default=None)


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
