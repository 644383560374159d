"""The agent loop shared by teacher and student: messages, calls, observations.

One episode = the task's user turns in order (or, where the benchmark has its own
simulated user, the task's opening turn and then what that user answers to each of the
agent's closing replies). Within a turn the policy answers; its calls are validated and
executed by the environment and the observations go back to it; a response without
calls, or one the benchmark cannot decode, ends the turn. A benchmark whose world says
when the task is done (AppWorld's `complete_task`) ends the episode there.

What differs between benchmarks is the benchmark's (`AgentConventions`, see
envs/conventions.py): how observations go back to the model in each action format and
how the step limit is counted (BFCL's loop lets a turn make one step over its limit),
how a reply is kept in the history, and whether the history is trimmed to the model's
context before each request (`context.py`). A benchmark whose own loop opens the
conversation itself (AppWorld's ReAct prompt) gives those messages
(`opening_messages`), and memory goes where they put it instead of a system prompt.
A turn that reaches its limit is closed (and later scored), and the episode stops.
Stopping in the last turn therefore still scores every turn; stopping earlier leaves
turns unplayed, which the benchmark's checker fails. Infrastructure failures propagate
as `InfraError` so the caller can retry the episode; they are never scored.

A reply the client could not use (`InvalidReply`) ends the episode as the model's
failure. How a reply is read and kept is the benchmark's (`conventions.reply`): by
default the client's cleaned reply is parsed (reasoning split off) and a message rebuilt
from it is kept, every tool call answered by its own observation, matched by id (a
policy that repeats or omits ids gets ids of ours first; the client already does this
for server replies); a benchmark whose runner re-sends the server's message (BFCL's)
has the server's message parsed and kept as it was sent, its calls answered in order
with the ids they came with. What is kept in the history, and re-sent at every step, is
bounded: text over `MAX_HISTORY_TEXT` characters, arguments over
`MAX_HISTORY_ARGUMENTS` and calls beyond `MAX_HISTORY_CALLS` in one reply (all beyond
what any environment accepts) are cut, with a note saying so, and counted
(`EpisodeOutcome.limits_fired`, `history_cut`). Every observation (and every message of
a benchmark's own user) is cut to the benchmark's observation cut before it enters the
history (`conventions.observation_cut`: the benchmark's own where its runner has one,
else distillery's default cap), counted (`observation_cut`); before that, every secret
this process knows (`distillery.redaction`: its environment's keys, its model's) is
redacted by value from it, counted (`observation_redacted`): a world that shows one (a
program printing its environment) never sends it to the model or stores it.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, cast

from distillery.redaction import redact_values
from distillery.workers.agents.context import request_view
from distillery.workers.agents.hook_messages import note_injection, place_step_messages
from distillery.workers.agents.policies import OBSERVATION_NAME, PROMPT_NAME, EpisodePolicy
from distillery.workers.agents.reply_bounds import (
    MAX_HISTORY_CALLS,
    bounded,
    bounded_as_sent,
    with_unique_ids,
)
from distillery.workers.envs.base import Environment, ParsedAction, ToolResult
from distillery.workers.envs.conventions import AgentConventions, ContextChoice, ObservationCut
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

# What one assistant message may keep in the history: no environment accepts longer
# responses and arguments as calls (the most generous limits are the protections of
# `calls.PROTECTION_LIMITS`), and a reply of megabytes kept verbatim is re-sent (and
# held in memory) at every later step.

HISTORY_CUT = "history_cut"  # `EpisodeOutcome.limits_fired` key of the cuts above
MAX_NOTES = 50  # reply repairs kept per episode (the rest are counted)
# Turns a benchmark's own user may add (ToolSandbox caps a scenario at 30 messages): a
# user that never ends the conversation must not keep an episode going for ever.
MAX_WORLD_USER_TURNS = 100


class EpisodeHooks(Protocol):
    """Optional augmentation of an episode (e.g. a memory method); knows no env internals."""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        """The system prompt to use from this turn on (proactive injection)."""
        ...

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        """The observations as the model will see them (reactive injection)."""
        ...

    # Optional (looked up with getattr, so existing hooks need not define them):
    # `async def user_message(self, turn_index: int, user_text: str) -> str`, the user
    # message as the model will see it (injection into the request itself);
    # `async def system_prompt_after_step(self, turn_index: int, steps_done: int,
    # system_prompt: str) -> str | None`, the system prompt from the next request on
    # (memory withdrawn after a step), None to leave it as it is;
    # `async def step_messages(self, turn_index: int, steps_done: int, reply: str | None,
    # observations: list[ToolResult]) -> StepMessages | None`, messages of their own put
    # into the history (or taken out) at a turn's start and after each step, seeing the
    # reply (agents/hook_messages.py); `context_choice: ContextChoice | None`, which of
    # the benchmark's context trims the episode uses and its buffer (a port's own
    # student loop's; refused by a benchmark that does not have it).


class MemoryHooks(EpisodeHooks, Protocol):
    """A memory method's hooks: the only way a method acts inside an episode. Besides
    injecting, they report what the episode record keeps of them."""

    def model_usage(self) -> tuple[int, Usage]:
        """Calls the hooks made to the agent's own model and their tokens (they count
        as the agent's usage)."""
        ...

    def record(self) -> dict[str, Any]:
        """What the episode record keeps (its `extra_json`): retrievals, audits."""
        ...


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
    # How often each protection of the loop fired (the environment counts its own):
    # `observation_cut` and `observation_redacted` among them.
    limits_fired: Counter[str] = field(default_factory=Counter)
    length_stops: int = 0  # replies that stopped at the token cap (finish_reason length)


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
    # A memory method's port may trim the history as its own student loop did (the MemP
    # and SASM ports on AppWorld): one of the benchmark's trims, chosen by the hooks.
    conventions = conventions.with_context(_context_choice(hooks))
    tools = list(task.tools) if fmt == "native" else None
    base_prompt = env.system_prompt(fmt)
    out = EpisodeOutcome(termination="done")
    # A benchmark whose own loop opens with a conversation of its own (AppWorld's ReAct
    # prompt, the task in its last message) gets memory put into it instead of into a
    # system prompt; `opening` counts the messages before the first reply.
    opens = _opens(env, fmt)
    if opens:
        base_prompt = ""
    _set_system_prompt(out.messages, base_prompt)
    opening = 0
    placed: dict[str, dict[str, Any]] = {}  # the hooks' own messages in the history, by key

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
        prompt = base_prompt
        if hooks is not None:
            prompt = await hooks.before_turn(turn_index, user_text, base_prompt)
            note_injection(out, turn_index, -1, "system_prompt", base_prompt, prompt)
            if not opens:
                _set_system_prompt(out.messages, prompt if base_prompt else prompt.rstrip())
        content = user_text
        # Optional: hooks that inject into the user's message (e.g. MemP appends memory
        # to the task's first message) define `user_message`; others leave it as is.
        rewrite = getattr(hooks, "user_message", None)
        if rewrite is not None:
            content = await rewrite(turn_index, user_text)
            note_injection(out, turn_index, -1, "user_message", user_text, content)
        if opens and turn_index == 0:
            memory = _memory_of(prompt, user_text, content)
            out.messages[:] = _opening_messages(env, fmt, memory, _framing(hooks))
        else:
            out.messages.append({"role": "user", "content": content})
        if turn_index == 0:
            opening = len(out.messages)
        if hooks is not None:
            opening = await place_step_messages(
                hooks, out, placed, turn_index, 0, None, [], opening
            )
        steps_in_turn = 0
        while True:
            request = _RequestShape.of(out.messages, tools)
            try:
                view = await request_view(
                    out.messages, opening, conventions, policy, out.reply_notes
                )
                result = await policy.respond(view, tools)
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
            result = with_unique_ids(result)
            as_sent = conventions.reply == "as_sent" and bool(result.message)
            action = _parse_as_sent(env, fmt, result) if as_sent else _parse(env, fmt, result)
            out.model_calls.append(
                request.answered(turn_index, steps_in_turn, result, action.empty)
            )
            in_history = _as_kept(conventions, fmt, result)  # as the benchmark's history keeps it
            kept, cuts = bounded(result)  # parsed whole, kept (and recorded) bounded
            shown = kept if in_history is None else bounded(in_history)[0]
            message = _assistant_message(fmt, shown, conventions.tool_call_text)
            sent_calls = kept.tool_calls
            if as_sent:  # the history keeps the server's message, bounded alike
                message, sent_calls, cuts = bounded_as_sent(result.message)
            result = replace(kept, notes=(*kept.notes, *cuts))
            if cuts:
                out.limits_fired[HISTORY_CUT] += len(cuts)
            _count_usage(out, result)
            _keep_notes(out, turn_index, steps_in_turn, result)
            out.messages.append(message)
            if action.empty:  # no call, or nothing decodable: the turn ends
                break
            acting = time.monotonic()
            observations = await run_in_env_thread(env.step, action)
            observations = _cut_observations(out, conventions.observation_cut, observations)
            if hooks is not None:
                before = observations
                observations = await hooks.after_step(turn_index, user_text, observations)
                for old, new in zip(before, observations, strict=False):
                    note_injection(
                        out, turn_index, steps_in_turn, "observation", old.content, new.content
                    )
            out.model_calls[-1] = replace(out.model_calls[-1], action_s=time.monotonic() - acting)
            out.messages.extend(_observation_messages(conventions, fmt, sent_calls, observations))
            recorded = observations[:MAX_HISTORY_CALLS]
            out.steps.append(_step_record(turn_index, steps_in_turn, result, recorded))
            steps_in_turn += 1
            if hooks is not None:
                opening = await _after_step(
                    hooks, env, fmt, out.messages, opening, turn_index, steps_in_turn, base_prompt
                )
                opening = await place_step_messages(
                    hooks, out, placed, turn_index, steps_in_turn, message, observations, opening
                )
            if conventions.world_ends_episode and cast(Any, env).task_done():
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
            answer = await run_in_env_thread(cast(Any, env).next_user_message, result.text or "")
            if answer is not None:
                pending.append(_cut_text(out, conventions.observation_cut, answer))
    return out


