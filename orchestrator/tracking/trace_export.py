"""Episode traces exported by a process of their own, beside the driver.

Writing a point's traces is MLflow's span export (its SQLAlchemy store writes every
span of every episode): in bfcl_table1's rehearsal it was two thirds of the driver's
interpreter time, which its stages' dispatch threads then waited for. `TraceExporter`
hands each point's traces (`TraceLog.log`'s arguments) to one child process, which does
what `TraceLog.log` does with a client of its own, on another core, with MLflow's
exporter set for writing whole points (`writer_settings`). The driver goes on; at its
end it waits for what it handed over (`close`), each export at most `stall_s`. A writer
that dies or hangs is one warning line; the next point starts another.

Nothing is lost on a crash: an export is idempotent (a run's traces already logged are
kept) and every point is logged again by the next run of the same command.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
# Ours: the writer's CPU priority, the lowest. Traces are bookkeeping: on a machine the
# sweep's own processes keep busy (Ray's workers run at niceness 15, Ray's
# `worker_niceness`), the writer takes the CPU they leave and catches up when they end,
# rather than slowing the episodes that hold GPUs.
NICENESS = 19
# Ours: how long the writer's process may take to exit once its points are written (or
# once killed) before the driver goes on without it: it exits in about a second.
EXIT_S = 60.0

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
    job: int


class WriterGone(RuntimeError):
    """The trace writer's process exited (killed, out of memory) with exports pending."""


class _Writer:
    """The child process and its two queues: jobs in, `(job, result)` out. The queues'
    feeder threads hand a point over without waiting for the child to read it."""

    def __init__(self, settings: Mapping[str, str]) -> None:
        # spawn: the driver has Ray's and MLflow's threads, which a fork would copy
        # mid-flight.
        context = multiprocessing.get_context("spawn")
        self.jobs: multiprocessing.Queue[Any] = context.Queue()
        self.results: multiprocessing.Queue[Any] = context.Queue()
        self.process = context.Process(
            target=_serve,
            args=(self.jobs, self.results, dict(settings)),
            name="distillery trace writer",
            daemon=True,  # never outlives the driver
        )
        self.process.start()
        self.sent = 0

    def submit(self, *args: Any) -> int:
        self.sent += 1
        self.jobs.put((self.sent, args))
        return self.sent

    def result(self, job: int, timeout_s: float) -> Any:
        """Job `job`'s result (jobs end in the order sent); TimeoutError past
        `timeout_s`, WriterGone when the process exited, RuntimeError when it raised."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                done, outcome = self.results.get(timeout=min(0.5, timeout_s))
            except queue.Empty:
                if not self.process.is_alive():
                    raise WriterGone(f"exit code {self.process.exitcode}") from None
                if time.monotonic() >= deadline:
                    raise TimeoutError from None
                continue
            if done != job:  # an earlier job's, which was not waited for
                continue
            if isinstance(outcome, BaseException):
                raise RuntimeError(str(outcome))
            return outcome

    def stop(self, kill: bool) -> None:
        """`kill`: at once (mid-export or stuck); else after the jobs sent, killed if it
        has not exited `EXIT_S` later."""
        if not kill:
            self.jobs.put(None)
            self.process.join(EXIT_S)
            if self.process.is_alive():
                _log.warning(
                    "traces: the trace writer had not exited %.0f s after its last point; stopped",
                    EXIT_S,
                )
                kill = True
        if kill:
            self.process.kill()
            self.process.join(EXIT_S)
        for channel in (self.jobs, self.results):
            channel.cancel_join_thread()  # what the child never read is dropped
            channel.close()


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
        self._writer: _Writer | None = None
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
            job = self._start().submit(
                self.uri,
                self.experiment_id,
                sorted(redaction.registered()),
                run_id,
                list(records),
                sample,
                point_id,
                dict(tags or {}),
            )
        except Exception as exc:  # the child could not start: the next point tries again
            _log.warning("run %s: its traces were not exported: %s", run_id, exc)
            self._stop(kill=True)
            return
        self._pending.append(_Pending(run_id, len(records), job))

    def close(self, wait: bool = True) -> None:
        """Wait for every export handed over (each at most `stall_s`), then stop the
        child; `wait=False` (the sweep was stopped) drops what is not exported yet."""
        if wait:
            self.drain()
        self._stop(kill=not wait)

    def drain(self) -> None:
        """Wait for every export handed over (each at most `stall_s`); the child stays."""
        while self._pending:
            self._wait(self._pending[0])

    def _wait(self, pending: _Pending) -> None:
        started = time.monotonic()
        assert self._writer is not None  # a pending export has its child
        try:
            written, seconds = self._writer.result(pending.job, self.stall_s)
        except TimeoutError:
            _log.warning(
                "traces: stopped waiting after %.0f s for the export of run %s's %d "
                "episodes; the next run of the same command logs the traces it lacks",
                time.monotonic() - started,
                pending.run_id,
                pending.episodes,
            )
            self._stop(kill=True)  # a stuck child is not waited for again
        except (WriterGone, RuntimeError) as exc:
            _log.warning(
                "run %s: exporting its traces failed (the trace writer: %s); the next run "
                "of the same command logs the traces it lacks",
                pending.run_id,
                exc,
            )
            self._stop(kill=True)
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

    def _start(self) -> _Writer:
        if self._writer is None:
            self._writer = _Writer(self.settings)
        return self._writer

    def _stop(self, kill: bool) -> None:
        writer, self._writer = self._writer, None
        if kill:
            self._pending.clear()  # the next run of the same command logs them
        if writer is not None:
            writer.stop(kill)


# -- in the child ----------------------------------------------------------------------

_trace_logs: dict[tuple[str, str], TraceLog] = {}


def _serve(
    jobs: multiprocessing.Queue[Any], results: multiprocessing.Queue[Any], settings: dict[str, str]
) -> None:
    """The child: each job's traces written, in order, until the driver says stop."""
    os.environ.update(settings)  # before MLflow makes its trace exporter, which reads them
    os.nice(max(0, NICENESS - os.nice(0)))
    while (item := jobs.get()) is not None:
        job, args = item
        try:
            outcome: Any = _export(*args)
        except Exception as exc:  # the driver says so, in one line (as text: it pickles)
            outcome = RuntimeError(f"{type(exc).__name__}: {exc}")
        results.put((job, outcome))


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
