"""MLflow traces of episodes: each evaluated episode as a trace (its model calls and
tool results as spans, times reconstructed from the record) with the benchmark's verdict
as feedback; the Tracker in `tracking` logs them to a point's child run.
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from mlflow.entities import (  # noqa: E402
    AssessmentSource,
    AssessmentSourceType,
    Feedback,
    SpanStatusCode,
    SpanType,
)
from mlflow.tracing.constant import SpanAttributeKey, TraceMetadataKey  # noqa: E402
from mlflow.tracing.trace_manager import InMemoryTraceManager  # noqa: E402

from distillery.orchestrator.stats import NO_SCORED_EPISODES  # noqa: E402

if TYPE_CHECKING:
    from distillery.workers.trajectories import EpisodeRecord

_log = logging.getLogger(__name__)

EPISODE_TAG = "distillery.episode"  # trace tag: task_id/episode_id, for idempotent re-logs
_MAX_SPAN_TEXT = 4000  # characters kept of a model message or an observation in a span
# Who gives an episode its verdict: the benchmark's own checker, run as code.
_VERDICT_SOURCE = AssessmentSource(
    source_type=AssessmentSourceType.CODE, source_id="distillery.benchmark_checker"
)


@dataclass(frozen=True)
class SpanPlan:
    """One span of an episode trace, with times reconstructed after the fact."""

    name: str
    span_type: str
    start_ns: int
    end_ns: int
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    attributes: dict[str, Any] = field(default_factory=dict)
    status: str = SpanStatusCode.OK
    parent: int | None = None  # index of the parent in TracePlan.children; None: the root


@dataclass(frozen=True)
class TracePlan:
    root: SpanPlan
    children: tuple[SpanPlan, ...]  # in start order, each after its parent


def episode_trace(record: EpisodeRecord) -> TracePlan:
    """An episode as a root AGENT span, one CHAIN span per user turn (its user message
    as input) and, inside each turn, one CHAT_MODEL span per model step and one TOOL
    span per call after it.

    Only the per-step LLM latencies and the episode's start/end are recorded, so the
    timeline is a reconstruction: each LLM span lasts its latency, and the rest of the
    episode's wall time (environment, overhead) is split evenly over the tool calls."""
    start_s = record.started_at if record.started_at > 0 else record.finished_at - record.wall_s
    end_s = max(record.finished_at, start_s)
    llm_s = sum(max(0.0, s.latency_s) for s in record.steps)
    n_calls = sum(len(s.calls) for s in record.steps)
    per_call_s = max(0.0, end_s - start_s - llm_s) / n_calls if n_calls else 0.0
    users = user_messages(record)

    children: list[SpanPlan] = []
    turn_index: dict[int, int] = {}  # turn -> index of its span in children
    cursor = start_s

    def close_turn() -> None:
        if children and turn_index:
            at = max(turn_index.values())
            children[at] = replace(children[at], end_ns=_ns(cursor))

    for s in record.steps:
        if s.turn not in turn_index:
            close_turn()
            user = users[s.turn] if 0 <= s.turn < len(users) else ""
            turn_index[s.turn] = len(children)
            children.append(
                SpanPlan(
                    name=f"turn {s.turn}",
                    span_type=SpanType.CHAIN,
                    start_ns=_ns(cursor),
                    end_ns=_ns(cursor),
                    inputs={"user": _clip(user)},
                    outputs={"steps": sum(1 for x in record.steps if x.turn == s.turn)},
                    attributes={"turn": s.turn},
                )
            )
        parent = turn_index[s.turn]
        llm_end = cursor + max(0.0, s.latency_s)
        children.append(
            SpanPlan(
                name=f"llm {s.turn}.{s.step}",
                span_type=SpanType.CHAT_MODEL,
                start_ns=_ns(cursor),
                end_ns=_ns(llm_end),
                inputs={"turn": s.turn, "step": s.step},
                outputs={"assistant_text": _clip(s.assistant_text), "n_calls": len(s.calls)},
                attributes={
                    "tokens_in": s.tokens_in,
                    "tokens_out": s.tokens_out,
                    "latency_s": s.latency_s,
                    "endpoint": s.endpoint or "",
                    "model": record.model,
                    # MLflow sums this attribute over spans into the trace's token usage.
                    SpanAttributeKey.CHAT_USAGE: {
                        "input_tokens": s.tokens_in,
                        "output_tokens": s.tokens_out,
                        "total_tokens": s.tokens_in + s.tokens_out,
                    },
                },
                parent=parent,
            )
        )
        cursor = llm_end
        for i, c in enumerate(s.calls):
            call_end = cursor + per_call_s
            children.append(
                SpanPlan(
                    name=f"tool {c.function or 'rejected'} {s.turn}.{s.step}.{i}",
                    span_type=SpanType.TOOL,
                    start_ns=_ns(cursor),
                    end_ns=_ns(call_end),
                    inputs={"call": c.call},
                    outputs={"observation": _clip(c.content)},
                    attributes={
                        "function": c.function or "",
                        "error": c.error or "",
                        "rejected": c.rejected,
                    },
                    status=SpanStatusCode.ERROR if c.error or c.rejected else SpanStatusCode.OK,
                    parent=parent,
                )
            )
            cursor = call_end
    close_turn()
    outputs: dict[str, Any] = {"success": record.success, "termination": record.termination}
    if record.error_type:
        outputs["error"] = f"{record.error_type}: {record.error_message or ''}"
    root = SpanPlan(
        name=f"episode {record.task_id}",
        span_type=SpanType.AGENT,
        start_ns=_ns(start_s),
        end_ns=_ns(max(end_s, cursor)),
        # What the UI matches traces of two evaluation runs by: the task, not the agent.
        inputs={"task_id": record.task_id, "user": _clip(users[0] if users else "")},
        outputs=outputs,
        attributes={
            "task_id": record.task_id,
            "benchmark": record.benchmark,
            "agent": record.agent,
            "model": record.model,
            "role": record.role,
            "stage": record.stage,
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "n_llm_calls": record.n_llm_calls,
            "total_steps": record.total_steps,
            "attempts": record.attempts,
            "wall_s": record.wall_s,
            "timing": "reconstructed",
        },
        # A failed task is a valid result; only an unscored (infra) episode is an error.
        status=SpanStatusCode.OK if record.success is not None else SpanStatusCode.ERROR,
    )
    return TracePlan(root, tuple(children))


