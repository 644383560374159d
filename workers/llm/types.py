"""Records the LLM layer hands to agents."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class InfraError(RuntimeError):
    """The model could not be reached or kept failing (transport, timeout, 429, 5xx).

    Never a student failure: the episode is retried and, if it persists, recorded as
    `infra_error` and excluded from scoring.
    """


class RequestRejected(RuntimeError):
    """The server refused this particular request (HTTP 400) because of what the
    conversation holds (e.g. a malformed history the model's own replies produced).

    The model's own doing, so it ends the episode and is scored like any failure.
    """


class ContextOverflow(RequestRejected):
    """The conversation outgrew the model's context window: the model's failure, with
    its own termination reason (`context_overflow`), scored and counted apart."""


class RequestTooLarge(ContextOverflow):
    """The request body passed the model's hard ceiling (`max_request_bytes`): never
    sent. A history that big outgrew every context window, so it ends the episode as a
    context overflow, the model's failure; the worker's memory stays bounded."""


class RequestConfigError(ValueError):
    """The server refused a request because of how distillery built it from the model
    config (an unsupported parameter, a bad key, an unknown model).

    Not a result: it stops the run at once with the server's own message and the
    config key to change, and is never scored, retried or recorded as an episode.
    """


class InvalidReply(RuntimeError):
    """The server answered, but the reply cannot be used (content that is no text, a
    body over the size limit, ...).

    The reply is the model's (its server's) answer, so it ends the episode and is
    scored as the model's failure with this reason: never an infrastructure error,
    which would hide it from the success rate.
    """


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0  # reasoning tokens included, as servers count them
    reasoning_tokens: int = 0  # of completion_tokens, the server-reported thinking part

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True)
class ChatResult:
    """One chat completion as the agent loop needs it."""

    text: str  # the answer only: reasoning (think blocks) is split off into `reasoning`
    tool_calls: list[dict[str, Any]] = field(default_factory=list)  # {"id","name","arguments"}
    usage: Usage = Usage()
    latency_s: float = 0.0
    finish_reason: str | None = None
    attempts: int = 1
    endpoint: str | None = None  # base_url that answered
    notes: tuple[str, ...] = ()  # what the client repaired in the reply (see replies.py)
    # The model's reasoning text: kept for the record; a history re-sends it only
    # where the benchmark's own runner re-sends the server's message (`message`).
    reasoning: str = ""
    # The message exactly as the server sent it (every field, reasoning and repairs
    # the fields above make included), its strings only made encodable (NUL and lone
    # surrogates, noted): what a benchmark whose runner re-sends the server's message
    # (BFCL's) parses and keeps. Empty for results built by hand.
    message: dict[str, Any] = field(default_factory=dict)
