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


def is_observation(message: dict[str, Any]) -> bool:
    """A prompt-format tool-results message: on the wire, BFCL's format (a user message
    holding the repr of a list of tool messages); in a transcript, also marked."""
    if message.get("name") == OBSERVATION_NAME:
        return True
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, str)
        and content.startswith("[{'role': 'tool'")
    )


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
    users = [m for m in messages if m["role"] == "user" and not is_observation(m)]
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
# A quote opens and closes at a word boundary: "It'd ... Corp's" quotes nothing.
QUOTED = re.compile(r"(?<!\w)'([^']+)'(?!\w)|(?<!\w)\"([^\"]+)\"(?!\w)")


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
    users = [m for m in messages if m["role"] == "user" and not is_observation(m)]
    values = [a or b for a, b in QUOTED.findall(users[-1]["content"])]
    calls = [_fill(c, values) for c in _memory_calls(messages[0]["content"])]
    if made < len(calls):
        return {"content": f"[{calls[made]}]"}
    return {"content": "Done."}


# --- a student that only knows what its memory tells it -------------------------------

_SLOT = re.compile(r"__slot_(\d+)__")
_UPPER_CODE = re.compile(r"(?<![\w'])[A-Z][A-Z0-9]{1,9}(?![\w'])")
_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_INTEGER = re.compile(r"(?<![\w.])-?\d+(?![\w.])")
_FUNCTIONS_INTRO = "Here is a list of functions in json format that you can invoke."
NO_MEMORY_REPLY = "I do not know which functions would solve this request."


def _prompt_docs(system_prompt: str) -> dict[str, dict[str, Any]]:
    """The function docs the prompt format lists after its intro line, by name."""
    if _FUNCTIONS_INTRO not in system_prompt:
        return {}
    text = system_prompt.split(_FUNCTIONS_INTRO, 1)[1].lstrip()
    try:
        docs, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError:
        return {}
    return {d["name"]: d for d in docs if isinstance(d, dict) and "name" in d}


def _observed(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The JSON objects the environment returned in this episode, oldest first.

    A tool result may carry an appended memory hint after its JSON: only the JSON
    prefix is read."""
    found = []
    for message in messages:
        if not is_observation(message):
            continue
        try:
            results = ast.literal_eval(message["content"])
        except (ValueError, SyntaxError):
            continue
        for item in results if isinstance(results, list) else []:
            try:
                text = str(item.get("content", "")).lstrip()
                value, _ = json.JSONDecoder().raw_decode(text)
            except (json.JSONDecodeError, AttributeError):
                continue
            if isinstance(value, dict) and "error" not in value:
                found.append(value)
    return found


def _user_values(text: str, kind: str) -> list[Any]:
    """Values of one JSON-schema type mentioned in a user message, in order: quoted
    phrases then upper-case codes (tickers, IDs) for strings, numerals for numbers."""
    quoted = [a or b for a, b in QUOTED.findall(text)]
    bare = QUOTED.sub(" ", text)
    if kind == "string":
        return quoted + _UPPER_CODE.findall(bare)
    if kind == "integer":
        return [int(v) for v in _INTEGER.findall(bare)]
    if kind in ("float", "number"):
        return [float(v) if "." in v else int(v) for v in _NUMBER.findall(bare)]
    return []


def _typed(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind in ("float", "number"):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def fill_memory_call(
    masked: str,
    docs: dict[str, dict[str, Any]],
    observed: list[dict[str, Any]],
    user_texts: list[str],
) -> str | None:
    """A masked memory call with every placeholder given a concrete value, or None
    when some placeholder finds none (the student does not guess).

    A placeholder at parameter `p` takes, in order: the latest value the environment
    returned under the key `p` in this episode; else the next unused value of p's type
    in `user_texts` (in order). Placeholders inside containers are never filled (the
    call is skipped)."""
    slots: list[str] = []

    def slot(match: re.Match) -> str:
        slots.append(match.group(0))
        return f"__slot_{len(slots) - 1}__"

    try:
        node = ast.parse(_PLACEHOLDER.sub(slot, masked), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        return None
    props = docs.get(node.func.id, {}).get("parameters", {}).get("properties", {})
    order = list(props)
    used: set[tuple[int, str, int]] = set()  # (user turn, type, position) taken

    def value_for(param: str) -> tuple[bool, Any]:
        kind = props.get(param, {}).get("type", "string")
        for result in reversed(observed):
            if param in result and _typed(result[param], kind):
                return True, result[param]
        for t, text in enumerate(user_texts):
            for i, value in enumerate(_user_values(text, kind)):
                if (t, kind, i) not in used:
                    used.add((t, kind, i))
                    return True, value
        return False, None

    def resolve(value: ast.expr, param: str | None) -> ast.expr | None:
        if isinstance(value, ast.Name) and _SLOT.fullmatch(value.id):
            found, concrete = value_for(param) if param else (False, None)
            return ast.Constant(concrete) if found else None
        if _SLOT.search(ast.unparse(value)):
            return None  # a placeholder inside a container
        return value

    args = []
    for index, arg in enumerate(node.args):
        resolved = resolve(arg, order[index] if index < len(order) else None)
        if resolved is None:
            return None
        args.append(resolved)
    keywords = []
    for kw in node.keywords:
        resolved = resolve(kw.value, kw.arg)
        if resolved is None:
            return None
        keywords.append(ast.keyword(arg=kw.arg, value=resolved))
    return ast.unparse(ast.Call(func=node.func, args=args, keywords=keywords))


def memory_procedure_text(request: dict[str, Any]) -> dict[str, Any]:
    """A student that knows no procedure of its own: without memory it calls nothing.

    With memory it replays, in order, the calls of the Subtask memory injected into its
    system prompt (the procedure a similar task needed), filling each placeholder from
    what THIS episode offers (`fill_memory_call`: the environment's earlier results, the
    user's own words); kept literals (enums, flags) are copied as memory has them. A
    call it cannot fill is skipped. It reads nothing else: not the task, not the ground
    truth.
    """
    messages = request["messages"]
    system = messages[0]["content"]
    if system.startswith("Break the given task"):
        instruction = system.rsplit("Task:", 1)[1].strip()
        return {"content": json.dumps([instruction])}
    memory = _memory_calls(system)
    if not memory:
        return {"content": NO_MEMORY_REPLY}
    users = [i for i, m in enumerate(messages) if m["role"] == "user" and not is_observation(m)]
    texts = [messages[users[-1]]["content"]]  # the current request only
    issued = [m["content"].strip("[] ") for m in messages[users[-1] :] if m["role"] == "assistant"]
    position = 0  # memory calls already played or passed over in this turn
    for call in issued:
        name = call.split("(", 1)[0]
        position = next(
            (i + 1 for i in range(position, len(memory)) if memory[i].startswith(name + "(")),
            len(memory),
        )
    docs = _prompt_docs(system)
    observed = _observed(messages)
    for masked in memory[position:]:
        call = fill_memory_call(masked, docs, observed, texts)
        if call is not None:
            return {"content": f"[{call}]"}
    return {"content": "Done."}
