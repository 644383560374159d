"""How the agent loop plays a benchmark: the conventions each benchmark declares.

Benchmarks differ in more than their tools and checker. How a tool result goes back to
the model (BFCL's prompting handlers send one user message holding the repr of a list
of tool messages; AppWorld sends its interpreter's output), how a step limit is counted
(BFCL lets a turn make one step more than its limit before force-quitting it) and how a
ground-truth step becomes an assistant reply (a call list, a code block) are the
benchmark's own. Playing a model as the benchmark's own runner plays it means using
them, so the loop asks the benchmark (`conventions_of`) instead of assuming one.

A benchmark declares them as a class attribute ``conventions = AgentConventions(...)``;
one that declares nothing gets `DEFAULT_CONVENTIONS`: OpenAI-style tool messages in
native mode, one JSON user message of results in the prompt format, at most
`max_steps_per_turn` steps a turn, and oracle steps written as the shared call-list
format of `calls.parse_text_calls` (``[name(key=value)]``).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, get_args

from distillery.workers.envs.base import ToolResult

# What answers a native tool call whose id no observation answers: every id must be
# answered or most servers refuse the next request.
UNANSWERED_CALL = "Error: this call was not executed."

# at_most: a turn makes at most `max_steps_per_turn` steps. exceeded: BFCL's count
# (`count > MAXIMUM_STEP_LIMIT`): a turn is force-quit once it has made more steps than
# the limit, i.e. after limit + 1 steps.
StepLimit = Literal["at_most", "exceeded"]
STEP_LIMITS: tuple[str, ...] = get_args(StepLimit)
# task: the user's turns are the task's (`Task.turns`), played in order. environment:
# the task's turns open the conversation and then the benchmark's own user speaks (a
# simulated user, as ToolSandbox's): after each turn the loop gives the agent's closing
# reply to the environment (`next_user_message`), which answers with the user's next
# message or None when the user ends the conversation.
UserTurns = Literal["task", "environment"]
USER_TURNS: tuple[str, ...] = get_args(UserTurns)
# normalized: the loop parses the client's cleaned reply (reasoning and <think> blocks
# split off, empty arguments as {}, ids made unique, arguments encoded as strings) and
# keeps a message rebuilt from it. as_sent: the loop parses and keeps the server's
# message as the server sent it (`ChatResult.message`), as a runner that re-sends the
# API's message object does (BFCL's): native observations get the reply's calls as sent.
ReplyHandling = Literal["normalized", "as_sent"]
REPLY_HANDLINGS: tuple[str, ...] = get_args(ReplyHandling)
# The request parameters a model config may set that a runner sends.
SAMPLING_FIELDS = ("temperature", "top_p", "seed", "max_tokens")


# Ours: the longest observation the history keeps where the benchmark's own runner has
# no cut of its own. Far above any observation of BFCL (a few KB) or ToolSandbox, so
# their episodes never meet it; what it stops is an output of megabytes (AppWorld
# returns a program's stdout uncut: `print('x' * 30_000_000)` is 30 bytes of code) kept
# and re-sent at every later step. `benchmark.options.max_observation_chars` changes it.
DEFAULT_OBSERVATION_CHARS = 100_000


def cut_with_marker(text: str, max_chars: int) -> str:
    """Ours: the first `max_chars` characters and a line saying how many were cut."""
    if len(text) <= max_chars:
        return text
    return f"{text[:max_chars]}\n[... {len(text) - max_chars} characters cut]"


@dataclass(frozen=True)
class ObservationCut:
    """How long one observation may be when it enters the history, and how a longer one
    is cut: the benchmark's own cut where its runner has one (its length and its way of
    cutting, `origin` citing the file), else distillery's documented default
    (`DEFAULT_OBSERVATION_CUT`). Every cut that fires is counted in the episode record
    (`limits_fired`: `observation_cut`)."""

    max_chars: int
    # (text, max_chars) -> the text as the benchmark shows a cut observation.
    cut: Callable[[str, int], str] = cut_with_marker
    origin: str = "ours"

    def __post_init__(self) -> None:
        if not (isinstance(self.max_chars, int) and self.max_chars > 0):
            raise ValueError(
                f"ObservationCut.max_chars must be a positive int, not {self.max_chars!r}"
            )
        if not callable(self.cut):
            raise TypeError("ObservationCut.cut must be callable")


DEFAULT_OBSERVATION_CUT = ObservationCut(
    DEFAULT_OBSERVATION_CHARS,
    cut_with_marker,
    "ours: distillery's default cap (conventions.DEFAULT_OBSERVATION_CHARS)",
)


class ResultFeedback(Protocol):
    """The messages that give one step's observations back to the model.

    `tool_calls` are the reply's calls as the loop keeps them (``id``, ``name``,
    ``arguments``; empty in the prompt format), `observations` the environment's
    results in the reply's order. User-role messages are marked as observations by the
    loop (bookkeeping, removed on the wire)."""

    def __call__(
        self, tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
    ) -> list[dict[str, Any]]: ...


def tool_messages(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """One `tool` message per call of the reply, matched by id (OpenAI's convention)."""
    by_id = {o.call_id: o for o in observations if o.call_id}
    messages = []
    for call in tool_calls:
        obs = by_id.get(call["id"])
        content = obs.content if obs else UNANSWERED_CALL
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
    return messages


def named_tool_messages(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """`tool_messages`, each naming the function it answers (``name``), as ToolSandbox's
    runner sends its results (`tool_sandbox.common.message_conversion.to_openai_messages`)."""
    named = tool_messages(tool_calls, observations)
    for message, call in zip(named, tool_calls, strict=True):
        message["name"] = call["name"]
    return named


def json_results_message(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """One user message: a JSON list of each call and its result, in order."""
    payload = [{"call": o.call, "result": o.content} for o in observations]
    return [{"role": "user", "content": json.dumps(payload, ensure_ascii=False)}]


class Trim(Protocol):
    """Drops history so the request fits: `(messages, opening, fits)` -> (messages to
    send, what was left out). `opening` is the number of messages before the first
    reply (never dropped); `fits` says whether a list of messages fits the budget
    (always yes where no budget is known). What was left out: the number of step pairs
    dropped, or (a trim that does more than drop pairs) a phrase saying what it did,
    "" for nothing; the episode's notes say it."""

    def __call__(
        self,
        messages: Sequence[dict[str, Any]],
        opening: int,
        fits: Callable[[list[dict[str, Any]]], Awaitable[bool]],
    ) -> Awaitable[tuple[list[dict[str, Any]], int | str]]: ...


@dataclass(frozen=True)
class ContextChoice:
    """Which of a benchmark's context trims an episode uses, and the tokens it keeps
    free beside the reply: what a memory method's port asks for (its hooks'
    `context_choice`; e.g. the AMD authors' MemP and SASM ports on AppWorld trim as
    their own student loops did). None: the benchmark's own."""

    trim: str | None = None
    buffer_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.buffer_tokens is not None and self.buffer_tokens < 0:
            raise ValueError(f"a context buffer is >= 0 tokens, not {self.buffer_tokens}")


@dataclass(frozen=True)
class ContextTrim:
    """A benchmark's own loop keeps its conversation within the model's context by
    dropping history before each request (AppWorld's: the oldest steps): what a request
    may hold is the model's context less its reply's room (max_tokens) and
    `buffer_tokens`, counted by the model's own tokenizer. `name` names that trim;
    `alternatives` are other trims of the benchmark's harnesses, by name, that an
    episode may choose instead (`chosen`)."""

    buffer_tokens: int
    trim: Trim
    name: str = "own"
    alternatives: Mapping[str, Trim] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.alternatives)

    def chosen(self, choice: ContextChoice | None) -> ContextTrim:
        """This trim as `choice` asks (its named trim, its buffer); itself for none.
        A name the benchmark does not know is refused."""
        if choice is None or (choice.trim is None and choice.buffer_tokens is None):
            return self
        name = choice.trim if choice.trim is not None else self.name
        if name not in self.names:
            raise ValueError(
                f"unknown context trim {name!r}; this benchmark has {', '.join(self.names)}"
            )
        trim = self.trim if name == self.name else self.alternatives[name]
        buffer = self.buffer_tokens if choice.buffer_tokens is None else choice.buffer_tokens
        return ContextTrim(buffer, trim, name, self.alternatives)


def call_list_reply(step: str) -> str:
    """A ground-truth call as a prompt-format reply of the shared call decoder."""
    return f"[{step}]"


@dataclass(frozen=True)
class AgentConventions:
    """The benchmark's own ways of playing an episode (see the module docstring)."""

    # How observations go back in the prompt format and in native tool calling.
    prompt_results: ResultFeedback = json_results_message
    native_results: ResultFeedback = tool_messages
    step_limit: StepLimit = "at_most"
    # One ground-truth step (an `oracle_turns` item) as the reply the oracle sends: it
    # goes through the environment's `parse_text` like any model's reply.
    oracle_reply: Callable[[str], str] = call_list_reply
    user_turns: UserTurns = "task"
    # The world says when the task is over (`task_done`, read after every step), and the
    # episode ends there, as the benchmark's own loop ends it (AppWorld's loop stops once
    # `complete_task` has been called).
    world_ends_episode: bool = False
    # How long one observation (a tool result, a program's output) may be when it
    # enters the history. A benchmark whose own runner cuts its tool output declares
    # that cut here, `ObservationCut(max_chars, cut, origin)`: its length, its way of
    # cutting and the file it comes from (AppWorld's 20,000 characters). One that
    # declares none gets distillery's default cap (`DEFAULT_OBSERVATION_CUT`, ours).
    # Either way a cut that fires is counted in the record; the config's
    # `benchmark.options.max_observation_chars` changes the length (a deviation where
    # the benchmark has its own).
    observation_cut: ObservationCut = DEFAULT_OBSERVATION_CUT
    # The prompt format's reply as the history keeps it (AppWorld's loop keeps it cut
    # after the code it ran); None: as the model wrote it.
    kept_reply: Callable[[str], str] | None = None
    # The benchmark's loop trims the conversation to the model's context before each
    # request (None: it sends it whole and an overflow is the model's failure).
    context_trim: ContextTrim | None = None
    # How a reply is parsed and kept in the history (see `ReplyHandling`).
    reply: ReplyHandling = "normalized"
    # The text of a kept reply that only calls tools (native format): None, as a server
    # sends it back; ToolSandbox's runner sends "" (its `to_openai_messages`).
    tool_call_text: str | None = None
    # Which of the model config's request parameters (`SAMPLING_FIELDS`) the benchmark's
    # runner sends; None: every one the model config sets. BFCL's handler sends its
    # temperature only (no token cap, no seed).
    sampling: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.step_limit not in STEP_LIMITS:
            raise ValueError(
                f"step_limit must be one of {', '.join(STEP_LIMITS)}, not {self.step_limit!r}"
            )
        if self.user_turns not in USER_TURNS:
            raise ValueError(
                f"user_turns must be one of {', '.join(USER_TURNS)}, not {self.user_turns!r}"
            )
        if self.reply not in REPLY_HANDLINGS:
            raise ValueError(
                f"reply must be one of {', '.join(REPLY_HANDLINGS)}, not {self.reply!r}"
            )
        unknown = sorted(set(self.sampling or ()) - set(SAMPLING_FIELDS))
        if unknown:
            raise ValueError(f"sampling may name {', '.join(SAMPLING_FIELDS)} only, not {unknown}")
        for name in ("prompt_results", "native_results", "oracle_reply"):
            if not callable(getattr(self, name)):
                raise TypeError(f"AgentConventions.{name} must be callable")
        if not isinstance(self.observation_cut, ObservationCut):
            raise TypeError(
                "AgentConventions.observation_cut must be an ObservationCut, not "
                f"{type(self.observation_cut).__name__}"
            )
        if self.kept_reply is not None and not callable(self.kept_reply):
            raise TypeError("AgentConventions.kept_reply must be callable or None")
        if self.context_trim is not None and not isinstance(self.context_trim, ContextTrim):
            raise TypeError("AgentConventions.context_trim must be a ContextTrim or None")

    def results(
        self,
        action_format: str,
        tool_calls: Sequence[Mapping[str, Any]],
        observations: Sequence[ToolResult],
    ) -> list[dict[str, Any]]:
        feedback = self.native_results if action_format == "native" else self.prompt_results
        return feedback(tool_calls, observations)

    def with_observation_chars(self, max_chars: int | None) -> AgentConventions:
        """These conventions with observations cut at `max_chars` (None: as declared)."""
        if max_chars is None or max_chars == self.observation_cut.max_chars:
            return self
        return replace(self, observation_cut=replace(self.observation_cut, max_chars=max_chars))

    def with_context(self, choice: ContextChoice | None) -> AgentConventions:
        """These conventions with the context trim `choice` asks for (a memory method's
        port's, e.g. the MemP and SASM ports' on AppWorld); as declared for none. A
        choice on a benchmark that does not trim its context is refused."""
        if choice is None or (choice.trim is None and choice.buffer_tokens is None):
            return self
        if self.context_trim is None:
            raise ValueError(
                f"context trim {choice.trim!r} (buffer {choice.buffer_tokens}) asked of a "
                "benchmark that does not trim its conversation"
            )
        return replace(self, context_trim=self.context_trim.chosen(choice))

    def sent_sampling(self, model: Any) -> dict[str, Any]:
        """The request parameters of `model` (a model config) this runner sends: the
        others are None (not sent)."""
        return {
            name: getattr(model, name) if self.sampling is None or name in self.sampling else None
            for name in SAMPLING_FIELDS
        }

    def turn_is_over_limit(self, steps_in_turn: int, max_steps_per_turn: int) -> bool:
        """Whether a turn that has made `steps_in_turn` steps is force-quit now."""
        if self.step_limit == "exceeded":
            return steps_in_turn > max_steps_per_turn
        return steps_in_turn >= max_steps_per_turn


DEFAULT_CONVENTIONS = AgentConventions()


def conventions_of(benchmark: object) -> AgentConventions:
    """The conventions `benchmark` (an adapter or its class) declares, else the defaults."""
    declared = getattr(benchmark, "conventions", None)
    if declared is None:
        return DEFAULT_CONVENTIONS
    if not isinstance(declared, AgentConventions):
        name = getattr(benchmark, "name", type(benchmark).__name__)
        raise TypeError(
            f"benchmark {name!r}: conventions must be an AgentConventions, "
            f"not {type(declared).__name__}"
        )
    return declared
