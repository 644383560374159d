"""A counter world that misbehaves on request (option `fault`), for the boundary's tests.

Run by the worker's interpreter like any world module (stdlib only, loaded by path):
it reuses the shipped counter world and, at its first step, crashes, hangs, raises or
writes a malformed frame, as `fault` says. ``crash_once:PATH`` crashes only while PATH
does not exist (it creates it first), so a retried episode succeeds.
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
import time
from pathlib import Path

_COUNTER = Path(__file__).resolve().parents[4] / "workers/envs/isolated/worlds/counter.py"
_spec = importlib.util.spec_from_file_location("counter_world_for_faults", _COUNTER)
counter = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(counter)

list_tasks = counter.list_tasks
versions = counter.versions
CallFailed = counter.CallFailed


def _protocol_fd() -> int:
    return sys.modules["__main__"].PROTOCOL_FD


def _raw(data: bytes) -> None:
    os.write(_protocol_fd(), data)


class World(counter.World):
    def __init__(self, options: dict, task_id: str) -> None:
        super().__init__(options, task_id)
        self.fault = options.get("fault", "")
        if self.fault == "raise_on_reset":
            raise ValueError("the world cannot be built")

    def step(self, calls: list[dict]) -> list[dict]:
        fault, _, arg = self.fault.partition(":")
        if fault == "crash" or (fault == "crash_once" and not os.path.exists(arg)):
            if arg:
                Path(arg).touch()
            print("about to crash", flush=True)  # goes to the log, not the protocol
            os._exit(7)
        if fault == "slow":
            time.sleep(float(arg))
        if fault == "hang":
            time.sleep(3600)
        if fault == "raise":
            raise RuntimeError("the world's executor broke")
        if fault == "oversized":
            return [{"content": "x" * 200_000, "error": None} for _ in calls]
        if fault == "call_failed":  # the first call runs, the second fails in the world
            first = super().step(calls[:1])
            raise CallFailed("the model's call broke the world's harness", first)
        if fault == "surrogate":  # text UTF-8 cannot encode, as a printing program makes
            return [{"content": "printed \ud800 text", "error": None} for _ in calls]
        if fault == "bad_shape":
            return {"not": "a list"}
        if fault == "wrong_count":
            return []
        if fault == "bad_result":
            return [{"content": 3, "error": None} for _ in calls]
        if fault == "garbage":
            _raw(struct.pack(">I", 12) + b"not json!!!!")
            time.sleep(3600)
        if fault == "bad_utf8":
            _raw(struct.pack(">I", 4) + b"\xff\xfe\xfd\xfc")
            time.sleep(3600)
        if fault == "huge_header":
            _raw(b"\xff\xff\xff\xff")
            time.sleep(3600)
        if fault == "wrong_id":
            _raw(_frame({"id": 999, "ok": True, "result": []}))
            time.sleep(3600)
        if fault == "truncated":
            _raw(struct.pack(">I", 100) + b'{"id": 2')
            time.sleep(3600)
        if fault == "deep":
            _raw(_frame_bytes(b"[" * 100_000 + b"]" * 100_000))
            time.sleep(3600)
        if fault == "print":
            print("a library talking on stdout", flush=True)
            os.write(1, b"\x00\x00\x00\x05hello")  # fd 1 is the log: harmless
        return super().step(calls)


def _frame(message: dict) -> bytes:
    return _frame_bytes(json.dumps(message).encode())


def _frame_bytes(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body
