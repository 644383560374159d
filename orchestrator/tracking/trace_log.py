"""Episodes written to a run as MLflow traces: the sampled episodes not yet logged are
emitted span by span through the run's `MlflowClient` (`traces.episode_trace` is the
plan of each), those logged before for episodes no longer sampled are deleted, so a
re-logged point keeps one trace per episode. The `Tracker` logs a point's child run and
hands its episodes here (`Tracker.log_agent`: `tracker.trace_log.log`).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
from mlflow.entities import SpanStatusCode  # noqa: E402
from mlflow.entities.span import NO_OP_SPAN_TRACE_ID  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402
from mlflow.utils.validation import MAX_TAG_VAL_LENGTH  # noqa: E402

from distillery.orchestrator.tracking.traces import (  # noqa: E402
    EPISODE_TAG,
    POINT_ID_TAG,
    annotate_trace,
    episode_key,
    episode_trace,
    sample_episodes,
    stale_traces,
    verdict,
)
from distillery.redaction import redact  # noqa: E402

if TYPE_CHECKING:
    from distillery.workers.trajectories import EpisodeRecord

_log = logging.getLogger(__name__)

# MLflow exports traces from a bounded queue (MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE,
# 1,000 by default; a task per ended span and one per trace) and discards what does not
# fit, with a warning at most every 30 s: 200 episodes of ~20 spans overflow it, and
# bfcl_table1's rehearsal lost traces behind 29 such warnings. One point's traces are
# emitted at a time, and the queue is flushed before the spans emitted since can fill it.
_EMITTING = threading.Lock()


# Spans MLflow's batch span processor holds before it drops them: OTel's default queue,
# or the batch size when larger (mlflow/tracing/processor/base_mlflow.py,
# `_create_batch_span_processor`).
_SPAN_QUEUE = 2048


def _queue_room() -> int:
    """Export tasks (about one per span) between two flushes: half of the smaller of the
    export queue and the span processor's queue (read now: a test, a user or the trace
    writer may set the variables)."""
    from mlflow.environment_variables import (
        MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE,
        MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE,
    )

    spans = max(_SPAN_QUEUE, MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE.get())
    return max(1, min(MLFLOW_ASYNC_TRACE_LOGGING_MAX_QUEUE_SIZE.get(), spans) // 2)


class TraceLog:
    """The traces of one experiment's runs, written through `client` (the Tracker's)."""

    def __init__(self, client: MlflowClient, uri: str, experiment_id: str) -> None:
        self.client = client
        self.uri = uri  # MLflow's trace exporter follows the global tracking URI
        self.experiment_id = experiment_id

    def log(
        self,
        run_id: str,
        records: Sequence[EpisodeRecord],
        sample: int | None = None,
        point_id: str | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Log `records` (one per task; `sample` of them when given, see
        `sample_episodes`) as traces of run `run_id`, each with the benchmark's verdict
        as feedback assessments (`episode_feedback`) and its task as the trace's session.
        Each trace is tagged with `tags` (the point's method, student, ...), the run id,
        the task id and the verdict, so the traces list can be filtered by any of them.

        Idempotent: traces of the run already logged for a sampled episode are kept,
        those of episodes no longer in the sample are deleted. Best effort: a failure
        logs a warning and never fails the run. Returns the ids of the new traces."""
        new_ids: list[str] = []
        try:
            if mlflow.get_tracking_uri() != self.uri:
                mlflow.set_tracking_uri(self.uri)  # the exporter follows the global URI
            chosen = sample_episodes(records, sample)
            wanted = {episode_key(r) for r in chosen}
            existing = self._logged(run_id)
            stale = [tid for key, ids in existing.items() for tid in stale_traces(key, ids, wanted)]
            if stale:
                self.client.delete_traces(self.experiment_id, trace_ids=stale)
            todo = [r for r in chosen if episode_key(r) not in existing]
            room, queued = _queue_room(), 0
            with _EMITTING:
                for record in todo:
                    plan = episode_trace(record)
                    tasks = len(plan.children) + 2  # its spans' exports and the trace's
                    if queued and queued + tasks > room:
                        mlflow.flush_trace_async_logging()
                        queued = 0
                    trace_id = self._emit(run_id, record, plan, point_id, tags or {})
                    queued += tasks
                    if trace_id is not None:
                        new_ids.append(trace_id)
                # Exported asynchronously: durable before the run ends.
                mlflow.flush_trace_async_logging()
        except Exception as exc:  # tracing must never break a sweep
            _log.warning("run %s: logging episode traces failed: %s", run_id, exc, exc_info=True)
        return new_ids

    def _logged(self, run_id: str) -> dict[str, list[str]]:
        """Episode key -> trace ids already logged for this run."""
        out: dict[str, list[str]] = {}
        token: str | None = None
        while True:
            page = self.client.search_traces(
                locations=[self.experiment_id],
                run_id=run_id,
                include_spans=False,
                max_results=500,
                page_token=token,
            )
            for trace in page:
                key = trace.info.tags.get(EPISODE_TAG)
                if key is not None:
                    out.setdefault(key, []).append(trace.info.trace_id)
            token = page.token
            if not token:
                return out

    def _emit(
        self,
        run_id: str,
        record: EpisodeRecord,
        plan: Any,
        point_id: str | None,
        extra_tags: Mapping[str, str],
    ) -> str | None:
        tags = {
            **{k: redact(str(v))[:MAX_TAG_VAL_LENGTH] for k, v in extra_tags.items()},
            "run_id": run_id,
            "task_id": record.task_id,
            # What the checker said (the trace's status says it too: OK only on success).
            "verdict": verdict(record),
            EPISODE_TAG: episode_key(record),
            "distillery.task_id": record.task_id,
            "distillery.success": str(record.success),
            "distillery.termination": record.termination,
            "distillery.agent": record.agent,
        }
        if point_id is not None:
            tags[POINT_ID_TAG] = point_id
        root_plan = plan.root
        spans: list[Any] = []
        # MlflowClient.start_trace(run_id=...) writes trace metadata `mlflow.sourceRun`,
        # which is what links a trace to a run (search_traces(run_id=...), the run's
        # Traces tab); explicit experiment_id avoids the fluent "current experiment".
        root = self.client.start_trace(
            name=root_plan.name,
            span_type=root_plan.span_type,
            inputs=root_plan.inputs,
            attributes=root_plan.attributes,
            tags=tags,
            experiment_id=self.experiment_id,
            start_time_ns=root_plan.start_ns,
            run_id=run_id,
        )
        trace_id = root.trace_id
        if trace_id == NO_OP_SPAN_TRACE_ID:
            _log.warning("tracing is disabled (mlflow.tracing.disable?); no episode traces")
            return None
        try:
            # Children are in start order, a parent before its children; a parent ends
            # after them, so every span is closed once all spans are started.
            for child in plan.children:
                parent = root if child.parent is None else spans[child.parent]
                spans.append(
                    self.client.start_span(
                        name=child.name,
                        trace_id=trace_id,
                        parent_id=parent.span_id,
                        span_type=child.span_type,
                        inputs=child.inputs,
                        attributes=child.attributes,
                        start_time_ns=child.start_ns,
                    )
                )
            for child, span in reversed(list(zip(plan.children, spans, strict=True))):
                self.client.end_span(
                    trace_id=trace_id,
                    span_id=span.span_id,
                    outputs=child.outputs,
                    status=child.status,
                    end_time_ns=child.end_ns,
                )
            annotate_trace(trace_id, record)
        except Exception:
            # Close the trace so it is not left open in MLflow's in-memory trace manager.
            self.client.end_trace(trace_id, status=SpanStatusCode.ERROR)
            raise
        self.client.end_trace(
            trace_id,
            outputs=root_plan.outputs,
            status=root_plan.status,
            end_time_ns=root_plan.end_ns,
        )
        return trace_id
