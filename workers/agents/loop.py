"""The agent loop shared by teacher and student: messages, calls, observations.

One episode = the task's user turns in order (or, where the benchmark has its own
simulated user, the task's opening turn and then what that user answers to each of the
agent's closing replies). Within a turn the policy answers; its calls are validated and
executed by the environment and the observations go back to it; a response without
calls, or one the benchmark cannot decode, ends the turn. A benchmark whose world says
when the task is done (AppWorld's `complete_task`) ends the episode there.

What differs between benchmarks is the benchmark's (`AgentConventions`, see
envs/conventions.py): how observations go back to the model in each action format and
how the step limit is counted (BFCL's loop lets a turn make one step over its limit).
A turn that reaches its limit is closed (and later scored), and the episode stops.
Stopping in the last turn therefore still scores every turn; stopping earlier leaves
turns unplayed, which the benchmark's checker fails. Infrastructure failures propagate
as `InfraError` so the caller can retry the episode; they are never scored.

A reply the client could not use (`InvalidReply`) ends the episode as the model's
failure. Every tool call of a reply is answered by its own observation, matched by id;
a policy that repeats or omits ids gets ids of ours first (the client already does this
for server replies). What is kept in the history, and re-sent at every step, is bounded:
text over `MAX_HISTORY_TEXT` characters, arguments over `MAX_HISTORY_ARGUMENTS` and
calls beyond `MAX_HISTORY_CALLS` in one reply (all beyond what the environment accepts)
are cut, with a note saying so.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from distillery.workers.agents.policies import OBSERVATION_NAME, EpisodePolicy
from distillery.workers.envs.base import Environment, ParsedAction, ToolResult
from distillery.workers.envs.calls import DEFAULT_LIMITS
from distillery.workers.envs.conventions import AgentConventions
from distillery.workers.envs.execution import run_in_env_thread
from distillery.workers.llm.types import (
    ChatResult,
    ContextOverflow,
    InvalidReply,
    RequestRejected,
    Usage,
)
from distillery.workers.trajectories import (
    MAX_CALL_TEXT,
    CallRecord,
    InjectionRecord,
    ModelCallRecord,
    StepRecord,
)

# What one assistant message may keep in the history: the environment refuses longer
# responses and arguments as calls anyway, and a reply of megabytes kept verbatim is
# re-sent (and held in memory) at every later step.
MAX_HISTORY_TEXT = DEFAULT_LIMITS.max_text_chars
MAX_HISTORY_ARGUMENTS = DEFAULT_LIMITS.max_call_chars
MAX_HISTORY_CALLS = 4 * DEFAULT_LIMITS.max_calls  # (a reply with more is refused whole)
MAX_NOTES = 50  # reply repairs kept per episode (the rest are counted)
# Turns a benchmark's own user may add (ToolSandbox caps a scenario at 30 messages): a
# user that never ends the conversation must not keep an episode going for ever.
MAX_WORLD_USER_TURNS = 100


class EpisodeHooks(Protocol):
    """Optional augmentation of an episode (e.g. a memory method); knows no env internals."""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        """The system prompt to use from this turn on (proactive injection)."""

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        """The observations as the model will see them (reactive injection)."""

    # Optional (looked up with getattr, so existing hooks need not define it):
    # `async def user_message(self, turn_index: int, user_text: str) -> str`, the user
    # message as the model will see it (injection into the request itself).


class MemoryHooks(EpisodeHooks, Protocol):
    """A memory method's hooks: the only way a method acts inside an episode. Besides
    injecting, they report what the episode record keeps of them."""

    def model_usage(self) -> tuple[int, Usage]:
        """Calls the hooks made to the agent's own model and their tokens (they count
        as the agent's usage)."""

    def record(self) -> dict[str, Any]:
        """What the episode record keeps (its `extra_json`): retrievals, audits."""


@dataclass
class EpisodeOutcome:
    termination: str  # done | step_limit | context_overflow | request_rejected | invalid_reply
    steps: list[StepRecord] = field(default_factory=list)
    steps_per_turn: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    n_llm_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_reasoning: int = 0  # of tokens_out, the server-reported thinking part
    llm_latency_s: float = 0.0
    rejection: str | None = None
    reply_notes: list[str] = field(default_factory=list)  # repairs of the model's replies
    reply_notes_dropped: int = 0
    model_calls: list[ModelCallRecord] = field(default_factory=list)  # every call, in order
    injections: list[InjectionRecord] = field(default_factory=list)  # what hooks added