def episode_feedback(record: EpisodeRecord) -> list[Feedback]:
    """The benchmark's verdict on an episode as MLflow feedback: `success` (the
    checker's pass/fail; an error, not a value, when the episode was not scored),
    `error_type` (the checker's error type, "none" when it passed), `steps` and
    `tokens`. The Evaluations view shows them as columns, per task and per run."""
    scored = record.success is not None
    reason = record.error_message or record.termination
    verdict = {"termination": record.termination, "benchmark": record.benchmark}
    if scored:
        success = Feedback(
            name="success",
            value=bool(record.success),
            rationale=None if record.success else _clip(f"{record.error_type}: {reason}", 1000),
            source=_VERDICT_SOURCE,
            metadata=verdict,
        )
    else:  # MLflow takes a value or an error, not both
        success = Feedback(
            name="success",
            error=Exception(f"not scored ({record.termination}): {reason}"),
            source=_VERDICT_SOURCE,
            metadata=verdict,
        )
    return [
        success,
        Feedback(
            name="error_type",
            value=record.error_type or ("none" if record.success else record.termination),
            source=_VERDICT_SOURCE,
        ),
        Feedback(name="steps", value=int(record.total_steps), source=_VERDICT_SOURCE),
        Feedback(
            name="tokens",
            value=int(record.tokens_in + record.tokens_out),
            source=_VERDICT_SOURCE,
            metadata={"tokens_in": str(record.tokens_in), "tokens_out": str(record.tokens_out)},
        ),
    ]