def _opens(env: Environment, fmt: str) -> bool:
    """Whether the benchmark opens the conversation itself (`opening_messages`)."""
    opening = getattr(env, "opening_messages", None)
    return opening is not None and opening(fmt, "") is not None


def _framing(hooks: Any) -> str | None:
    """How a memory method's own port frames its memory in a benchmark's opening prompt
    (hooks' optional `prompt_framing`, e.g. the AMD authors' ReasoningBank port on
    AppWorld); None: the benchmark's own framing."""
    return getattr(hooks, "prompt_framing", None) if hooks is not None else None


def _context_choice(hooks: Any) -> ContextChoice | None:
    """Which of the benchmark's context trims the memory method's port asks for (hooks'
    optional `context_choice`); None: the benchmark's own."""
    return getattr(hooks, "context_choice", None) if hooks is not None else None


def _opening_messages(
    env: Environment, fmt: str, memory: str, framing: str | None = None
) -> list[dict[str, Any]]:
    """The benchmark's opening with `memory` in its place (framed as `framing` says,
    where the benchmark knows it). Every message but the last (the task's) is marked as
    the benchmark's prompt, so it is told apart from the task's user turns
    (bookkeeping: `wire_messages` drops the marker)."""
    opening = env.opening_messages  # type: ignore[attr-defined]
    found = opening(fmt, memory, framing) if framing else opening(fmt, memory)
    messages = [dict(m) for m in found]
    return [{**m, "name": PROMPT_NAME} for m in messages[:-1]] + messages[-1:]


