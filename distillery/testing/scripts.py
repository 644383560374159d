"""Generic scripts for the stub server (see scripted_server.py); BFCL players live in
bfcl_scripts.py. A script maps the request JSON to a reply dict."""

from __future__ import annotations

from collections import Counter
from typing import Any

_seen: Counter[str] = Counter()


def always_text(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": "Hello from the stub."}


def fixed_tool_call(request: dict[str, Any]) -> dict[str, Any]:
    return {"tool_calls": [{"name": "ls", "arguments": {"a": True}}]}


def fail_twice_then_text(request: dict[str, Any]) -> dict[str, Any]:
    """HTTP 500 for the first two requests with the same last message, then an answer."""
    key = str(request["messages"][-1].get("content"))
    _seen[key] += 1
    if _seen[key] <= 2:
        return {"status": 500, "content": "transient failure"}
    return {"content": f"ok after {_seen[key]} attempts"}


def bad_request(request: dict[str, Any]) -> dict[str, Any]:
    return {"status": 400, "content": "context length exceeded"}


def slow_text(request: dict[str, Any]) -> dict[str, Any]:
    import time

    time.sleep(2.0)  # blocks this server process: for client timeout tests
    return {"content": "late"}


def agent_or_builder(request: dict[str, Any]) -> dict[str, Any]:
    """One server for every role of a sweep: a perfect BFCL agent when the request
    carries tools, otherwise (memory builder prompts) a plain answer the builders
    reject and replace by their deterministic fallback."""
    if request.get("tools"):
        from distillery.testing.bfcl_scripts import replay_native

        return replay_native(request)
    return always_text(request)
