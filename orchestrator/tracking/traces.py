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
    SpanStatus,
    SpanStatusCode,
    SpanType,
)
from mlflow.tracing.constant import SpanAttributeKey, TraceMetadataKey  # noqa: E402
from mlflow.tracing.trace_manager import InMemoryTraceManager  # noqa: E402

from distillery.orchestrator.core.stats import NO_SCORED_EPISODES  # noqa: E402

if TYPE_CHECKING:
    from distillery.workers.trajectories import EpisodeRecord

_log = logging.getLogger(__name__)

EPISODE_TAG = "distillery.episode"  # trace tag: task_id/episode_id, for idempotent re-logs
POINT_ID_TAG = "distillery.point_id"  # run and trace tag: the evaluation point
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
    status: SpanStatus | str = SpanStatusCode.OK  # ERROR with a description: why
    parent: int | None = None  # index of the parent in TracePlan.children; None: the root


@dataclass(frozen=True)
class TracePlan:
    root: SpanPlan
    children: tuple[SpanPlan, ...]  # in start order, each after its parent


def episode_trace(record: EpisodeRecord) -> TracePlan:
    """An episode as a root AGENT span, one CHAIN span per user turn (its user message
    as input) and, inside each turn, one CHAT_MODEL span per model call (also a reply
    that decoded to no action, or one the server refused), one TOOL span per executed
    call and one RETRIEVER span per memory injection (what was injected, where).

    The root's status is the checker's verdict: OK only for a solved task (MLflow shows
    OK as "Success"); a failed task is an ERROR span whose description says how it
    failed, as is an unscored one. Records of files written before model calls were
    recorded (no `model_calls`) get the older reconstruction from their steps."""
    if not record.model_calls:
        return _reconstructed_trace(record)
    users = user_messages(record)
    transcript = _transcript(record)
    start_s = record.started_at if record.started_at > 0 else record.finished_at - record.wall_s
    steps = {(s.turn, s.step): s for s in record.steps}
    children: list[SpanPlan] = []
    turn_index: dict[int, int] = {}
    sent = 0  # transcript messages shown as an earlier call's input or output

    def turn_of(turn: int, at_s: float) -> int:
        if turn not in turn_index:
            user = users[turn] if 0 <= turn < len(users) else ""
            turn_index[turn] = len(children)
            children.append(
                SpanPlan(
                    name=f"turn {turn}",
                    span_type=SpanType.CHAIN,
                    start_ns=_ns(at_s),
                    end_ns=_ns(at_s),
                    inputs={"user": _clip(user)},
                    outputs={
                        "steps": sum(1 for x in record.steps if x.turn == turn),
                        "model_calls": sum(1 for c in record.model_calls if c.turn == turn),
                    },
                    attributes={"turn": turn},
                )
            )
        return turn_index[turn]

    def extend(index: int, end_s: float) -> None:
        span = children[index]
        children[index] = replace(span, end_ns=max(span.end_ns, _ns(end_s)))

    injections = sorted(record.injections, key=lambda i: i.at)
    pending = list(injections)
    for call in record.model_calls:
        while pending and pending[0].at <= call.started_at:
            _add_injection(children, turn_of, extend, pending.pop(0), record)
        parent = turn_of(call.turn, call.started_at)
        end_s = call.started_at + max(0.0, call.latency_s)
        new_messages = [
            {"role": m.get("role"), "content": _clip(_content(m), 2000)}
            for m in transcript[sent : call.request_messages]
            if isinstance(m, dict) and m.get("role") != "assistant"
        ]
        sent = call.request_messages + (1 if call.outcome in _ANSWERED else 0)
        failed = call.outcome not in _ANSWERED
        label = "" if call.outcome == "action" else f" ({call.outcome.replace('_', ' ')})"
        outputs: dict[str, Any] = {
            "text": _clip(call.text),
            "tool_calls": _json_or_text(call.tool_calls_json),
            "outcome": call.outcome,
            "finish_reason": call.finish_reason,
        }
        if call.error:
            outputs["error"] = _clip(call.error, 1000)
        children.append(
            SpanPlan(
                name=f"llm {call.turn}.{call.step}{label}",
                span_type=SpanType.CHAT_MODEL,
                start_ns=_ns(call.started_at),
                end_ns=_ns(end_s),
                inputs={
                    "messages": new_messages,
                    "n_messages": call.request_messages,
                    "request_chars": call.request_chars,
                    "n_tools": call.n_tools,
                },
                outputs=outputs,
                attributes={
                    "outcome": call.outcome,
                    "tokens_in": call.tokens_in,
                    "tokens_out": call.tokens_out,
                    "tokens_reasoning": call.tokens_reasoning,
                    "latency_s": call.latency_s,
                    "attempts": call.attempts,
                    "retries": max(0, call.attempts - 1),
                    "endpoint": call.endpoint or "",
                    "model": record.model,
                    SpanAttributeKey.CHAT_USAGE: _usage(call.tokens_in, call.tokens_out),
                },
                status=_status(SpanStatusCode.ERROR, call.error or call.outcome)
                if failed
                else SpanStatusCode.OK,
                parent=parent,
            )
        )
        extend(parent, end_s)
        step = steps.get((call.turn, call.step)) if call.outcome == "action" else None
        calls = step.calls if step is not None else []
        per_call_s = max(0.0, call.action_s) / len(calls) if calls else 0.0
        cursor = end_s
        for i, c in enumerate(calls):
            children.append(
                _tool_span(c, f"{call.turn}.{call.step}.{i}", cursor, per_call_s, parent)
            )
            cursor += per_call_s
        extend(parent, cursor)
    for injection in pending:
        _add_injection(children, turn_of, extend, injection, record)
    children = _in_start_order(children)
    end_ns = max([_ns(max(record.finished_at, start_s)), *(c.end_ns for c in children)])
    return TracePlan(
        _root_span(record, users, _ns(start_s), end_ns, timing="recorded"), tuple(children)
    )


