"""Hostile replies for the stub server: odd but possible things a server can send.

One script, `hostile`, serves every mode; the mode is the request's model name, so one
server can play them all (a client per mode):

    with run_stub_server("tests.support.hostile:hostile") as url:
        ChatClient(url, model="ids_missing")          # every reply
        ChatClient(url, model="content_surrogate@2")  # only the 3rd reply of an episode

A reply is the one a perfect BFCL player would give (`replay_native` when the request
has tools, `replay_text` otherwise), bent by the mode: so an episode shows whether the
client repaired the reply (the episode still succeeds) or refused it (scored as the
model's failure), and never crashes. `MODES` lists them with what a client must do:
"repair" (usable, possibly with notes), "invalid" (`InvalidReply`), "infra"
(`InfraError`: not a chat completion at all).

Add a mode by adding a function to `MODES`; tests parametrize over `MODES`.
"""

from __future__ import annotations

import functools
import gzip
import json
import uuid
from collections.abc import Callable
from typing import Any

from distillery.testing.bfcl_scripts import replay_native, replay_text

Reply = dict[str, Any]
_MISSING = object()


@functools.cache
def _gzip_bomb() -> bytes:
    """~20 KB on the wire, 20 MB inflated (ten times the default cap)."""
    return gzip.compress(b'{"choices": [{"message": {"content": "' + b" " * 20_000_000, 1)


def _base(request: dict[str, Any]) -> Reply:
    return replay_native(request) if request.get("tools") else replay_text(request)


def _calls(base: Reply, ids: Callable[[int], Any] | None = None, args=None) -> list[Any]:
    calls = []
    for index, call in enumerate(base.get("tool_calls") or []):
        arguments = json.dumps(call["arguments"]) if args is None else args(call["arguments"])
        raw: dict[str, Any] = {
            "type": "function",
            "function": {"name": call["name"], "arguments": arguments},
        }
        call_id = f"call_{uuid.uuid4().hex[:12]}" if ids is None else ids(index)
        if call_id is not _MISSING:
            raw["id"] = call_id
        calls.append(raw)
    return calls


def _message(base: Reply, content: Any = _MISSING, **calls: Any) -> Reply:
    message: dict[str, Any] = {"role": "assistant"}
    message["content"] = base.get("content") if content is _MISSING else content
    if base.get("tool_calls"):
        message["tool_calls"] = _calls(base, **calls)
    return {"message": message}


def _text(base: Reply) -> str:
    return base.get("content") or ""


def _bend_strings(arguments: dict[str, Any], suffix: str) -> dict[str, Any]:
    return {k: v + suffix if isinstance(v, str) else v for k, v in arguments.items()}


def _with_bogus_call(base: Reply) -> Reply:
    if not base.get("tool_calls"):
        return base
    return {**base, "tool_calls": [*base["tool_calls"], {"name": "no_such_tool", "arguments": {}}]}


def _nested(levels: int, leaf: Any = "x") -> Any:
    for _ in range(levels):
        leaf = [leaf]
    return leaf


def _with_args(base: Reply, args: Callable[[dict[str, Any]], Any]) -> Reply:
    """`base` with each call's arguments bent by `args`; a reply without calls (BFCL's
    prompt format) gets one call so bent, so the mode is hostile in every format."""
    if not base.get("tool_calls"):
        base = {**base, "tool_calls": [{"name": "cd", "arguments": {"folder": "x"}}]}
    return _message(base, args=args)


def _completion_body(message_json: str) -> bytes:
    return (
        b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, "message": '
        + message_json.encode()
        + b', "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}}'
    )


def _with_usage(usage: Any) -> Callable[[Reply], Reply]:
    return lambda base: {**_message(base), "usage": usage}


