"""Scripted BFCL students that read only the request, as a server would see it.

A student is a plan: for each turn, the replies it gives step by step (then a closing
text). The task and the position in it are found from the request alone (the user
turns so far; the assistant messages since the last one), so the same student plays
identically through bfcl-eval's own loop and through distillery's, in either format.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Callable
from typing import Any

from distillery.workers.envs.bfcl import BfclMultiTurnBase

DONE = "I have completed the request."
# A function no BFCL class has: BFCL's executor answers it with a NameError.
PAD_CALL = "wait_for_user()"

# A reply: ("call", src) | ("calls", [src, ...]) | ("invalid", src)
#          | ("positional", src) | ("text", text) | ("loop", src): `src` repeated forever
#          | ("message", (native_message, prompt_message)): written whole (see `_message`).
Reply = tuple[str, Any]
Plan = Callable[[list[list[str]], list[list[str]]], list[list[Reply]]]


@functools.cache
def _tasks() -> dict[tuple[str, ...], tuple[list[list[str]], list[list[str]]]]:
    """User turns -> (ground truth with named arguments, ground truth as written)."""
    from distillery.workers.envs.bfcl_tasks import load_data

    bench = BfclMultiTurnBase()
    entries, answers, _ = load_data()
    out = {}
    for task in bench.load_tasks():
        out[task.turns] = (bench.oracle_turns(task), answers[task.task_id])
    return out


def _is_observation(message: dict[str, Any]) -> bool:
    # BFCL returns prompt-format results as a user message holding a list's repr.
    content = message.get("content")
    return isinstance(content, str) and content.startswith("[{'role': 'tool'")


def _position(request: dict[str, Any]) -> tuple[tuple[str, ...], int, int]:
    messages = request["messages"]
    users = [i for i, m in enumerate(messages) if m["role"] == "user" and not _is_observation(m)]
    turns = tuple(messages[i]["content"] for i in users)
    made = sum(1 for m in messages[users[-1] :] if m["role"] == "assistant")
    return turns, len(users) - 1, made


def _task_of(turns: tuple[str, ...]) -> tuple[list[list[str]], list[list[str]]]:
    for full, truth in _tasks().items():
        if full[: len(turns)] == turns:
            return truth
    raise LookupError(f"no task starts with {turns[0][:60]!r}")


def _arguments(source: str) -> tuple[str, dict[str, Any]]:
    node = ast.parse(source, mode="eval").body
    return node.func.id, {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}


def _render(reply: Reply, native: bool, request: dict[str, Any]) -> dict[str, Any]:
    kind, value = reply
    if kind == "message":
        build = value[0] if native else value[1]
        return {"message": build(len(request["messages"]))}
    if kind == "text":
        return {"content": value}
    if kind in ("call", "loop", "calls"):
        sources = value if kind == "calls" else [value]
        if not native:
            return {"content": "[" + ", ".join(sources) + "]"}
        calls = []
        for source in sources:
            name, arguments = _arguments(source)
            calls.append({"name": name, "arguments": arguments})
        return {"tool_calls": calls}
    if kind == "invalid":
        name, arguments = _arguments(value)
        if not native:
            return {"content": f"[{value[:-1]}"}  # a call missing its parenthesis
        return {"tool_calls": [{"name": name, "arguments": json.dumps(arguments)[:-1]}]}
    if kind == "positional":
        node = ast.parse(value, mode="eval").body
        if not native:
            return {"content": f"[{value}]"}
        # A native call can only be positional as a JSON array of values.
        values = [ast.literal_eval(a) for a in node.args]
        named = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
        arguments = json.dumps(values) if values else json.dumps(named)
        return {"tool_calls": [{"name": node.func.id, "arguments": arguments}]}
    raise ValueError(kind)


def student(plan: Plan, native: bool) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def play(request: dict[str, Any]) -> dict[str, Any]:
        turns, turn, made = _position(request)
        named, written = _task_of(turns)
        replies = plan(named, written)[turn]
        if made < len(replies):
            return _render(replies[made], native, request)
        if replies and replies[-1][0] == "loop":
            return _render(replies[-1], native, request)
        return {"content": DONE}

    return play


# ------------------------------------------------------------------------ the plans


def correct(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    return [[("call", c) for c in turn] for turn in named]


def batched(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    """A whole turn in one response (several calls in one step)."""
    return [[("calls", turn)] if turn else [] for turn in named]


def _corrupt(source: str) -> str:
    name, arguments = _arguments(source)
    for key, value in arguments.items():
        if isinstance(value, str):
            arguments[key] = value + "_x"
            break
        if isinstance(value, int) and not isinstance(value, bool):
            arguments[key] = value + 1
            break
    rendered = ", ".join(f"{k}={v!r}" for k, v in arguments.items())
    return f"{name}({rendered})"


def corrupted_argument(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    plan = correct(named, written)
    turn = next(i for i, t in enumerate(named) if t)
    plan[turn][0] = ("call", _corrupt(named[turn][0]))
    return plan


def skipped_call(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    plan = correct(named, written)
    turn = max(i for i, t in enumerate(named) if t)
    del plan[turn][-1]
    return plan


def looping_in_last_turn(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    """Solves every turn, then never stops repeating the last turn's last call."""
    plan = correct(named, written)
    last = named[-1]
    plan[-1].append(("loop", last[-1] if last else PAD_CALL))
    return plan


