"""Messages episode hooks put into the history between requests, and take back out.

Hooks that define the optional `step_messages(turn_index, steps_done, reply,
observations)` are asked at the start of every turn (`steps_done` 0, `reply` None, no
observations: after the turn's user message, or after a benchmark's own opening) and
after every step (`reply`: the step's assistant message as the history keeps it;
`observations`: the step's as the model sees them). They answer a `StepMessages` (or
None, nothing): user messages to put right after the step's reply (before its
observations), user messages to append (the last before the next request), and the keys
of messages they placed earlier, to take out of the history. The AMD authors' SASM
student moves its one experience message this way at each announced subtask transition;
their SASM and MemP students append a warning when the same code ran three times.

Each message carries a key of the hooks' choosing (unique while it is in the history).
The loop marks it (`HOOK_NAME`, dropped on the wire) and records every message placed
and every message withdrawn in the episode's `injections` (`where` "message" and
"message_withdrawn"). Messages are placed after the opening the benchmark's context
trimming keeps (`opening`), so the transcript is the history as it stands at the end:
a withdrawn message is in `injections` only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from distillery.workers.agents.policies import HOOK_NAME
from distillery.workers.envs.base import ToolResult
from distillery.workers.trajectories import MAX_CALL_TEXT, InjectionRecord


@dataclass(frozen=True)
class HookMessage:
    key: str  # the hooks' name for it, to withdraw it later
    text: str  # a user message's content


@dataclass(frozen=True)
class StepMessages:
    after_reply: tuple[
        HookMessage, ...
    ] = ()  # right after the step's reply (at a turn's start: appended)
    appended: tuple[HookMessage, ...] = ()  # after the observations
    withdrawn: tuple[str, ...] = ()  # keys of messages placed earlier (taken out first)


async def place_step_messages(
    hooks: Any,
    out: Any,
    placed: dict[str, dict[str, Any]],
    turn: int,
    steps_done: int,
    reply: dict[str, Any] | None,
    observations: list[ToolResult],
    opening: int,
) -> int:
    """Ask `hooks` (if they define `step_messages`) and change `out.messages` as they
    say; `placed` keeps the messages placed so far by key. Returns the opening's length
    (unchanged unless a withdrawn message lay inside it)."""
    ask = getattr(hooks, "step_messages", None)
    if ask is None:
        return opening
    text = None if reply is None else str(reply.get("content") or "")
    found: StepMessages | None = await ask(turn, steps_done, text, observations)
    if not found:
        return opening
    step = -1 if reply is None else steps_done - 1
    messages = out.messages
    for key in found.withdrawn:
        message = placed.pop(key, None)
        index = next((i for i, m in enumerate(messages) if m is message), None)
        if message is None or index is None:
            continue
        del messages[index]
        opening -= index < opening
        note_injection(out, turn, step, "message_withdrawn", "", message["content"])
    at = len(messages)
    if reply is not None:
        at = next((i + 1 for i, m in enumerate(messages) if m is reply), at)
    for position, item in [
        *((at + i, m) for i, m in enumerate(found.after_reply)),
        *((None, m) for m in found.appended),
    ]:
        if item.key in placed:
            raise ValueError(f"hooks placed a second message with the key {item.key!r}")
        message = {"role": "user", "name": HOOK_NAME, "content": item.text}
        messages.insert(len(messages) if position is None else position, message)
        placed[item.key] = message
        note_injection(out, turn, step, "message", "", item.text)
    return opening


def note_injection(out: Any, turn: int, step: int, where: str, before: str, after: str) -> None:
    """Record what hooks added to `before` (a prompt, a user message, an observation; ""
    for a message of their own), when they changed it: the text around the original
    where it is kept, else all."""
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
