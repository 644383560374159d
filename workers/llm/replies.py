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

Nesting is bounded before anything recurses on it: a message nested deeper than
`MAX_REPLY_NESTING`, or call arguments (a JSON value, or JSON text) deeper than
`MAX_ARGUMENT_NESTING` (far above any benchmark's arguments), is refused
(`InvalidReply`), and so is a body too deep for the JSON parser itself. A ~1.5 KB
reply nested 700 lists deep would otherwise raise `RecursionError` somewhere later,
read as an infrastructure error and re-run on every resume.

A body that is not a chat completion at all (not JSON, no choices) is the server's
failure (`InfraError`, retried); a completion whose message cannot be used (content that
is a number or an object, tool calls that are not a list) is the model's answer and
raises `InvalidReply`, which ends the episode as the model's failure.
"""

from __future__ import annotations

import json
import re
import reprlib
import uuid
from typing import Any, cast

from distillery.workers.llm.reasoning import reasoning_tokens, split_reasoning
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
# Container levels in one call's arguments (the environments allow 8), and in the
# whole message (the arguments sit 5 levels inside it).
MAX_ARGUMENT_NESTING = 64
MAX_REPLY_NESTING = MAX_ARGUMENT_NESTING + 8
_MAX_PATH_KEYS = 8  # of a too-deep value's path, in its reason
# Notes show a bounded repr: a few levels and items of a value, whatever its size.
_REPR = reprlib.Repr()
_REPR.maxlevel = 3
_REPR.maxstring = _REPR.maxother = _REPR.maxlong = _MAX_NOTE_VALUE


def clean_text(text: str) -> tuple[str, bool]:
    """`text` with NUL removed and lone surrogates replaced; whether anything changed."""
    if "\x00" not in text:
        try:
            text.encode("utf-8")
            return text, False
        except UnicodeEncodeError:
            pass
    return _LONE_SURROGATE.sub("\ufffd", text.replace("\x00", "")), True


def nesting_path(value: Any, limit: int) -> list[Any] | None:
    """The keys leading to a container nested more than `limit` levels deep in the
    decoded JSON `value` (the outermost container is level 1), or None. Iterative, so
    any depth is safe to ask about."""
    if not isinstance(value, (dict, list)):
        return None
    # (container, level, (key, parent entry) or None): the path is rebuilt only when needed.
    stack: list[tuple[Any, int, Any]] = [(value, 1, None)]
    while stack:
        entry = stack.pop()
        container, level, link = entry
        if level > limit:
            path: list[Any] = []
            while link is not None:
                key, (_, _, link) = link
                path.append(key)
            return path[::-1]
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, item in items:
            if isinstance(item, (dict, list)):
                stack.append((item, level + 1, (key, entry)))
    return None


def _path_text(path: list[Any]) -> str:
    text = "".join(
        f"[{key}]" if isinstance(key, int) else f".{key}" for key in path[:_MAX_PATH_KEYS]
    )
    text = clean_text(text.lstrip("."))[0]
    text = text if len(text) <= _MAX_NOTE_VALUE else text[: _MAX_NOTE_VALUE - 3] + "..."
    return text + ("..." if len(path) > _MAX_PATH_KEYS else "")


def _require_shallow(value: Any, limit: int, what: str) -> None:
    path = nesting_path(value, limit)
    if path is None:
        return
    if (
        what == "message"
        and len(path) > 4
        and path[0] == "tool_calls"
        and path[2:4]
        == [
            "function",
            "arguments",
        ]
    ):
        # Inside a call's arguments: say so (they are the part with the lower limit).
        what, limit, path = f"tool_calls[{path[1]}]: arguments", MAX_ARGUMENT_NESTING, path[4:]
    where = f" (at {_path_text(path)})" if path else ""
    raise InvalidReply(f"{what} nested too deeply: more than {limit} levels{where}")


def _clean_value(value: Any) -> tuple[Any, bool]:
    """A decoded JSON value with every string (keys too) cleaned. Recursive: only for
    values already checked to nest at most `MAX_REPLY_NESTING` levels."""
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
    text = _REPR.repr(value)
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
    """Tool call arguments as the JSON string the protocol (and a re-send) needs.

    Arguments nested more than `MAX_ARGUMENT_NESTING` levels, given as a JSON value or
    as JSON text, are refused (`InvalidReply`): no benchmark's call nests like that,
    and only a bound here keeps everything that reads them later from recursing.
    """
    what = f"{where}: arguments"
    if arguments is None or arguments == "":
        return "{}"
    if not isinstance(arguments, str):
        _require_shallow(arguments, MAX_ARGUMENT_NESTING, what)
        cleaned, _ = _clean_value(arguments)
        notes.append(f"{where}: arguments were a JSON {type(arguments).__name__}, encoded")
        return json.dumps(cleaned, ensure_ascii=False)
    text, changed = clean_text(arguments)
    risky = _RISKY_ESCAPE.search(text) is not None
    # Fewer opening brackets than the limit cannot nest deeper than it: most arguments
    # are not read here at all.
    if risky or text.count("[") + text.count("{") > MAX_ARGUMENT_NESTING:
        # Invalid JSON is left for the environment to reject with its own reason.
        try:
            value = json.loads(text)
        except RecursionError:
            raise InvalidReply(
                f"{what} nested too deeply: more than the JSON parser's recursion limit"
            ) from None
        except ValueError:
            value = None
        else:
            _require_shallow(value, MAX_ARGUMENT_NESTING, what)
            if risky:
                # Escapes decode to NUL or lone surrogates only when the JSON is read:
                # clean the value read, and write it back.
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
            call_id, changed = clean_text(cast(str, call_id))  # usable: a string
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
    completion = token_count(raw.get("completion_tokens"), "completion_tokens", notes)
    return Usage(
        prompt_tokens=token_count(raw.get("prompt_tokens"), "prompt_tokens", notes),
        completion_tokens=completion,
        # A part of completion_tokens: never more than it (a hostile count is no count).
        reasoning_tokens=min(reasoning_tokens(raw), completion),
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
        try:
            response = json.loads(text)
        except RecursionError:
            # Valid JSON, only too deep to read (whatever the stack): no usable reply.
            raise InvalidReply(
                "reply nested too deeply: more than the JSON parser's recursion limit"
            ) from None
        choice = response["choices"][0]
        message = choice.get("message")
    except (ValueError, LookupError, TypeError, AttributeError) as exc:
        raise InfraError(
            f"{endpoint} sent a malformed chat completion: {type(exc).__name__}: "
            f"{str(exc)[:300]}; body starts {body[:200]!r}"
        ) from None
    if message is None:
        message = {}
    # Before anything below recurses on it (cleaning, encoding, notes).
    _require_shallow(message, MAX_REPLY_NESTING, "message")
    if not isinstance(message, dict):
        raise InvalidReply(f"message is {type(message).__name__} {_show(message)}, not an object")
    # Reasoning (a separate field, or <think> blocks in the content) is split off the
    # cleaned text: it never enters a history or a parser.
    content = reply_text(message.get("content"), notes)
    fields = {k: message.get(k) for k in ("reasoning_content", "reasoning")}
    clean_fields = {k: clean_text(v)[0] if isinstance(v, str) else None for k, v in fields.items()}
    text, reasoning = split_reasoning({"content": content, **clean_fields})
    as_sent, changed = _clean_value(message)
    if changed:
        notes.append("message as sent: NUL or lone surrogates removed")
    return ChatResult(
        message=as_sent,
        text=text,
        reasoning=reasoning,
        tool_calls=tool_calls(message.get("tool_calls"), notes),
        usage=usage(response.get("usage"), notes),
        latency_s=latency_s,
        finish_reason=finish_reason(choice.get("finish_reason"), notes),
        attempts=attempts,
        endpoint=endpoint,
        notes=tuple(notes),
    )
