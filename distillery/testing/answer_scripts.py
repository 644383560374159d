"""A scripted student for the answer benchmarks (GSM8K, MATH, MBPP, HumanEval), for the
stub server (scripted_server.py): tests and bench/answers.py.

`replies_from_file` answers from a JSON file named by ``DISTILLERY_SCRIPTED_REPLIES``
(set before the server starts): ``{first user message: [reply, reply, ...]}``, the
n-th reply for the n-th request of that conversation (its n-th assistant message). A
reply is a string (the message's text) or a dict the stub server understands
(``{"tool_calls": [...]}``, ``{"status": 503}``...). An unknown conversation gets
"I do not know.".
"""

from __future__ import annotations

import json
import os
from functools import cache
from typing import Any

REPLIES_VARIABLE = "DISTILLERY_SCRIPTED_REPLIES"


@cache
def _replies(path: str) -> dict[str, list[Any]]:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def replies_from_file(request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages", [])
    users = [m for m in messages if m.get("role") == "user"]
    if not users:
        return {"content": "OK"}
    first = users[0].get("content")
    if not isinstance(first, str):
        return {"content": "OK"}
    script = _replies(os.environ[REPLIES_VARIABLE]).get(first)
    if script is None:
        return {"content": "OK" if len(messages) == 1 else "I do not know."}
    turn = sum(1 for m in messages if m.get("role") == "assistant")
    reply = script[min(turn, len(script) - 1)]
    return reply if isinstance(reply, dict) else {"content": reply}
