"""What of an episode's conversation a request carries, where the benchmark's own loop
trims it to the model's context (`AgentConventions.context_trim`; AppWorld's).

The budget is the policy's: the model's context less its reply's room
(`prompt_token_limit`), less the benchmark's buffer. Tokens are counted by the policy
(`count_tokens`: the serving model's own tokenizer and chat template); a policy that
cannot count (no limit known, or a server without a tokenizer endpoint) gets the whole
conversation, as a benchmark without trimming does, and the episode's notes say so
once. Each request that leaves steps out says how many in the notes.
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
    if limit is None or count is None:
        return messages
    budget = limit - trim.buffer_tokens
    uncounted = False

    async def fits(view: list[dict[str, Any]]) -> bool:
        nonlocal uncounted
        tokens = await count(view)
        if tokens is None:
            uncounted = True
            return True
        return tokens <= budget

    view, dropped = await trim.trim(messages, opening, fits)
    if uncounted:
        if UNCOUNTED not in notes:
            notes.append(UNCOUNTED)
        return messages
    if not dropped:
        return messages
    if len(notes) < MAX_CONTEXT_NOTES:
        request = sum(m.get("role") == "assistant" for m in messages[opening:]) + 1
        notes.append(
            f"context: request {request} left out its {dropped} oldest steps to fit {budget} tokens"
        )
    return view
