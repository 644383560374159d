"""Episode traces exported by a process of their own, beside the driver.

Writing a point's traces is MLflow's span export (its SQLAlchemy store writes every
span of every episode): in bfcl_table1's rehearsal it was two thirds of the driver's
interpreter time, which its stages' dispatch threads then waited for. `TraceExporter`
hands each point's traces (`TraceLog.log`'s arguments) to one child process, which does
what `TraceLog.log` does with a client of its own, on another core. The driver goes on;
at its end it waits for what it handed over (`close`), each export at most `stall_s`.

Nothing is lost on a crash: an export is idempotent (a run's traces already logged are
kept) and every point is logged again by the next run of the same command.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import TYPE_CHECKING

from distillery import redaction

if TYPE_CHECKING:
    from distillery.orchestrator.tracking.trace_log import TraceLog
    from distillery.workers.trajectories import EpisodeRecord

_log = logging.getLogger(__name__)

# Ours: how long the driver waits for one point's export (its traces' spans written)
# before it stops waiting, with one line. A point of 1,000 episodes exports in about a
# minute on a loaded 2-core machine; a tracking server that stopped answering is given
# MLflow's own retries (MLFLOW_HTTP_REQUEST_TIMEOUT 120 s each) before this.
STALL_S = 900.0
# Ours: points handed over and not yet exported; the next waits for the oldest. Each
# holds its episodes' records (a few MB for 200 episodes) until it is exported.
MAX_PENDING = 4

# The trace writer's MLflow settings, in its child process only (a variable the user
# set wins). MLflow's defaults suit an application that traces as it runs: ten export
# threads, and one store call per five ended spans (mlflow/environment_variables.py,
# MLFLOW_ASYNC_TRACE_LOGGING_*). The writer emits whole points at once; on 200 of
# bfcl_table1's rehearsal episodes in SQLite (bench/trace_write.py) these settings
# write a trace in 0.38 of the time the defaults take.
_WRITER_SETTINGS = {
    # One store call for up to 1,000 spans, about 50 episodes (MLflow: 5).
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "1000",
    # Export tasks queued before the writer flushes (MLflow: 1,000); the span processor's
    # queue of 2,048 bounds it (trace_log._queue_room).
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE": "4000",
    # One export thread (MLflow: 10). SQLite has one writer at a time, so the ten wait
    # on its lock; and with large batches, MLflow's store drops the spans of a trace
    # whose row a concurrent thread is creating ("Could not create trace_info for 9
    # trace(s) after 10 retries; spans for these traces will be dropped", seen with
    # ten threads and batches of 4,000).
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS": "1",
}


def writer_settings() -> dict[str, str]:
    """The MLflow variables the trace writer runs with: ours, except where the user set
    the variable."""
    return {name: os.environ.get(name, value) for name, value in _WRITER_SETTINGS.items()}


@dataclass
class _Pending:
    run_id: str
    episodes: int
    future: Future[tuple[int, float]]


class TraceExporter:
    """`TraceLog.log` done by a child process (started at the first point)."""

    def __init__(
        self,
        uri: str,
        experiment_id: str,
        stall_s: float | None = None,
        max_pending: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.uri = uri
        # The child's MLflow variables (`writer_settings`); {}: MLflow's defaults.
        self.settings = dict(writer_settings() if settings is None else settings)
        self.experiment_id = experiment_id
        self.stall_s = STALL_S if stall_s is None else stall_s
        self.max_pending = max(1, MAX_PENDING if max_pending is None else max_pending)
        self._pool: ProcessPoolExecutor | None = None
        self._pending: list[_Pending] = []
        self.written = 0  # traces the child wrote, and the seconds it took
        self.writing_s = 0.0

    def log(
        self,
        run_id: str,
        records: Sequence[EpisodeRecord],
        sample: int | None = None,
        point_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        """Hand a point's traces over (`TraceLog.log`'s arguments); returns once the
        child has room for them. Best effort, as `TraceLog.log`: trouble is a warning."""
        while len(self._pending) >= self.max_pending:
            self._wait(self._pending[0])
        try:
            future = self._start().submit(
                _export,
                self.uri,
                self.experiment_id,
                sorted(redaction.registered()),
                run_id,
                list(records),
                sample,
                point_id,
                dict(tags or {}),
            )
        except Exception as exc:  # a child that died: the next point starts another
            _log.warning("run %s: its traces were not exported: %s", run_id, exc)
            self._stop(cancel=True)
            return
        self._pending.append(_Pending(run_id, len(records), future))

    def close(self, wait: bool = True) -> None:
        """Wait for every export handed over (each at most `stall_s`), then stop the
        child; `wait=False` (the sweep was stopped) drops what is not exported yet."""
        if wait:
            self.drain()
        self._stop(cancel=not wait)

    def drain(self) -> None:
        """Wait for every export handed over (each at most `stall_s`); the child stays."""
        while self._pending:
            self._wait(self._pending[0])

    def _wait(self, pending: _Pending) -> None:
        started = time.monotonic()
        try:
            written, seconds = pending.future.result(timeout=self.stall_s)
        except FutureTimeout:
            _log.warning(
                "traces: stopped waiting after %.0f s for the export of run %s's %d "
                "episodes; the next run of the same command logs the traces it lacks",
                time.monotonic() - started,
                pending.run_id,
                pending.episodes,
            )
            self._stop(cancel=True)  # a stuck child is not waited for again
        except Exception as exc:  # the child died (BrokenProcessPool) or raised
            _log.warning("run %s: exporting its traces failed: %s", pending.run_id, exc)
            self._stop(cancel=True)
        else:
            self._pending.remove(pending)
            self.written += written
            self.writing_s += seconds

    def summary(self) -> str | None:
        """One line: the traces written and their time each (`cost.trace_write_s`)."""
        if not self.written:
            return None
        each = self.writing_s / self.written
        return (
            f"traces: {self.written:,} episodes written in {self.writing_s:,.0f} s by the "
            f"trace writer, {each:.3f} s each ('cost.trace_write_s={each:.3g}' for --plan)"
        )

    def _start(self) -> ProcessPoolExecutor:
        if self._pool is None:
            # spawn: the driver has Ray's and MLflow's threads, which a fork would copy
            # mid-flight.
            self._pool = ProcessPoolExecutor(
                1,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_set_environment,
                initargs=(self.settings,),
            )
        return self._pool

    def _stop(self, cancel: bool) -> None:
        pool, self._pool = self._pool, None
        if cancel:
            self._pending.clear()
        if pool is None:
            return
        if cancel:
            for process in list((getattr(pool, "_processes", None) or {}).values()):
                process.kill()  # mid-export or stuck: the next run logs what it lacks
        pool.shutdown(wait=not cancel, cancel_futures=cancel)


# -- in the child ----------------------------------------------------------------------

_trace_logs: dict[tuple[str, str], TraceLog] = {}


def _set_environment(settings: dict[str, str]) -> None:
    """The child's first act: MLflow reads these when it makes its trace exporter."""
    os.environ.update(settings)


def _export(
    uri: str,
    experiment_id: str,
    secrets: list[str],
    run_id: str,
    records: list[EpisodeRecord],
    sample: int | None,
    point_id: str | None,
    tags: dict[str, str],
) -> tuple[int, float]:
    """One point's traces, written by this child: the new traces, and the seconds."""
    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.tracking.trace_log import TraceLog

    redaction.register_secrets(secrets)  # the driver's: what it redacts, this does
    redaction.install()
    trace_log = _trace_logs.get((uri, experiment_id))
    if trace_log is None:
        trace_log = TraceLog(MlflowClient(uri), uri, experiment_id)
        _trace_logs[(uri, experiment_id)] = trace_log
    started = time.perf_counter()
    written = len(trace_log.log(run_id, records, sample, point_id, tags))
    return written, time.perf_counter() - started


__all__ = ["MAX_PENDING", "STALL_S", "TraceExporter", "writer_settings"]
