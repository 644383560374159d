"""Who produces the assistant messages of an episode: an LLM, or the labelled oracle."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from distillery.workers.llm.types import ChatResult

# Marks observation messages sent as `user` messages (the prompt format of most
# benchmarks), so they can be told apart from real user turns in the transcript. It is
# bookkeeping: a request carries the benchmark's message without it (`wire_messages`).
OBSERVATION_NAME = "tool_results"
# Marks the messages of a benchmark's own opening conversation but its last (AppWorld's
# ReAct prompt: a worked demonstration before the task), so they are told apart from
# the task's user turns; bookkeeping too, dropped on the wire.
PROMPT_NAME = "benchmark_prompt"
# Marks the user messages episode hooks place between requests (agents/hook_messages.py:
# a memory method's message of its own); bookkeeping too, dropped on the wire.
HOOK_NAME = "hook_message"
_MARKERS = frozenset({OBSERVATION_NAME, PROMPT_NAME, HOOK_NAME})


def wire_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as sent to a model: observation, prompt and hook markers removed."""
    if not any(m.get("name") in _MARKERS for m in messages):
        return messages
    return [
        {k: v for k, v in m.items() if k != "name"} if m.get("name") in _MARKERS else m
        for m in messages
    ]


class EpisodePolicy(Protocol):
    """Produces the next assistant message of one episode."""

    action_format: str  # native | prompt

    async def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> ChatResult: ...

    async def close(self) -> None: ...


class ChatBackend(Protocol):
    """What an LLM policy needs from the LLM layer (a router over server replicas)."""

    async def chat(
        self, episode_id: str, messages: list[dict[str, Any]], **kwargs: Any
    ) -> ChatResult: ...

    def end_episode(self, episode_id: str) -> None: ...

    # Optional (looked up with getattr): `async def count_tokens(self, episode_id: str,
    # messages: list[dict]) -> int | None`, the conversation's tokens as the serving
    # model's tokenizer and chat template count them (None: the server cannot say).


class LlmPolicy:
    """A model behind an OpenAI-compatible endpoint, kept on one replica per episode."""

    def __init__(
        self,
        backend: ChatBackend,
        episode_id: str,
        action_format: str,
        temperature: float | None,
        max_tokens: int | None,
        seed: int | None,
        top_p: float | None = None,
        context_tokens: int | None = None,
    ) -> None:
        self._backend = backend
        self._episode_id = episode_id
        self.action_format = action_format
        # What a request may hold: the served context less the reply's room (None: no
        # limit known, e.g. an API model). A benchmark that trims its conversation to
        # the context (AppWorld's loop) reads it; others send everything.
        self.prompt_token_limit = (
            context_tokens - (max_tokens or 0) if context_tokens is not None else None
        )
        # None: not sent (the server's default); the client sends each as its model's
        # server wants it (e.g. max_tokens as max_completion_tokens).
        self._sampling = {
            "temperature": temperature,
            "max_tokens": max_tokens,
            "seed": seed,
            "top_p": top_p,
        }

    async def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> ChatResult:
        kwargs: dict[str, Any] = dict(self._sampling)
        if self.action_format == "native" and tools:
            kwargs["tools"] = tools
        return await self._backend.chat(self._episode_id, wire_messages(messages), **kwargs)

    async def count_tokens(self, messages: list[dict[str, Any]]) -> int | None:
        """The conversation's tokens as this episode's server counts them (its model's
        tokenizer and chat template, no generation prompt); None where it cannot."""
        count = getattr(self._backend, "count_tokens", None)
        if count is None:
            return None
        return await count(self._episode_id, wire_messages(messages))

    async def close(self) -> None:
        self._backend.end_episode(self._episode_id)


class OraclePolicy:
    """Replays the benchmark's ground truth, one step per reply, then ends the turn.

    It is an upper bound labelled as `oracle` everywhere, not a model: it lets the whole
    pipeline (episodes, checker, memory building) run offline. Each step of the
    benchmark's `oracle_turns` is written as the benchmark writes a reply in its prompt
    format (`reply`: its conventions' `oracle_reply`), so it goes through the same
    decoding and validation as any model output.
    """

    action_format = "prompt"

    def __init__(self, ground_truth: list[list[str]], reply: Callable[[str], str]) -> None:
        self._turns = ground_truth
        self._reply = reply
        self._cursor: tuple[int, int] = (-1, 0)
        self._calls = 0

    async def respond(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> ChatResult:
        # The turn is the number of user turns seen so far; observation messages in the
        # prompt format are also `user` messages, so they are marked and skipped.
        turn = sum(1 for m in messages if m["role"] == "user" and not m.get("name")) - 1
        done_turn, index = self._cursor
        if turn != done_turn:
            index = 0
        calls = self._turns[turn] if 0 <= turn < len(self._turns) else []
        self._calls += 1
        if index >= len(calls):
            self._cursor = (turn, index)
            return ChatResult(text="", endpoint="oracle")
        self._cursor = (turn, index + 1)
        return ChatResult(text=self._reply(calls[index]), endpoint="oracle")

    async def close(self) -> None:
        return None
