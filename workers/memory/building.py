"""What every memory method's builders share: one prompt in, one validated value out,
and a bounded concurrent map in input order.

Model output is untrusted and validated by the caller's `validate`. An invalid answer
is retried ONCE with a message naming the violations; a second invalid answer, or a
request the server refuses (`RequestRejected`, e.g. a context overflow), returns None
and the caller falls back to a deterministic entry built from the trajectory with
``fallback=True``. `InfraError` propagates: the caller retries or records the stage.
Every request, retry, fallback and violation is counted in `BuildStats`.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from distillery.workers.llm.reasoning import split_think_blocks
from distillery.workers.llm.types import (
    ChatResult,
    ContextOverflow,
    InvalidReply,
    RequestRejected,
)

T = TypeVar("T")
R = TypeVar("R")

# Sent after an invalid answer, naming what was wrong (field: problems). A method passes
# its own text when its prompts are part of its bank identity.
DEFAULT_RETRY_PROMPT = """\
Your answer is invalid: {problems}
Answer again, following every rule of the original request, and output only the answer.
"""


class BuilderLLM(Protocol):
    """What a builder needs from the LLM layer (e.g. a router bound to one request id)."""

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> ChatResult: ...


@dataclass
class BuildStats:
    """Counts per builder kind (``wf``, ``st``, ``text``), for the orchestrator to log.

    `invalid` and `skipped` are keyed ``"<kind>:<reason>"`` (e.g. ``"wf:leak"``,
    ``"st:gap"``, ``"wf:unsuccessful"``). One instance may be shared by all builders.
    """

    requests: Counter[str] = field(default_factory=Counter)
    retries: Counter[str] = field(default_factory=Counter)
    fallbacks: Counter[str] = field(default_factory=Counter)
    # Built deterministically by design (no builder LLM configured, e.g. for the oracle
    # teacher): not a failure, so not counted as a fallback.
    deterministic: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)  # LLM answers used
    invalid: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    tokens_in: Counter[str] = field(default_factory=Counter)
    tokens_out: Counter[str] = field(default_factory=Counter)

    def merge(self, other: BuildStats) -> BuildStats:
        for name in self.__dataclass_fields__:
            getattr(self, name).update(getattr(other, name))
        return self

    def as_dict(self) -> dict[str, int]:
        """Flat metrics: ``{"wf.requests": 3, "invalid.wf:leak": 1, ...}``."""
        out: dict[str, int] = {}
        for name in (
            "requests",
            "retries",
            "fallbacks",
            "deterministic",
            "accepted",
            "tokens_in",
            "tokens_out",
        ):
            for kind, count in sorted(getattr(self, name).items()):
                out[f"{kind}.{name}"] = count
        for name in ("invalid", "skipped"):
            for key, count in sorted(getattr(self, name).items()):
                out[f"{name}.{key}"] = count
        return out


@dataclass(frozen=True)
class Violation:
    code: str  # short, stable: counted in BuildStats.invalid
    message: str  # told to the model on the retry


_FENCE = re.compile(r"^\s*```[\w-]*\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


def strip_reasoning(text: str) -> str:
    # The chat client splits reasoning off already; a BuilderLLM need not be one.
    return split_think_blocks(text or "")[0].strip()


def strip_fences(text: str) -> str:
    match = _FENCE.match(text)
    return match.group(1).strip() if match else text


class LLMClient:
    """Prompt -> validated value, with one retry naming the violations."""

    def __init__(
        self,
        llm: BuilderLLM | None,
        kind: str,
        stats: BuildStats,
        chat_kwargs: Mapping[str, Any] | None,
        retry_prompt: str = DEFAULT_RETRY_PROMPT,
    ) -> None:
        self.llm, self.kind, self.stats = llm, kind, stats
        self.chat_kwargs = dict(chat_kwargs or {})
        self.retry_prompt = retry_prompt

    def count_fallback(self) -> None:
        counter = self.stats.deterministic if self.llm is None else self.stats.fallbacks
        counter[self.kind] += 1

    async def ask(
        self,
        prompt: str,
        validate: Callable[[str], tuple[T | None, list[Violation]]],
        system: str | None = None,
    ) -> T | None:
        """The first valid answer's value, or None (the caller falls back); `system`,
        where given, is sent as the system message before the prompt."""
        if self.llm is None:
            return None
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        for attempt in range(2):
            self.stats.requests[self.kind] += 1
            try:
                result = await self.llm.chat(messages, **self.chat_kwargs)
            except RequestRejected as exc:  # a RequestConfigError is no refusal: it stops
                reason = "context_overflow" if isinstance(exc, ContextOverflow) else "rejected"
                self.stats.invalid[f"{self.kind}:request_{reason}"] += 1
                return None
            except InvalidReply:
                self.stats.invalid[f"{self.kind}:invalid_reply"] += 1
                return None
            self.stats.tokens_in[self.kind] += result.usage.prompt_tokens
            self.stats.tokens_out[self.kind] += result.usage.completion_tokens
            text = strip_reasoning(result.text or "")
            value, problems = validate(text)
            if not problems:
                self.stats.accepted[self.kind] += 1
                return value
            for problem in problems:
                self.stats.invalid[f"{self.kind}:{problem.code}"] += 1
            if attempt == 0:
                self.stats.retries[self.kind] += 1
                messages = [
                    *messages,
                    {"role": "assistant", "content": text},
                    {
                        "role": "user",
                        "content": self.retry_prompt.format(
                            problems="; ".join(p.message for p in problems)
                        ),
                    },
                ]
        return None


async def gather_ordered(
    items: Iterable[T], fn: Callable[[T], Awaitable[R]], concurrency: int
) -> list[R]:
    """`fn` over `items`, at most `concurrency` at a time, results in input order.

    The first exception cancels the rest and propagates unchanged (not as a group).
    """
    semaphore = asyncio.Semaphore(max(1, concurrency))

    async def one(item: T) -> R:
        async with semaphore:
            return await fn(item)

    tasks = [asyncio.ensure_future(one(item)) for item in items]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
