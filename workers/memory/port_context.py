"""How a memory method's port trims the student's history to its context, as read
settings (`context_trim`, `context_buffer` in `method_catalog.<name>.retrieval`).

The AMD authors ran each baseline with its own copy of ACE's AppWorld student loop, and
the copies trim differently: their ReasoningBank copy drops the oldest steps with 256
tokens kept free beside the reply (AppWorld's default here), their MemP and SASM copies
blank old outputs first and then drop messages behind a marker, the MemP Qwen3-4B
config keeping 1,536 tokens free. A port's catalog entry says which: a trim the
benchmark names (AppWorld's `react.BLANK_THEN_TRIM`, ...) and a buffer; the method's
hooks pass it to the episode loop (`context_choice`), which asks the benchmark for it
(`AgentConventions.with_context`). The method knows no trim, only the names its
entry's config gives; the benchmark knows no method. None: the benchmark's own.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from distillery.workers.envs.conventions import ContextChoice

CONTEXT_FIELDS = ("context_trim", "context_buffer")


class PortContextSettings(BaseModel):
    """The two settings, for a method's settings model to inherit."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A context trim the benchmark names (AppWorld: drop_oldest_steps, its default, or
    # blank_then_trim); None: the benchmark's own. Checked against the benchmark before
    # a run starts (a benchmark that does not trim refuses any).
    context_trim: str | None = None
    # Tokens kept free beside the reply when trimming; None: the benchmark's (256 on
    # AppWorld).
    context_buffer: int | None = Field(default=None, ge=0, le=1_000_000)


def context_choice(settings: Any) -> ContextChoice | None:
    """The choice `settings` make (None where they make none, or have no such fields)."""
    trim = getattr(settings, "context_trim", None)
    buffer = getattr(settings, "context_buffer", None)
    if trim is None and buffer is None:
        return None
    return ContextChoice(trim, buffer)


def context_identity(settings: Any) -> dict[str, Any]:
    """The settings that are set, for an evaluate stage's identity: the keys of runs
    that choose nothing stay as they were."""
    found = {key: getattr(settings, key, None) for key in CONTEXT_FIELDS}
    return {key: value for key, value in found.items() if value is not None}