def annotate_trace(trace_id: str, record: EpisodeRecord) -> None:
    """Session, user and verdict of a trace that is still open in MLflow's in-memory
    trace buffer: exported with the trace itself, in the same write, rather than one
    store call per assessment afterwards (MLflow does the same for an active trace)."""
    with InMemoryTraceManager.get_instance().get_trace(trace_id) as trace:
        if trace is None:
            raise RuntimeError(f"trace {trace_id} is not open; cannot attach its verdict")
        # The session groups a task's episodes (under every evaluated method) in the
        # experiment's Sessions view; the user is the agent that played it.
        trace.info.trace_metadata[TraceMetadataKey.TRACE_SESSION] = record.task_id
        trace.info.trace_metadata[TraceMetadataKey.TRACE_USER] = record.agent
        for feedback in episode_feedback(record):
            feedback.trace_id = trace_id
            trace.info.assessments.append(feedback)


def success_label(metrics: Mapping[str, float]) -> str:
    """`62.5% [42.7–78.8] n=24`: the success rate over scored episodes, its 95 % Wilson
    interval and n (as the report's cells)."""
    n = int(metrics.get("n_scored", 0))
    if n <= 0:  # every episode unscored (infrastructure): no rate, no interval
        return NO_SCORED_EPISODES
    return (
        f"{metrics['success_rate']:.1%} [{100 * metrics['success_rate_ci_low']:.1f}–"
        f"{100 * metrics['success_rate_ci_high']:.1f}] n={n}"
    )


def sample_episodes(records: Iterable[EpisodeRecord], n: int | None) -> list[EpisodeRecord]:
    """One episode per task (the latest attempt): every task when `n` is None, else a
    deterministic sample of `n`: in task-id order, alternating successes and failures
    while both last (so a researcher sees both), then filled in task-id order from
    whatever remains (unscored episodes included)."""
    if n is not None and n <= 0:
        return []
    by_task: dict[str, EpisodeRecord] = {}
    for r in records:  # the latest attempt of a task wins
        if r.task_id not in by_task or r.finished_at >= by_task[r.task_id].finished_at:
            by_task[r.task_id] = r
    ordered = [by_task[t] for t in sorted(by_task)]
    if n is None:
        return ordered
    successes = [r for r in ordered if r.success is True]
    failures = [r for r in ordered if r.success is False]
    chosen: list[EpisodeRecord] = []
    for pair in zip(successes, failures, strict=False):
        chosen.extend(pair)
    taken = {r.task_id for r in chosen}
    chosen.extend(r for r in ordered if r.task_id not in taken)
    return chosen[:n]


def user_messages(record: EpisodeRecord) -> list[str]:
    """The user messages of the transcript in order: one per turn."""
    try:
        messages = json.loads(record.messages_json or "[]")
    except json.JSONDecodeError:
        return []
    out = []
    for message in messages if isinstance(messages, list) else []:
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # OpenAI content parts
                out.append(
                    "\n".join(
                        str(p.get("text", "")) for p in content if isinstance(p, dict)
                    ).strip()
                )
            else:
                out.append("" if content is None else str(content))
    return out


def episode_key(record: EpisodeRecord) -> str:
    return f"{record.task_id}/{record.episode_id}"


def stale_traces(key: str, trace_ids: list[str], wanted: set[str]) -> list[str]:
    """Traces to delete: all of an episode no longer sampled, duplicates of one that is."""
    return trace_ids if key not in wanted else trace_ids[1:]


def _clip(text: str | None, limit: int = _MAX_SPAN_TEXT) -> str:
    text = text or ""
    return text if len(text) <= limit else f"{text[:limit]}… [{len(text) - limit} more chars]"


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9)) if math.isfinite(seconds) else 0
