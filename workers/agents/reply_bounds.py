"""What of a model's reply the agent loop keeps in its history: every tool call under
its own id, and text, call arguments and the number of calls bounded (`MAX_HISTORY_*`,
the environments' protection limits; the notes say what was cut). The loop parses a
reply whole and keeps it bounded (`workers/agents/loop.py`)."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from distillery.workers.envs.calls import PROTECTION_LIMITS
from distillery.workers.llm.types import ChatResult

MAX_HISTORY_TEXT = PROTECTION_LIMITS.max_text_chars
MAX_HISTORY_ARGUMENTS = PROTECTION_LIMITS.max_call_chars
MAX_HISTORY_CALLS = 4 * PROTECTION_LIMITS.max_calls  # (a reply with more is refused whole)


def with_unique_ids(result: ChatResult) -> ChatResult:
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


def bounded(result: ChatResult) -> tuple[ChatResult, list[str]]:
    """`result` as the history keeps it: oversize text and arguments cut (the notes
    say what was cut)."""
    notes: list[str] = []
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
        return result, notes
    return replace(result, text=text, tool_calls=calls), notes


def bounded_as_sent(
    message: dict[str, Any],
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """The server's message as the history keeps it (its text fields, the calls'
    arguments and the number of calls bounded as `bounded` bounds them), the calls as
    the observations answer them (``id``, ``name``, ``arguments`` as sent), and the
    notes of what was cut."""
    notes: list[str] = []
    kept = dict(message)
    for key, value in message.items():
        if isinstance(value, str) and len(value) > MAX_HISTORY_TEXT:
            notes.append(f"{key} of {len(value)} characters cut to {MAX_HISTORY_TEXT}")
            kept[key] = (
                value[:MAX_HISTORY_TEXT] + f" [... {len(value) - MAX_HISTORY_TEXT} characters cut]"
            )
    raw_calls = message.get("tool_calls")
    if not isinstance(raw_calls, list):
        return kept, [], notes
    if len(raw_calls) > MAX_HISTORY_CALLS:
        notes.append(f"{len(raw_calls)} tool calls cut to the first {MAX_HISTORY_CALLS}")
        raw_calls = raw_calls[:MAX_HISTORY_CALLS]
    calls, answered = [], []
    for call in raw_calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            arguments = function.get("arguments")
            size = len(
                arguments if isinstance(arguments, str) else json.dumps(arguments, default=repr)
            )
            if size > MAX_HISTORY_ARGUMENTS:
                notes.append(f"arguments of {function.get('name')!s:.40} ({size} characters) cut")
                function = {**function, "arguments": json.dumps({"cut": f"{size} characters"})}
                call = {**call, "function": function}
        calls.append(call)
        answered.append(
            {
                "id": call.get("id") if isinstance(call, dict) else None,
                "name": function.get("name") if isinstance(function, dict) else None,
                "arguments": function.get("arguments") if isinstance(function, dict) else None,
            }
        )
    kept["tool_calls"] = calls
    return kept, answered, notes