async def run_agent_loop(
    env: Environment,
    policy: EpisodePolicy,
    max_steps_per_turn: int,
    hooks: EpisodeHooks | None = None,
    *,
    conventions: AgentConventions,
) -> EpisodeOutcome:
    """Play every turn of `env.task` with `policy` as its benchmark plays it
    (`conventions`: no default, so no benchmark is played by another's); the caller
    scores `env` afterwards."""
    task = env.task
    fmt = policy.action_format
    tools = list(task.tools) if fmt == "native" else None
    base_prompt = env.system_prompt(fmt)
    out = EpisodeOutcome(termination="done")
    _set_system_prompt(out.messages, base_prompt)

    # The user's messages: the task's turns, or (user_turns="environment") the task's
    # first turn and then whatever the benchmark's user answers to each closing reply.
    from_world = conventions.user_turns == "environment"
    if from_world and not task.turns:
        raise ValueError(f"task {task.task_id!r}: no opening user message")
    pending = list(task.turns[:1] if from_world else task.turns)
    turn_index = -1
    while pending:
        user_text = pending.pop(0)
        turn_index += 1
        if hooks is not None:
            prompt = await hooks.before_turn(turn_index, user_text, base_prompt)
            _note_injection(out, turn_index, -1, "system_prompt", base_prompt, prompt)
            _set_system_prompt(out.messages, prompt if base_prompt else prompt.rstrip())
        content = user_text
        # Optional: hooks that inject into the user's message (e.g. MemP appends memory
        # to the task's first message) define `user_message`; others leave it as is.
        rewrite = getattr(hooks, "user_message", None)
        if rewrite is not None:
            content = await rewrite(turn_index, user_text)
            _note_injection(out, turn_index, -1, "user_message", user_text, content)
        out.messages.append({"role": "user", "content": content})
        steps_in_turn = 0
        while True:
            request = _RequestShape.of(out.messages, tools)
            try:
                result = await policy.respond(out.messages, tools)
            except RequestRejected as exc:  # the model's doing (RequestConfigError is not)
                out.termination = (
                    "context_overflow" if isinstance(exc, ContextOverflow) else "request_rejected"
                )
                out.rejection = str(exc)
                out.model_calls.append(
                    request.failed(turn_index, steps_in_turn, out.termination, exc)
                )
                out.steps_per_turn.append(steps_in_turn)
                return out
            except InvalidReply as exc:
                out.termination, out.rejection = "invalid_reply", str(exc)
                out.model_calls.append(
                    request.failed(turn_index, steps_in_turn, out.termination, exc)
                )
                out.steps_per_turn.append(steps_in_turn)
                return out
            result = _with_unique_ids(result)
            action = _parse(env, fmt, result)
            out.model_calls.append(
                request.answered(turn_index, steps_in_turn, result, action.empty)
            )
            result = _bounded(result)  # parsed whole, kept bounded
            _count_usage(out, result)
            _keep_notes(out, turn_index, steps_in_turn, result)
            out.messages.append(_assistant_message(fmt, result))
            if action.empty:  # no call, or nothing decodable: the turn ends
                break
            acting = time.monotonic()
            observations = await run_in_env_thread(env.step, action)
            if hooks is not None:
                before = observations
                observations = await hooks.after_step(turn_index, user_text, observations)
                for old, new in zip(before, observations, strict=False):
                    _note_injection(
                        out, turn_index, steps_in_turn, "observation", old.content, new.content
                    )
            out.model_calls[-1] = replace(out.model_calls[-1], action_s=time.monotonic() - acting)
            out.messages.extend(_observation_messages(conventions, fmt, result, observations))
            kept = observations[:MAX_HISTORY_CALLS]
            out.steps.append(_step_record(turn_index, steps_in_turn, result, kept))
            steps_in_turn += 1
            if conventions.world_ends_episode and env.task_done():
                env.end_turn()  # the benchmark's own loop stops here; the task is scored
                out.steps_per_turn.append(steps_in_turn)
                return out
            if conventions.turn_is_over_limit(steps_in_turn, max_steps_per_turn):
                env.end_turn()  # the force-quit turn is kept and scored
                out.termination = "step_limit"
                out.steps_per_turn.append(steps_in_turn)
                return out
        env.end_turn()
        out.steps_per_turn.append(steps_in_turn)
        if from_world and turn_index + 1 >= MAX_WORLD_USER_TURNS:
            out.termination = "step_limit"
            out.reply_notes.append(f"the user spoke {MAX_WORLD_USER_TURNS} turns: stopped")
            return out
        if from_world:  # the closing reply reaches the user, who answers or ends
            answer = await run_in_env_thread(env.next_user_message, result.text or "")
            if answer is not None:
                pending.append(answer)
    return out