def _memory_of(prompt: str, user_text: str, content: str) -> str:
    """What a memory method injected, to go where the benchmark's opening puts memory:
    its system-prompt part (the hooks saw an empty prompt) and what it added to the
    user's message."""
    added = ""
    if content != user_text:
        added = content[len(user_text) :] if content.startswith(user_text) else content
    return "\n\n".join(part for part in (prompt.strip(), added.strip()) if part)


async def _after_step(
    hooks: EpisodeHooks,
    env: Environment,
    fmt: str,
    messages: list[dict[str, Any]],
    opening: int,
    turn_index: int,
    steps_done: int,
    base_prompt: str,
) -> int:
    """A method that withdraws its memory after a step (the AMD authors' ReasoningBank
    on AppWorld) gives the prompt to use from now on; the opening's length is returned
    (the benchmark's own opening is rendered again around the new memory)."""
    update = getattr(hooks, "system_prompt_after_step", None)
    if update is None:
        return opening
    prompt = await update(turn_index, steps_done, base_prompt)
    if prompt is None:
        return opening
    if base_prompt or not _opens(env, fmt):
        _set_system_prompt(messages, prompt if base_prompt else prompt.rstrip())
        return opening
    renewed = _opening_messages(env, fmt, prompt.strip(), _framing(hooks))
    messages[:opening] = renewed
    return len(renewed)


