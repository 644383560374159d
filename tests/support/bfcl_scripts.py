"""Scripted BFCL players for the OpenAI-compatible stub server.

Each script is stateless: it finds the task from the first user message and the
position in the episode from the messages, then answers like a model would. They run
inside the stub server process, so state must be derivable from the request alone.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from typing import Any

OBSERVATION_NAME = "tool_results"


@functools.cache
def _tasks_by_first_turn() -> dict[str, list[Any]]:
    from distillery.workers.envs.registry import make_benchmark

    bench = make_benchmark("bfcl_multi_turn_base")
    by_first: dict[str, list[Any]] = {}
    for task in bench.load_tasks():
        by_first.setdefault(task.turns[0], []).append((task, bench.oracle_turns(task)))
    return by_first


def _position(messages: list[dict[str, Any]]) -> tuple[Any, list[list[str]], int, int]:
    """(task, ground truth, turn index, calls already made in this turn).

    Several tasks share a first user message (and its ground truth); the user turns
    seen so far tell them apart as soon as they differ.
    """
    users = [m for m in messages if m["role"] == "user" and m.get("name") != OBSERVATION_NAME]
    seen = [u["content"] for u in users]
    candidates = _tasks_by_first_turn()[seen[0]]
    task, truth = next(
        ((t, g) for t, g in candidates if list(t.turns[: len(seen)]) == seen), candidates[0]
    )
    turn = len(users) - 1
    last_user = max(i for i, m in enumerate(messages) if m in users)
    made = sum(1 for m in messages[last_user:] if m["role"] == "assistant")
    return task, truth, turn, made


def replay_text(request: dict[str, Any]) -> dict[str, Any]:
    """A perfect student in BFCL's prompt format: one ground-truth call per step."""
    _, truth, turn, made = _position(request["messages"])
    calls = truth[turn]
    if made < len(calls):
        return {"content": f"[{calls[made]}]"}
    return {"content": "I have completed the request."}


def replay_native(request: dict[str, Any]) -> dict[str, Any]:
    """A perfect student with native tool calls (positional args named from the docs)."""
    _, truth, turn, made = _position(request["messages"])
    calls = truth[turn]
    if made >= len(calls):
        return {"content": "Done."}
    params = {
        tool["function"]["name"]: list(tool["function"]["parameters"].get("properties", {}))
        for tool in request.get("tools", [])
    }
    node = ast.parse(calls[made], mode="eval").body
    name = node.func.id
    arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
    for index, arg in enumerate(node.args):
        arguments[params[name][index]] = ast.literal_eval(arg)
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


def first_turn_only_text(request: dict[str, Any]) -> dict[str, Any]:
    """Solves the first turn, then gives up: the checker must fail it."""
    _, truth, turn, made = _position(request["messages"])
    if turn == 0 and made < len(truth[0]):
        return {"content": f"[{truth[0][made]}]"}
    return {"content": "Sorry, I cannot help with that."}


def hostile_text(request: dict[str, Any]) -> dict[str, Any]:
    """Tries to escape the sandbox once per turn, then stops."""
    _, _, _, made = _position(request["messages"])
    if made == 0:
        return {"content": "[__import__('os').system('touch /tmp/distillery_pwned')]"}
    return {"content": "ok"}


def loop_forever_text(request: dict[str, Any]) -> dict[str, Any]:
    """Never stops calling (pwd, or a rejected call where there is no file system):
    the step limit must end the episode."""
    return {"content": "[pwd()]"}


def server_error(request: dict[str, Any]) -> dict[str, Any]:
    """An endpoint that is down for good (HTTP 503)."""
    return {"status": 503, "content": "overloaded"}


_CALL_LINE = re.compile(r"^([A-Za-z_]\w*)\((.*)\)$")
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")
_QUOTED = re.compile(r"'([^']+)'|\"([^\"]+)\"")


def _memory_calls(system_prompt: str) -> list[str]:
    """Masked calls listed in the injected Subtask block, in order."""
    if "[Subtask]" not in system_prompt:
        return []
    block = system_prompt.split("[Subtask]", 1)[1]
    calls = []
    for line in block.splitlines():
        line = line.strip()
        if _CALL_LINE.match(line):
            calls.append(line)
    return calls


def _fill(call: str, values: list[str]) -> str:
    """Placeholders take the user's quoted values in order (the last one repeats)."""
    queue = list(values)

    def take(_: re.Match) -> str:
        value = queue.pop(0) if len(queue) > 1 else (queue[0] if queue else "x")
        return repr(value)

    return _PLACEHOLDER.sub(take, call)


def memory_follower_text(request: dict[str, Any]) -> dict[str, Any]:
    """A student that can only copy: it replays the calls of the Subtask memory injected
    into its system prompt, filling placeholders with the quoted values of the current
    user turn. Without memory it makes no call at all."""
    messages = request["messages"]
    if messages[0]["content"].startswith("Break the given task"):
        # The AMD decomposition request: one subtask, the instruction itself.
        instruction = messages[0]["content"].rsplit("Task:", 1)[1].strip()
        return {"content": json.dumps([instruction])}
    _, _, turn, made = _position(messages)
    users = [m for m in messages if m["role"] == "user" and m.get("name") != OBSERVATION_NAME]
    values = [a or b for a, b in _QUOTED.findall(users[-1]["content"])]
    calls = [_fill(c, values) for c in _memory_calls(messages[0]["content"])]
    if made < len(calls):
        return {"content": f"[{calls[made]}]"}
    return {"content": "Done."}