def _set_system_prompt(messages: list[dict[str, Any]], prompt: str) -> None:
    """The system message is the first message when there is a prompt, else absent
    (BFCL's function-calling handlers send none)."""
    has_system = bool(messages) and messages[0].get("role") == "system"
    if prompt:
        message = {"role": "system", "content": prompt}
        if has_system:
            messages[0] = message
        else:
            messages.insert(0, message)
    elif has_system:
        del messages[0]


def _parse(env: Environment, fmt: str, result: ChatResult) -> ParsedAction:
    if fmt == "native":
        if result.tool_calls:
            return env.parse_tool_calls(result.tool_calls)
        return ParsedAction()
    return env.parse_text(result.text or "")


def _with_unique_ids(result: ChatResult) -> ChatResult:
    """`result` with every tool call under its own string id, so that each
    observation goes back to the call it answers."""
    seen: set[str] = set()
    calls = []
    renamed = []
    for call in result.tool_calls:
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id or call_id in seen:
            fresh = f"call_{uuid.uuid4().hex[:16]}"
            renamed.append(f"tool call id {str(call_id)[:40]!r} replaced by {fresh}")
            call = {**call, "id": fresh}
            call_id = fresh
        seen.add(call_id)
        calls.append(call)
    if not renamed:
        return result
    return replace(result, tool_calls=calls, notes=(*result.notes, *renamed))


def _bounded(result: ChatResult) -> ChatResult:
    """`result` as the history keeps it: oversize text and arguments cut."""
    notes = []
    text = result.text
    if isinstance(text, str) and len(text) > MAX_HISTORY_TEXT:
        notes.append(f"content of {len(text)} characters cut to {MAX_HISTORY_TEXT}")
        text = text[:MAX_HISTORY_TEXT] + f" [... {len(text) - MAX_HISTORY_TEXT} characters cut]"
    calls = result.tool_calls
    if len(calls) > MAX_HISTORY_CALLS:
        # The environment refused them all (too many calls); the kept ones are answered.
        notes.append(f"{len(calls)} tool calls cut to the first {MAX_HISTORY_CALLS}")
        calls = calls[:MAX_HISTORY_CALLS]
    if any(len(str(c.get("arguments", ""))) > MAX_HISTORY_ARGUMENTS for c in calls):
        kept = calls
        calls = []
        for call in kept:
            size = len(str(call.get("arguments", "")))
            if size > MAX_HISTORY_ARGUMENTS:
                notes.append(f"arguments of {call.get('name')!s:.40} ({size} characters) cut")
                # Valid JSON still (some servers parse it); too long to run anyway.
                call = {**call, "arguments": json.dumps({"cut": f"{size} characters"})}
            calls.append(call)
    if not notes:
        return result
    return replace(result, text=text, tool_calls=calls, notes=(*result.notes, *notes))


def _keep_notes(out: EpisodeOutcome, turn: int, step: int, result: ChatResult) -> None:
    for note in result.notes:
        if len(out.reply_notes) < MAX_NOTES:
            out.reply_notes.append(f"turn {turn} step {step}: {note}")
        else:
            out.reply_notes_dropped += 1


def _count_usage(out: EpisodeOutcome, result: ChatResult) -> None:
    out.n_llm_calls += 1
    out.tokens_in += result.usage.prompt_tokens
    out.tokens_out += result.usage.completion_tokens
    out.tokens_reasoning += result.usage.reasoning_tokens
    out.llm_latency_s += result.latency_s


