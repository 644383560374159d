"""The `isolated_counter` world: one integer counter behind the process boundary.

The reference world module (see `server.py` for the contract) and the fixture of the
boundary's tests and benchmark: stdlib only, so its venv needs no packages. It plays
like the toy plugin's counter: after each user turn the counter must hold the value
the ground truth leaves it at.

Its arithmetic has limits (`MAX_DIGITS`): a call whose result would pass them fails
inside the world (`CallFailed`, protocol 2): an observation for the model, whose task
then fails on its state, never an infrastructure error. Before, a legal chain of
products past Python's int-to-text limit made the world's own `json.dumps` raise, and
the episode was retried and then left unscored on every resume.
"""

from __future__ import annotations

import json
import platform

PROMPT = (
    "You operate a counter through functions. To call functions, reply with a Python "
    "list of calls and nothing else, e.g. [add(amount=1)]. Reply without calls when the "
    "request is done.\nFunctions:\n{functions}"
)
NATIVE = "You operate a counter through the provided tools."
PARAMS = {"add": ("amount",), "subtract": ("amount",), "multiply": ("factor",), "reset": ()}
PARAMS["get_value"] = ()
# (start, turns, ground truth per turn)
SPECS = (
    (0, ("Add 5 to the counter.",), (("add(amount=5)",),)),
    (10, ("Double the counter.", "Then subtract 3."), (("multiply(factor=2)",), ("subtract(amount=3)",))),
    (7, ("Reset the counter, then add 2.",), (("reset()", "add(amount=2)"),)),
    (1, ("Add 4, then triple it.", "What is the value now?"), (("add(amount=4)", "multiply(factor=3)"), ("get_value()",))),
)  # fmt: skip


# The counter's range: a value of more digits is refused (the call fails in the world).
MAX_DIGITS = 100


class CallFailed(Exception):
    """A call failed inside the world because of what it asked (see server.py);
    `results` are those of the step's calls that ran before it."""

    def __init__(self, message: str, results: list) -> None:
        super().__init__(message)
        self.results = results


def _doc(name: str) -> dict:
    props = {p: {"type": "integer", "description": p} for p in PARAMS[name]}
    params = {"type": "dict", "properties": props, "required": list(PARAMS[name])}
    return {"name": name, "description": f"The counter's {name}.", "parameters": params}


DOCS = [_doc(name) for name in PARAMS]


def versions() -> dict:
    return {"python": platform.python_version()}


def list_tasks(options: dict) -> list[dict]:
    offset = int(options.get("offset", 0))
    tools = [
        {"type": "function", "function": {**d, "parameters": {**d["parameters"], "type": "object"}}}
        for d in DOCS
    ]
    out = []
    for index, (start, turns, truth) in enumerate(SPECS):
        out.append(
            {
                "task_id": f"counter_{index}",
                "turns": list(turns),
                "tools": tools,
                "function_docs": DOCS,
                "group_id": "counter",
                "metadata": {"start": start + offset},
                "system_prompts": {"prompt": PROMPT.format(functions=json.dumps(DOCS)), "native": NATIVE},
                "oracle": [list(turn) for turn in truth],
            }
        )  # fmt: skip
    return out


def _apply(value: int, name: str, kwargs: dict) -> int:
    if name == "add":
        return value + kwargs["amount"]
    if name == "subtract":
        return value - kwargs["amount"]
    if name == "multiply":
        return value * kwargs["factor"]
    if name == "reset":
        return 0
    return value


def _expected(start: int, truth: tuple) -> list[int]:
    import ast

    value, after = start, []
    for turn in truth:
        for source in turn:
            node = ast.parse(source, mode="eval").body
            kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
            value = _apply(value, node.func.id, kwargs)
        after.append(value)
    return after


class World:
    """One episode's counter."""

    def __init__(self, options: dict, task_id: str) -> None:
        index = int(task_id.rsplit("_", 1)[1])
        self.start, _, self.truth = SPECS[index]
        self.start += int(options.get("offset", 0))
        self.value = self.start
        self.after_turns: list[int] = []

    def step(self, calls: list[dict]) -> list[dict]:
        results = []
        for call in calls:
            name = call["name"]
            params = PARAMS.get(name, ())
            kwargs = dict(zip(params, call["args"], strict=False), **call["kwargs"])
            bad = [k for k, v in kwargs.items() if k not in params or type(v) is not int]
            missing = [p for p in params if p not in kwargs] or ([] if name in PARAMS else [name])
            if bad or missing:
                error = f"{name}(): bad arguments {bad or missing}"
                results.append({"content": json.dumps({"error": error}), "error": error})
                continue
            try:
                value = _apply(self.value, name, kwargs)
                if abs(value) >= 10**MAX_DIGITS:
                    raise OverflowError(f"the counter holds at most {MAX_DIGITS} digits")
                content = json.dumps({"value": value})
            except (ArithmeticError, ValueError) as exc:  # what the model's numbers caused
                raise CallFailed(f"{name}(): {exc}", results) from exc
            self.value = value
            results.append({"content": content, "error": None})
        return results

    def end_turn(self) -> None:
        self.after_turns.append(self.value)

    def evaluate(self) -> dict:
        expected = _expected(self.start, self.truth)
        if len(self.after_turns) < len(expected):
            done = f"{len(self.after_turns)} of {len(expected)} turns were completed"
            return {
                "success": False,
                "error_type": "counter:force_terminated",
                "error_message": done,
            }
        for turn, (got, want) in enumerate(zip(self.after_turns, expected, strict=False)):
            if got != want:
                message = f"turn {turn}: {got}, expected {want}"
                return {
                    "success": False,
                    "error_type": "counter:state_mismatch",
                    "error_message": message,
                }
        return {"success": True, "error_type": None, "error_message": None}

    def close(self) -> None:
        self.value = 0