def _as_kept(conventions: AgentConventions, fmt: str, result: ChatResult) -> ChatResult | None:
    """The reply as the benchmark's loop keeps it in its history (None: as written)."""
    if fmt == "native" or conventions.kept_reply is None:
        return None
    return replace(result, text=conventions.kept_reply(result.text or ""))


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


def _parse_as_sent(env: Environment, fmt: str, result: ChatResult) -> ParsedAction:
    """The server's message read as a runner that re-sends it reads it: its calls and
    text as sent (reasoning, <think> blocks and empty arguments included; what the
    benchmark's decoder makes of them is the environment's)."""
    if fmt == "native":
        calls = result.message.get("tool_calls")
        if isinstance(calls, list) and calls:
            return env.parse_tool_calls(calls)
        return ParsedAction()
    content = result.message.get("content")
    return env.parse_text(content if isinstance(content, str) else "")


def _cut_text(
    out: EpisodeOutcome, cut: ObservationCut, text: str, cut_from: int | None = None
) -> str:
    shown = redact_values(text)
    if shown != text:  # a secret of this process, shown by the world: never sent or kept
        out.limits_fired["observation_redacted"] += 1
        text = shown
    if len(text) > cut.max_chars:
        out.limits_fired["observation_cut"] += 1
        return cut.cut(text, cut.max_chars)
    if cut_from is not None:  # cut on the world's side already (isolated servers bound it)
        out.limits_fired["observation_cut"] += 1
    return text


def _cut_observations(
    out: EpisodeOutcome, cut: ObservationCut, observations: list[ToolResult]
) -> list[ToolResult]:
    """The observations as the history keeps them: each cut to the benchmark's cut."""
    kept = []
    for o in observations:
        content = _cut_text(out, cut, o.content, o.cut_from)
        error = redact_values(o.error) if o.error else o.error
        if content is not o.content or error != o.error:
            o = replace(o, content=content, error=error)
        kept.append(o)
    return kept


def _keep_notes(out: EpisodeOutcome, turn: int, step: int, result: ChatResult) -> None:
    for note in result.notes:
        if len(out.reply_notes) < MAX_NOTES:
            out.reply_notes.append(f"turn {turn} step {step}: {note}")
        else:
            out.reply_notes_dropped += 1


def _count_usage(out: EpisodeOutcome, result: ChatResult) -> None:
    out.n_llm_calls += 1
    out.length_stops += result.finish_reason == "length"
    out.tokens_in += result.usage.prompt_tokens
    out.tokens_out += result.usage.completion_tokens
    out.tokens_reasoning += result.usage.reasoning_tokens
    out.llm_latency_s += result.latency_s


def _assistant_message(
    fmt: str, result: ChatResult, tool_call_text: str | None = None
) -> dict[str, Any]:
    """The assistant message rebuilt from the cleaned reply (`reply="normalized"`)."""
    message: dict[str, Any] = {"role": "assistant", "content": result.text or ""}
    if fmt == "native" and result.tool_calls:
        # As a server sends a tool-call message back (and BFCL echoes it): no text is
        # null, unless the benchmark's runner sends it otherwise (`tool_call_text`).
        message["content"] = result.text or tool_call_text
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
    conventions: AgentConventions,
    fmt: str,
    tool_calls: list[dict[str, Any]],
    observations: list[ToolResult],
) -> list[dict[str, Any]]:
    calls = tool_calls if fmt == "native" else []
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
