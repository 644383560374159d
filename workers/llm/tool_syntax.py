"""Tool calls written as text by a model, in the syntax its chat template teaches it,
made into OpenAI `tool_calls` (what vLLM's tool parsers do for GPU students; here for
the llama.cpp backend, whose Python server leaves them in the text).

Two syntaxes, one per family of chat templates (`chat_templates.tool_call_syntax`
finds which one a template uses by rendering a call with it):

- ``hermes`` (Hermes 2/3, Qwen2.5, Qwen3 and their fine-tunes): each call is a JSON
  object ``{"name": ..., "arguments": {...}}`` inside ``<tool_call>...</tool_call>``;
  the last one may be left unclosed (the reply stopped at end of turn). As vLLM's
  `hermes` parser: the text before the first ``<tool_call>`` is the content (None when
  empty); if any call is not such a JSON object, the whole reply is text and no call.
- ``llama3_json`` (Llama 3.1, 3.2, 3.3 with their JSON tool-calling prompt): the reply
  is one JSON object ``{"name": ..., "parameters": {...}}`` (or ``"arguments"``), or
  several separated by ``;``, optionally after ``<|python_tag|>``. A reply is a call
  only when it is nothing but such objects (content None); anything else, a sentence
  around the JSON included, is text, as the Llama template's own instruction ("respond
  with a JSON for a function call") asks for one or the other.

Arguments are returned as the JSON text the protocol expects (``ensure_ascii=False``,
as vLLM writes them); ids are fresh per call. A reasoning block (``<think>...</think>``)
before the answer is left in the content untouched and never parsed for calls (the
client splits it off; a call the model only thought about is no call).
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

ToolCallSyntax = Literal["hermes", "llama3_json"]
TOOL_CALL_SYNTAXES: tuple[str, ...] = get_args(ToolCallSyntax)

_HERMES_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)
_PYTHON_TAG = "<|python_tag|>"
_LAST_THINK_CLOSE = re.compile(r"</think>", re.IGNORECASE)


@dataclass(frozen=True)
class ParsedReply:
    """A reply's text split into what is said (`content`) and what is called."""

    content: str | None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)


def parse_tool_calls(syntax: ToolCallSyntax, text: str) -> ParsedReply:
    """`text` (a whole reply) as content and OpenAI-style tool calls
    (``{"id", "type": "function", "function": {"name", "arguments"}}``)."""
    thought, answer = _split_thinking(text)
    if syntax == "hermes":
        parsed = _hermes(answer)
    elif syntax == "llama3_json":
        parsed = _llama3_json(answer)
    else:
        raise ValueError(f"unknown tool-call syntax {syntax!r} (one of {TOOL_CALL_SYNTAXES})")
    if not parsed.tool_calls:
        return ParsedReply(text)
    content = thought + (parsed.content or "")
    return ParsedReply(content or None, parsed.tool_calls)


def _split_thinking(text: str) -> tuple[str, str]:
    """(everything up to the last ``</think>`` included, the answer after it)."""
    closes = list(_LAST_THINK_CLOSE.finditer(text))
    if not closes:
        return "", text
    end = closes[-1].end()
    return text[:end], text[end:]


def _call(name: Any, arguments: Any) -> dict[str, Any]:
    if not isinstance(name, str) or not name:
        raise ValueError("a call's name must be a non-empty string")
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _hermes(text: str) -> ParsedReply:
    if "<tool_call>" not in text:
        return ParsedReply(text)
    try:
        calls = []
        for closed, unclosed in _HERMES_CALL.findall(text):
            body = json.loads(closed or unclosed)
            if not isinstance(body, dict) or "arguments" not in body:
                raise ValueError("not a {name, arguments} object")
            calls.append(_call(body.get("name"), body["arguments"]))
    except ValueError:  # json.JSONDecodeError included: the reply is text
        return ParsedReply(text)
    before = text[: text.find("<tool_call>")]
    return ParsedReply(before or None, calls)


def _llama3_json(text: str) -> ParsedReply:
    rest = text.strip()
    if rest.startswith(_PYTHON_TAG):
        rest = rest[len(_PYTHON_TAG) :].lstrip()
    if not rest.startswith("{"):
        return ParsedReply(text)
    decoder = json.JSONDecoder()
    calls = []
    position = 0
    try:
        while position < len(rest):
            body, end = decoder.raw_decode(rest, position)
            if not isinstance(body, dict) or ("parameters" in body) == ("arguments" in body):
                raise ValueError("not a {name, parameters} object")
            arguments = body["parameters"] if "parameters" in body else body["arguments"]
            calls.append(_call(body.get("name"), arguments))
            position = _after_separator(rest, end)
    except ValueError:
        return ParsedReply(text)
    return ParsedReply(None, calls)


def _after_separator(text: str, end: int) -> int:
    """Where the next call starts after one ending at `end`: past whitespace and one
    ``;``. The end of the text is fine; anything else is not a call list."""
    position = end
    while position < len(text) and text[position].isspace():
        position += 1
    if position == len(text):
        return position
    if text[position] != ";":
        raise ValueError("text after a call")
    position += 1
    while position < len(text) and text[position].isspace():
        position += 1
    if position == len(text):
        raise ValueError("a separator with no call after it")
    return position
