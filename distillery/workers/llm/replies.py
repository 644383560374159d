"""A chat completion body -> a clean `ChatResult`, whatever the server sent.

A reply is data: nothing in it may crash the worker later (when it is re-sent, stored
as Parquet or matched to observations). Everything is normalised here, once, at the
client boundary, and every repair is noted on the result (`ChatResult.notes`):

- text: NUL characters are dropped and lone surrogates (which UTF-8 cannot encode)
  become U+FFFD, in the content, the call names and the call arguments (escaped ones
  inside the arguments' JSON included);
- content given as a list of parts is joined from its text parts;
- tool calls get unique string ids (a missing, non-string or repeated id is replaced
  by our own), and arguments given as JSON values are encoded as the string the
  protocol expects;
- usage counts that are not non-negative integers below `MAX_TOKEN_COUNT` count as 0.

A body that is not a chat completion at all (not JSON, no choices) is the server's
failure (`InfraError`, retried); a completion whose message cannot be used (content that
is a number or an object, tool calls that are not a list) is the model's answer and
raises `InvalidReply`, which ends the episode as the model's failure.
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from distillery.workers.llm.types import ChatResult, InfraError, InvalidReply, Usage

# One request's tokens; anything above is not a count (10**20 overflows int64 storage).
MAX_TOKEN_COUNT = 10**9
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
# A \u escape in JSON text that may decode to NUL or a surrogate.
_RISKY_ESCAPE = re.compile(r"\\u(?:[dD][89a-fA-F]|0000)", re.ASCII)
_MAX_NOTE_VALUE = 60
# Ids and function names are short; longer ones are cut (they would be re-sent at every
# step, and no function of any benchmark has such a name).
MAX_NAME_CHARS = 256


def clean_text(text: str) -> tuple[str, bool]:
    """`text` with NUL removed and lone surrogates replaced; whether anything changed."""
    if "\x00" not in text:
        try:
            text.encode("utf-8")
            return text, False
        except UnicodeEncodeError:
            pass
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", "")), True


def _clean_value(value: Any) -> tuple[Any, bool]:
    """A decoded JSON value with every string (keys too) cleaned."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        items = [_clean_value(item) for item in value]
        return [item for item, _ in items], any(changed for _, changed in items)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        changed = False
        for key, item in value.items():
            clean_key, key_changed = clean_text(key)
            out[clean_key], item_changed = _clean_value(item)
            changed = changed or key_changed or item_changed
        return out, changed
    return value, False


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _MAX_NOTE_VALUE else text[: _MAX_NOTE_VALUE - 3] + "..."


# ------------------------------------------------------------------------ fields