def _assistant_message(fmt: str, result: ChatResult) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.text or ""}
    if fmt == "native" and result.tool_calls:
        # As a server sends a tool-call message back (and BFCL echoes it): no text is null.
        message["content"] = result.text or None
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for call in result.tool_calls
        ]
    return message


def _observation_messages(
    conventions: AgentConventions, fmt: str, result: ChatResult, observations: list[ToolResult]
) -> list[dict[str, Any]]:
    calls = result.tool_calls if fmt == "native" else []
    messages = conventions.results(fmt, calls, observations)
    # Observations sent as user messages are marked, so they are told apart from the
    # task's user turns (the marker is bookkeeping: `wire_messages` drops it).
    return [_marked(m) if m.get("role") == "user" else dict(m) for m in messages]


def _marked(message: dict[str, Any]) -> dict[str, Any]:
    rest = {k: v for k, v in message.items() if k != "role"}
    return {"role": message["role"], "name": OBSERVATION_NAME, **rest}


def _step_record(
    turn: int, step: int, result: ChatResult, observations: list[ToolResult]
) -> StepRecord:
    calls = [
        CallRecord(
            call=o.call,
            function=o.function,
            content=o.content,
            error=o.error,
            rejected=o.rejected,
        )
        for o in observations
    ]
    return StepRecord(
        turn=turn,
        step=step,
        assistant_text=result.text or "",
        calls=calls,
        tokens_in=result.usage.prompt_tokens,
        tokens_out=result.usage.completion_tokens,
        latency_s=result.latency_s,
        endpoint=result.endpoint,
    )


@dataclass(frozen=True)
class _RequestShape:
    """A request as sent (its size and when), for the episode's model call records."""

    started_at: float
    clock: float
    messages: int
    chars: int
    tools: int

    @classmethod
    def of(
        cls, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> _RequestShape:
        chars = sum(len(str(m.get("content") or "")) for m in messages)
        return cls(time.time(), time.monotonic(), len(messages), chars, len(tools or ()))

    def answered(
        self, turn: int, step: int, result: ChatResult, no_action: bool
    ) -> ModelCallRecord:
        calls = json.dumps(result.tool_calls, ensure_ascii=False, default=str)
        return ModelCallRecord(
            turn=turn,
            step=step,
            started_at=self.started_at,
            latency_s=result.latency_s,
            attempts=result.attempts,
            endpoint=result.endpoint,
            request_messages=self.messages,
            request_chars=self.chars,
            n_tools=self.tools,
            outcome="no_action" if no_action else "action",
            text=(result.text or "")[:MAX_CALL_TEXT],
            tool_calls_json=calls[:MAX_CALL_TEXT],
            finish_reason=result.finish_reason,
            tokens_in=result.usage.prompt_tokens,
            tokens_out=result.usage.completion_tokens,
            tokens_reasoning=result.usage.reasoning_tokens,
            error=None,
        )

    def failed(self, turn: int, step: int, outcome: str, exc: Exception) -> ModelCallRecord:
        return ModelCallRecord(
            turn=turn,
            step=step,
            started_at=self.started_at,
            latency_s=time.monotonic() - self.clock,
            attempts=1,
            endpoint=None,
            request_messages=self.messages,
            request_chars=self.chars,
            n_tools=self.tools,
            outcome=outcome,
            text="",
            tool_calls_json="[]",
            finish_reason=None,
            tokens_in=0,
            tokens_out=0,
            tokens_reasoning=0,
            error=str(exc)[:MAX_CALL_TEXT],
        )


def _note_injection(
    out: EpisodeOutcome, turn: int, step: int, where: str, before: str, after: str
) -> None:
    """Record what hooks added to `before` (a prompt, a user message, an observation),
    when they changed it: the text around the original where it is kept, else all."""
    before, after = before or "", after or ""
    if after == before:
        return
    added = (after.replace(before, "", 1) if before and before in after else after).strip()
    if where == "system_prompt":  # the prompt is set every turn: the same block is no news
        last = next((i for i in reversed(out.injections) if i.where == where), None)
        if last is not None and last.chars == len(added) and last.text == added[:MAX_CALL_TEXT]:
            return
    out.injections.append(
        InjectionRecord(turn, step, time.time(), where, added[:MAX_CALL_TEXT], len(added))
    )