MODES: dict[str, tuple[str, Callable[[Reply], Reply]]] = {
    # content shapes
    "content_parts": (
        "repair",
        lambda b: _message(b, [{"type": "text", "text": _text(b)}, {"type": "image_url"}]),
    ),
    "content_number": ("invalid", lambda b: _message(b, 42)),
    "content_object": ("invalid", lambda b: _message(b, {"text": _text(b)})),
    "content_surrogate": ("repair", lambda b: _message(b, _text(b) + "\ud800")),
    "content_nul": ("repair", lambda b: _message(b, _text(b) + "\x00")),
    "content_huge": ("repair", lambda b: _message(b, _text(b) + " " + "la " * 100_000)),
    "message_list": ("invalid", lambda b: {"message": [_text(b)]}),
    # tool calls
    "tool_calls_object": (
        "invalid",
        lambda b: {"message": {"role": "assistant", "content": None, "tool_calls": {"a": 1}}},
    ),
    "ids_missing": ("repair", lambda b: _message(b, ids=lambda i: _MISSING)),
    "ids_empty": ("repair", lambda b: _message(b, ids=lambda i: "")),
    "ids_int": ("repair", lambda b: _message(b, ids=lambda i: i + 7)),
    "ids_object": ("repair", lambda b: _message(b, ids=lambda i: {"id": i})),
    "ids_list": ("repair", lambda b: _message(b, ids=lambda i: [i])),
    # every call of a reply under one id: the real call, then one the environment rejects
    "ids_duplicate": (
        "repair",
        lambda b: _message(_with_bogus_call(b), ids=lambda i: "call_0"),
    ),
    # thousands of calls in one reply: all refused, and not all kept in the history
    "tool_calls_many": (
        "repair",
        lambda b: _message({**b, "tool_calls": [{"name": "pwd", "arguments": {}}] * 2000}),
    ),
    "arguments_object": ("repair", lambda b: _message(b, args=lambda a: a)),
    # a lone surrogate in the arguments string itself
    "arguments_surrogate": (
        "repair",
        lambda b: _message(
            b, args=lambda a: json.dumps(_bend_strings(a, "\udc80"), ensure_ascii=False)
        ),
    ),
    # the escape is inside the arguments' own JSON text: it decodes only when they are read
    "arguments_escaped_surrogate": (
        "repair",
        lambda b: _message(b, args=lambda a: json.dumps(_bend_strings(a, "\udc80"))),
    ),
    "arguments_escaped_nul": (
        "repair",
        lambda b: _message(b, args=lambda a: json.dumps(_bend_strings(a, "\x00"))),
    ),
    # arguments nested 700 levels (~1.5 KB of reply): refused, never a RecursionError
    "arguments_deep": ("invalid", lambda b: _with_args(b, lambda a: {**a, "x": _nested(700)})),
    "arguments_deep_text": (
        "invalid",
        lambda b: _with_args(b, lambda a: json.dumps({**a, "x": _nested(700)})),
    ),
    # ... with an escaped lone surrogate in the text, which the client has to read
    "arguments_deep_escaped_surrogate": (
        "invalid",
        lambda b: _with_args(b, lambda a: json.dumps({**a, "x": _nested(700, "\ud800")})),
    ),
    # too deep for the JSON parser itself, in the body's own JSON
    "body_deep": (
        "invalid",
        lambda b: {
            "body": _completion_body(
                '{"role": "assistant", "content": ' + "[" * 100_000 + "]" * 100_000 + "}"
            )
        },
    ),
    # usage and finish reason
    "usage_strings": ("repair", _with_usage({"prompt_tokens": "12", "completion_tokens": "x"})),
    "usage_list": ("repair", _with_usage([1, 2])),
    "usage_negative": ("repair", _with_usage({"prompt_tokens": -5, "completion_tokens": -1})),
    "usage_huge": ("repair", _with_usage({"prompt_tokens": 10**20, "completion_tokens": 10**20})),
    "usage_float": ("repair", _with_usage({"prompt_tokens": 1e300, "completion_tokens": 0.5})),
    "finish_reason_number": ("repair", lambda b: {**_message(b), "finish_reason": 7}),
    # bodies
    "body_not_json": ("infra", lambda b: {"body": "<html>502 Bad Gateway</html>"}),
    "body_invalid_utf8": (
        "repair",
        lambda b: {
            "body": _completion_body(
                json.dumps(_message(b)["message"])[:-1] + ', "x": "\xff"}'
            ).replace("\xff".encode(), b"\xff")
        },
    ),
    "body_huge": (
        "invalid",
        lambda b: {"body": _completion_body(json.dumps({"content": "x" * 8_000_000}))},
    ),
    # compressed although the client asked for identity: inflated under the cap
    "body_gzip": (
        "repair",
        lambda b: {
            "body": gzip.compress(_completion_body(json.dumps(_message(b)["message"]))),
            "headers": {"Content-Encoding": "gzip"},
        },
    ),
    "body_gzip_bomb": (
        "invalid",
        lambda b: {"body": _gzip_bomb(), "headers": {"Content-Encoding": "gzip"}},
    ),
    "body_endless": ("invalid", lambda b: {"stream": {"chunk": " " * 65536}}),
    "body_trickle": ("infra", lambda b: {"stream": {"chunk": " ", "interval_s": 0.05}}),
}


def hostile(request: dict[str, Any]) -> Reply:
    """The reply of mode `request["model"]` ("MODE" or "MODE@STEP": hostile only at the
    model's STEP-th reply of the episode, counted from 0; a perfect player otherwise).
    The preflight request every agent stage sends first gets the mode too (bent from
    the "OK" any model answers it with)."""
    mode, _, at = str(request.get("model", "")).partition("@")
    try:
        base = _base(request)
    except Exception:  # the preflight request is no task: a model would answer "OK"
        base = {"content": "OK"}
    if at and sum(1 for m in request["messages"] if m["role"] == "assistant") != int(at):
        return base
    _, bend = MODES[mode]
    return bend(base)
