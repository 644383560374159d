"""A world that reports what its process can see: its environment, its home, its
network interfaces and whether it reaches a port of the host (stdlib only)."""

from __future__ import annotations

import json
import os
import socket


def versions() -> dict:
    return {}


def list_tasks(options: dict) -> list[dict]:
    doc = {"name": "probe", "description": "Report.", "parameters": {"type": "dict",
           "properties": {"port": {"type": "integer", "description": "a port"}},
           "required": ["port"]}}  # fmt: skip
    return [{"task_id": "probe_0", "turns": ["probe"], "tools": [], "function_docs": [doc],
             "system_prompts": {"prompt": "", "native": ""}, "oracle": [["probe(port=1)"]]}]  # fmt: skip


class World:
    def __init__(self, options: dict, task_id: str) -> None:
        pass

    def step(self, calls: list[dict]) -> list[dict]:
        port = int(calls[0]["kwargs"]["port"])
        try:
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
            reached = True
        except OSError:
            reached = False
        report = {
            "env": dict(os.environ),
            "home": os.path.expanduser("~"),
            "cwd": os.getcwd(),
            "interfaces": [name for _, name in socket.if_nameindex()],
            "reached": reached,
        }
        return [{"content": json.dumps(report), "error": None}]

    def end_turn(self) -> None:
        pass

    def evaluate(self) -> dict:
        return {"success": True, "error_type": None, "error_message": None}