_ANSWERED = ("action", "no_action")


def _add_injection(children, turn_of, extend, injection, record: EpisodeRecord) -> None:  # noqa: ANN001
    parent = turn_of(injection.turn, injection.at)
    where = injection.where.replace("_", " ")
    step = "" if injection.step < 0 else f" after step {injection.step}"
    children.append(
        SpanPlan(
            name=f"memory -> {where} {injection.turn}{step}",
            span_type=SpanType.RETRIEVER,
            start_ns=_ns(injection.at),
            end_ns=_ns(injection.at),
            inputs={"where": injection.where, "turn": injection.turn, "step": injection.step},
            outputs={"injected": _clip(injection.text), "chars": injection.chars},
            attributes={"where": injection.where, "chars": injection.chars},
            parent=parent,
        )
    )
    extend(parent, injection.at)


def _in_start_order(children: list[SpanPlan]) -> list[SpanPlan]:
    """Children sorted by start time (a parent first), parents re-indexed."""
    order = sorted(
        range(len(children)),
        key=lambda i: (children[i].start_ns, children[i].parent is not None, i),
    )
    position = {old: new for new, old in enumerate(order)}
    return [replace(children[i], parent=_moved(children[i].parent, position)) for i in order]


def _moved(parent: int | None, position: dict[int, int]) -> int | None:
    return None if parent is None else position[parent]


def _tool_span(c: Any, where: str, start_s: float, duration_s: float, parent: int) -> SpanPlan:
    return SpanPlan(
        name=f"tool {c.function or 'rejected'} {where}",
        span_type=SpanType.TOOL,
        start_ns=_ns(start_s),
        end_ns=_ns(start_s + duration_s),
        inputs={"call": c.call},
        outputs={"observation": _clip(c.content)},
        attributes={"function": c.function or "", "error": c.error or "", "rejected": c.rejected},
        status=_status(SpanStatusCode.ERROR, c.error or "rejected")
        if c.error or c.rejected
        else SpanStatusCode.OK,
        parent=parent,
    )


def _root_span(
    record: EpisodeRecord, users: list[str], start_ns: int, end_ns: int, timing: str
) -> SpanPlan:
    outputs: dict[str, Any] = {
        "verdict": verdict(record),
        "success": record.success,
        "termination": record.termination,
    }
    if record.error_type:
        outputs["error"] = f"{record.error_type}: {record.error_message or ''}"
    if record.success is True:
        status: SpanStatus | str = SpanStatusCode.OK
    elif record.success is False:
        status = _status(
            SpanStatusCode.ERROR,
            f"task failed ({record.error_type or record.termination}): "
            f"{record.error_message or record.termination}",
        )
    else:
        status = _status(
            SpanStatusCode.ERROR,
            f"not scored ({record.termination}): {record.error_message or ''}",
        )
    return SpanPlan(
        name=f"episode {record.task_id}",
        span_type=SpanType.AGENT,
        start_ns=start_ns,
        end_ns=end_ns,
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
            "verdict": verdict(record),
            "tokens_in": record.tokens_in,
            "tokens_out": record.tokens_out,
            "n_llm_calls": record.n_llm_calls,
            "total_steps": record.total_steps,
            "attempts": record.attempts,
            "wall_s": record.wall_s,
            "timing": timing,
        },
        status=status,
    )


def verdict(record: EpisodeRecord) -> str:
    """The checker's verdict in one word: success, failure, or unscored (an
    infrastructure failure: no verdict)."""
    if record.success is None:
        return "unscored"
    return "success" if record.success else "failure"


def _status(code: str, description: str) -> SpanStatus:
    return SpanStatus(SpanStatusCode(code), _clip(description, 500))


def _usage(tokens_in: int, tokens_out: int) -> dict[str, int]:
    # MLflow sums this attribute over spans into the trace's token usage (its columns).
    return {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": tokens_in + tokens_out,
    }


def _transcript(record: EpisodeRecord) -> list[Any]:
    try:
        messages = json.loads(record.messages_json or "[]")
    except json.JSONDecodeError:
        return []
    return messages if isinstance(messages, list) else []


def _content(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text or "[]")
    except json.JSONDecodeError:
        return _clip(text)


def _reconstructed_trace(record: EpisodeRecord) -> TracePlan:
    """The trace of a record without model call records (an older file): spans from its
    decoded steps, times reconstructed from per-step latencies: each LLM span lasts its
    latency, and the rest of the episode's wall time is split evenly over the tool calls."""
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
                    SpanAttributeKey.CHAT_USAGE: _usage(s.tokens_in, s.tokens_out),
                },
                parent=parent,
            )
        )
        cursor = llm_end
        for i, c in enumerate(s.calls):
            children.append(_tool_span(c, f"{s.turn}.{s.step}.{i}", cursor, per_call_s, parent))
            cursor += per_call_s
    close_turn()
    root = _root_span(record, users, _ns(start_s), _ns(max(end_s, cursor)), "reconstructed")
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