def reply_text(content: Any, notes: list[str]) -> str:
    """The message content as text: a string, or the text parts of a list joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        text, changed = clean_text(content)
        if changed:
            notes.append("content: NUL or lone surrogates removed")
        return text
    if isinstance(content, list):
        texts: list[str] = []
        ignored = 0
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("refusal"), str):
                texts.append(part["refusal"])
            else:
                ignored += 1
        notes.append(
            f"content: a list of {len(content)} parts, joined"
            + (f" ({ignored} without text ignored)" if ignored else "")
        )
        return reply_text("".join(texts), notes)
    raise InvalidReply(f"content is {type(content).__name__} {_show(content)}, not text")


def call_arguments(arguments: Any, notes: list[str], where: str) -> str:
    """Tool call arguments as the JSON string the protocol (and a re-send) needs."""
    if arguments is None or arguments == "":
        return "{}"
    if not isinstance(arguments, str):
        cleaned, _ = _clean_value(arguments)
        notes.append(f"{where}: arguments were a JSON {type(arguments).__name__}, encoded")
        return json.dumps(cleaned, ensure_ascii=False)
    text, changed = clean_text(arguments)
    if _RISKY_ESCAPE.search(text):
        # Escapes decode to NUL or lone surrogates only when the JSON is read: read it,
        # clean it, and write it back (invalid JSON is left for the environment to
        # reject with its own reason).
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        else:
            value, escaped = _clean_value(value)
            if escaped:
                text, changed = json.dumps(value, ensure_ascii=False), True
    if changed:
        notes.append(f"{where}: NUL or lone surrogates removed from the arguments")
    return text


def tool_calls(raw: Any, notes: list[str]) -> list[dict[str, Any]]:
    """`{"id", "name", "arguments"}` per function call, ids unique strings."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidReply(f"tool_calls is {type(raw).__name__} {_show(raw)}, not a list")
    calls: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, call in enumerate(raw):
        where = f"tool_calls[{index}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            notes.append(f"{where}: not a function call, ignored")
            continue
        name = function.get("name")
        if isinstance(name, str):
            name, changed = clean_text(name)
            if changed:
                notes.append(f"{where}: NUL or lone surrogates removed from the name")
        else:
            notes.append(f"{where}: name {_show(name)} is not a string")
            name = clean_text(json.dumps(name, default=repr))[0]
        if len(name) > MAX_NAME_CHARS:
            notes.append(f"{where}: name of {len(name)} characters cut")
            name = name[:MAX_NAME_CHARS]
        call_id = call.get("id")
        usable = isinstance(call_id, str) and 0 < len(call_id) <= MAX_NAME_CHARS
        if not usable or call_id in seen:
            why = "repeated" if usable else "invalid"
            fresh = f"call_{uuid.uuid4().hex[:16]}"
            notes.append(f"{where}: {why} id {_show(call_id)} replaced by {fresh}")
            call_id = fresh
        else:
            call_id, changed = clean_text(call_id)
            if changed or call_id in seen:
                call_id = f"call_{uuid.uuid4().hex[:16]}"
                notes.append(f"{where}: id with NUL or lone surrogates replaced by {call_id}")
        seen.add(call_id)
        arguments = call_arguments(function.get("arguments"), notes, where)
        calls.append({"id": call_id, "name": name, "arguments": arguments})
    return calls


def token_count(value: Any, field: str, notes: list[str]) -> int:
    if type(value) is int and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    if value is None:
        return 0
    if type(value) is float and value.is_integer() and 0 <= value <= MAX_TOKEN_COUNT:
        return int(value)
    notes.append(f"usage.{field} {_show(value)} is not a token count: counted as 0")
    return 0


def usage(raw: Any, notes: list[str]) -> Usage:
    if raw is None:
        return Usage()
    if not isinstance(raw, dict):
        notes.append(f"usage {_show(raw)} is not an object: counted as 0")
        return Usage()
    return Usage(
        prompt_tokens=token_count(raw.get("prompt_tokens"), "prompt_tokens", notes),
        completion_tokens=token_count(raw.get("completion_tokens"), "completion_tokens", notes),
    )


def finish_reason(raw: Any, notes: list[str]) -> str | None:
    if raw is None or (isinstance(raw, str) and len(raw) <= 64 and raw.isprintable()):
        return raw
    notes.append(f"finish_reason {_show(raw)} is not a reason: dropped")
    return None


# ------------------------------------------------------------------------- reply


def parse_completion(body: bytes, latency_s: float, attempts: int, endpoint: str) -> ChatResult:
    """One chat completion body -> a clean result (or the reason it cannot be one)."""
    notes: list[str] = []
    try:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            # Replaced, not fatal: the rest of the reply may be fine.
            text = body.decode("utf-8", "replace")
            notes.append("body: invalid UTF-8 replaced")
        response = json.loads(text)
        choice = response["choices"][0]
        message = choice.get("message")
    except (ValueError, LookupError, TypeError, AttributeError, RecursionError) as exc:
        raise InfraError(
            f"{endpoint} sent a malformed chat completion: {type(exc).__name__}: "
            f"{str(exc)[:300]}; body starts {body[:200]!r}"
        ) from None
    if message is None:
        message = {}
    if not isinstance(message, dict):
        raise InvalidReply(f"message is {type(message).__name__} {_show(message)}, not an object")
    return ChatResult(
        text=reply_text(message.get("content"), notes),
        tool_calls=tool_calls(message.get("tool_calls"), notes),
        usage=usage(response.get("usage"), notes),
        latency_s=latency_s,
        finish_reason=finish_reason(choice.get("finish_reason"), notes),
        attempts=attempts,
        endpoint=endpoint,
        notes=tuple(notes),
    )
