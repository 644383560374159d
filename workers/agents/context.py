"""What of an episode's conversation a request carries, where the benchmark's own loop
trims it to the model's context (`AgentConventions.context_trim`; AppWorld's).

The budget is the policy's: the model's context less its reply's room
(`prompt_token_limit`), less the trim's buffer (the benchmark's, or the one a memory
method's port chose with its trim: `AgentConventions.with_context`). Tokens are counted
by the policy (`count_tokens`: the serving model's own tokenizer and chat template). A
policy with no limit known (or that cannot count) has no budget: only a trim's own
rule applies (the MemP and SASM ports' character cap; dropping oldest steps keeps all).
A server without a tokenizer endpoint gets the whole conversation, as a benchmark
without trimming does, and the episode's notes say so once. Each request that leaves
something out says what in the notes.
"""

from __future__ import annotations

from typing import Any

from distillery.workers.envs.conventions import AgentConventions

UNCOUNTED = "context: the conversation could not be counted in tokens; sent whole"
MAX_CONTEXT_NOTES = 50  # notes of an episode, at most (one per trimmed request)


async def request_view(
    messages: list[dict[str, Any]],
    opening: int,
    conventions: AgentConventions,
    policy: Any,
    notes: list[str],
) -> list[dict[str, Any]]:
    """The messages the next request sends: `messages`, or the benchmark's trimmed view
    of them (the `opening` messages are never dropped). `notes` gets what happened."""
    trim = conventions.context_trim
    if trim is None:
        return messages
    limit = getattr(policy, "prompt_token_limit", None)
    count = getattr(policy, "count_tokens", None)
    # No budget known: the trim still runs, told that everything fits (a trim with a
    # rule of its own, the MemP and SASM ports' character cap, keeps it; dropping
    # oldest steps leaves all).
    budget = None if limit is None or count is None else limit - trim.buffer_tokens
    uncounted = False

    async def fits(view: list[dict[str, Any]]) -> bool:
        nonlocal uncounted
        if budget is None or count is None:
            return True
        tokens = await count(view)
        if tokens is None:
            uncounted = True
            return True
        return tokens <= budget

    view, left_out = await trim.trim(messages, opening, fits)
    if uncounted:
        if UNCOUNTED not in notes:
            notes.append(UNCOUNTED)
        return messages
    if not left_out:
        return messages
    if len(notes) < MAX_CONTEXT_NOTES:
        request = sum(m.get("role") == "assistant" for m in messages[opening:]) + 1
        what = left_out if isinstance(left_out, str) else f"left out its {left_out} oldest steps"
        room = f" to fit {budget} tokens" if budget is not None else ""
        notes.append(f"context: request {request} {what}{room}")
    return view