def looping_in_first_turn(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    plan = correct(named, written)
    plan[0].append(("loop", PAD_CALL))
    return plan


def twenty_steps_then_text(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    """Turn 1 takes exactly 20 steps (its calls, then calls that fail), then stops."""
    plan = correct(named, written)
    plan[0] += [("call", PAD_CALL)] * (20 - len(plan[0]))
    return plan


def twenty_one_steps_then_text(
    named: list[list[str]], written: list[list[str]]
) -> list[list[Reply]]:
    plan = correct(named, written)
    plan[0] += [("call", PAD_CALL)] * (21 - len(plan[0]))
    return plan


def invalid_arguments(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    """The first turn's second step has invalid arguments (bad JSON / bad syntax)."""
    plan = correct(named, written)
    turn = next(i for i, t in enumerate(named) if t)
    plan[turn].insert(1, ("invalid", named[turn][0]))
    return plan


def invalid_arguments_last(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    """Invalid arguments instead of the closing text of each turn."""
    plan = correct(named, written)
    for turn, calls in zip(plan, named, strict=True):
        if calls:
            turn.append(("invalid", calls[0]))
    return plan


def positional_calls(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
    """The ground truth as written: some calls pass arguments by position."""
    return [[("positional", c) for c in turn] for turn in written]


PLANS: dict[str, Plan] = {
    "correct": correct,
    "batched": batched,
    "corrupted_argument": corrupted_argument,
    "skipped_call": skipped_call,
    "looping_in_last_turn": looping_in_last_turn,
    "looping_in_first_turn": looping_in_first_turn,
    "twenty_steps_then_text": twenty_steps_then_text,
    "twenty_one_steps_then_text": twenty_one_steps_then_text,
    "invalid_arguments": invalid_arguments,
    "invalid_arguments_last": invalid_arguments_last,
    "positional_calls": positional_calls,
}


# ------------------------------------------------------------------------ the probes
#
# Replies that exercise what distillery once repaired or limited on its own. Each is
# inserted before the first call of the first turn that has calls, then the student
# solves the task; the messages are shaped as vLLM sends them (null fields included).


def _message(
    content: str | None,
    calls: list[dict[str, Any]] = (),  # type: ignore[assignment]
    **fields: Any,
) -> Callable[[int], dict[str, Any]]:
    """A message builder: tool calls get ids that depend only on the conversation
    (`call_{messages}_{index}`) unless a call brings its own (or none: key "id" absent)."""

    def build(position: int) -> dict[str, Any]:
        tool_calls = []
        for index, call in enumerate(calls):
            call = dict(call)
            if call.get("id", "") == "":
                call["id"] = f"call_{position}_{index}"
            elif call["id"] is _ABSENT:
                del call["id"]
            tool_calls.append(call)
        message = {
            "role": "assistant",
            "content": content,
            "refusal": None,
            "annotations": None,
            "audio": None,
            "function_call": None,
            "tool_calls": tool_calls,
            "reasoning_content": None,
        }
        message.update(fields)
        return message

    return build


_ABSENT = object()


def _tool_call(source: str, arguments: Any = _ABSENT, call_id: Any = "") -> dict[str, Any]:
    name, named = _arguments(source)
    if arguments is _ABSENT:
        arguments = json.dumps(named)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _as_text(sources: list[str]) -> str:
    return "[" + ", ".join(sources) + "]"


def _with_note(source: str, chars: int) -> str:
    """`source` with one more (unexpected) argument of `chars` characters."""
    head = source[:-1]
    return f"{head}{'' if head.endswith('(') else ', '}note={'x' * chars!r})"


def _arithmetic(source: str) -> str:
    """`source` with its first number or string argument written as arithmetic."""
    node = ast.parse(source, mode="eval").body
    parts = []
    changed = False
    for kw in node.keywords:
        value = ast.literal_eval(kw.value)
        text = repr(value)
        if not changed and type(value) is int:
            text, changed = f"{value - 1} + 1", True
        elif not changed and type(value) is str and len(value) > 1:
            half = len(value) // 2
            text, changed = f"{value[:half]!r} + {value[half:]!r}", True
        parts.append(f"{kw.arg}={text}")
    return f"{node.func.id}({', '.join(parts)})"


def _probe_reply(kind: str, turn: list[str]) -> list[Reply]:
    first = turn[0]
    if kind == "empty_arguments":
        return [("message", (_message(None, [_tool_call(first, "")]), _message(_as_text([first]))))]
    if kind == "null_arguments":
        native = _message(None, [_tool_call(first, None)])
        return [("message", (native, _message(_as_text([first]))))]
    if kind == "thirty_three_calls":
        return [("calls", turn + [PAD_CALL] * (33 - len(turn)))]
    if kind == "long_argument":
        return [("call", _with_note(first, 9_000))]
    if kind == "arithmetic":
        text = _as_text([_arithmetic(first)])
        return [("message", (_message(None, [_tool_call(first)]), _message(text)))]
    if kind == "undefined_name":
        name = ast.parse(first, mode="eval").body.func.id
        text = f"[{name}(value=count + 1)]"
        return [("message", (_message(None, [_tool_call(first)]), _message(text)))]
    if kind == "think_block":
        think = "<think>\nThe user wants this done; one call does it.\n</think>\n\n"
        native = _message(think, [_tool_call(first)])
        return [("message", (native, _message(think + _as_text([first]))))]
    if kind == "reasoning_content":
        reasoning = "The user wants this done; one call does it."
        native = _message(None, [_tool_call(first)], reasoning_content=reasoning)
        return [("message", (native, _message(_as_text([first]), reasoning_content=reasoning)))]
    if kind == "duplicate_ids":
        calls = [_tool_call(first, call_id="call_dup"), _tool_call(PAD_CALL, call_id="call_dup")]
        return [("message", (_message(None, calls), _message(_as_text([first, PAD_CALL]))))]
    if kind == "missing_ids":
        native = _message(None, [_tool_call(first, call_id=_ABSENT)])
        return [("message", (native, _message(_as_text([first]))))]
    if kind == "object_arguments":
        _, named = _arguments(first)
        native = _message(None, [_tool_call(first, named)])
        return [("message", (native, _message(_as_text([first]))))]
    raise ValueError(kind)


PROBE_KINDS = (
    "empty_arguments",
    "null_arguments",
    "thirty_three_calls",
    "long_argument",
    "arithmetic",
    "undefined_name",
    "think_block",
    "reasoning_content",
    "duplicate_ids",
    "missing_ids",
    "object_arguments",
)


def probe(kind: str) -> Plan:
    """The correct plan with the `kind` reply first in the first turn that has calls."""

    def plan(named: list[list[str]], written: list[list[str]]) -> list[list[Reply]]:
        replies = correct(named, written)
        turn = next(i for i, t in enumerate(named) if t)
        replies[turn][:0] = _probe_reply(kind, named[turn])
        return replies

    plan.__name__ = kind
    return plan


def always_failing(request: dict[str, Any]) -> dict[str, Any]:
    """A server that answers every attempt with HTTP 500."""
    return {"http_status": 500}
