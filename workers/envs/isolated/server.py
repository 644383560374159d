"""The worker side of the process boundary: a stdlib-only server for one world.

This file runs under a benchmark's own interpreter (its virtualenv, with its pinned
dependencies), so it imports nothing but the standard library and is started by path,
never as part of the `distillery` package. It loads one *world module* (the benchmark
side of an adapter, also started by path) and answers the driver's requests over its
stdin/stdout until told to close or until its stdin ends (the driver is gone).

Framing (both directions): a 4-byte big-endian length, then that many bytes of UTF-8
JSON. Requests are ``{"id": n, "op": str, "args": {...}}``; replies are
``{"id": n, "ok": true, "result": ...}`` or ``{"id": n, "ok": false, "error": {"type",
"message", "traceback"}}``. The first frame the server writes is a `hello` reply
(id 0) naming the protocol version, its pid and interpreter, so a worker that cannot
start says so before any episode talks to it.

The world module defines, all with plain JSON values:

- ``list_tasks(options) -> list[dict]``: every task in canonical order, each
  ``{"task_id", "turns", "tools", "function_docs", "group_id", "metadata",
  "system_prompts": {"prompt", "native"}, "oracle": [[step, ...], ...]}``;
- ``versions() -> dict[str, str]``: the benchmark's packages (provenance);
- ``World(options, task_id)``: one episode's world (the process serves one), with
  ``step(calls) -> [{"content", "error"}]`` (one per call: ``{"name", "args",
  "kwargs", "call_id", "source"}``), ``end_turn()``, ``evaluate() -> {"success",
  "error_type", "error_message", "details"}`` and ``close()``. A result may carry
  ``"task_done": true`` (a world that ends tasks itself, e.g. AppWorld after
  ``complete_task``); a world with its own simulated user also defines
  ``next_user_message(reply) -> str | None`` (the user's answer to the agent's closing
  reply, None when it ends the conversation);
- optionally ``CallFailed``, an exception class: raised by ``step``, it says that a call
  failed inside the world because of what the model asked (an arithmetic result past
  the world's limits, model-written code that broke the interpreter's own harness),
  while the world itself is fine. Its ``results`` attribute (optional) holds the
  results of the step's calls that ran before the failing one; a true ``ends_task``
  attribute says the benchmark's own runner ends the task there (ToolSandbox's scores
  a scenario whose play raised as a failure): every result then carries ``task_done``
  and the world's ``evaluate`` scores it as its runner does.

Who failed decides what an exception means (protocol 2). A call that failed inside the
world is an observation: the server answers the step with the calls that ran, the
failing call's error (``"failed": true``) and "not run" for the calls after it, and the
episode goes on (the benchmark's own scoring then judges the model). Any other exception
is the world itself failing: the error reply below, an infrastructure error for the
driver (retried, never scored). What the model's actions make a world return is bounded
here too: a result's content is cut to the step request's ``max_content_chars`` (a
marker says how much was cut, ``"cut"`` holds its length), and text that UTF-8 cannot
encode (lone surrogates a program printed) travels as JSON escapes, so no output a model
provokes can turn a step into a frame the driver must refuse.

A library that prints would corrupt the protocol, so file descriptor 1 is moved to a
private descriptor first and fd 1 then points at stderr (the driver's log file).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import struct
import sys
import threading
import time
import traceback

PROTOCOL_VERSION = 2
HEADER = struct.Struct(">I")
# Requests are the driver's own and small; a bigger one is a driver bug, refused.
MAX_REQUEST_BYTES = 64 * 1024 * 1024
# The descriptor replies go to (set by `main`); a test world may write raw bytes to it.
PROTOCOL_FD = -1


# What answers the calls of a step after the one that failed inside the world.
NOT_RUN = "Error: not run: an earlier call of this step failed inside the world."


def encode(message: object) -> bytes:
    """One frame: length header + compact UTF-8 JSON (ASCII escapes where UTF-8 cannot
    encode the text: lone surrogates)."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    try:
        body = text.encode("utf-8")
    except UnicodeEncodeError:
        body = json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode("ascii")
    return HEADER.pack(len(body)) + body


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None  # EOF: the driver closed our stdin or died
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _load_world(spec: str) -> object:
    """`spec` is ``/path/to/file.py`` or an importable module name (of the venv)."""
    if spec.endswith(".py"):
        name = "distillery_world_" + os.path.basename(spec)[:-3]
        loaded = importlib.util.spec_from_file_location(name, spec)
        if loaded is None or loaded.loader is None:
            raise ImportError(f"cannot load world module from {spec}")
        module = importlib.util.module_from_spec(loaded)
        sys.modules[name] = module
        loaded.loader.exec_module(module)
        return module
    return importlib.import_module(spec)


def _orphan_watchdog(parent: int) -> None:
    # A world stuck in a call never reads its stdin's EOF: a reparented worker (the
    # driver died without killing it) exits on its own instead of living on.
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(3)


def _failed_step(calls: list, exc: BaseException) -> list:
    """The step's results when one of its calls failed inside the world (`exc`)."""
    ran = getattr(exc, "results", None)
    ran = list(ran)[: max(0, len(calls) - 1)] if isinstance(ran, (list, tuple)) else []
    message = f"{type(exc).__name__}: {exc}"[:4000]
    failed = {"content": f"Error: {message}", "error": message, "failed": True}
    rest = [{"content": NOT_RUN, "error": NOT_RUN, "failed": True}] * (len(calls) - len(ran) - 1)
    results = [*ran, failed, *rest]
    if getattr(exc, "ends_task", False) is True:
        results = [
            {**item, "task_done": True} if isinstance(item, dict) else item for item in results
        ]
    return results


def _bounded(results: object, max_chars: object) -> object:
    """Each result's content cut to `max_chars` (the driver's bound), marked."""
    if not isinstance(max_chars, int) or not isinstance(results, list):
        return results
    out = []
    for item in results:
        content = item.get("content") if isinstance(item, dict) else None
        if isinstance(content, str) and len(content) > max_chars:
            cut = len(content) - max_chars
            item = {
                **item,
                "content": f"{content[:max_chars]}\n[... {cut} characters cut]",
                "cut": len(content),
            }
        out.append(item)
    return out


class _Server:
    def __init__(self, module: object) -> None:
        self.module = module
        self.world: object | None = None
        # The world's "this call failed" exception (none: every exception is the world's).
        declared = getattr(module, "CallFailed", None)
        is_error = isinstance(declared, type) and issubclass(declared, BaseException)
        self.call_failed: type[BaseException] | tuple = declared if is_error else ()

    def handle(self, op: str, args: dict) -> object:
        if op == "ping":
            return {"pid": os.getpid()}
        if op == "tasks":
            return self.module.list_tasks(args.get("options", {}))
        if op == "versions":
            versions = getattr(self.module, "versions", None)
            return versions() if versions is not None else {}
        if op == "reset":
            if self.world is not None:
                raise RuntimeError("this worker already holds a world (one episode a process)")
            self.world = self.module.World(args.get("options", {}), args["task_id"])
            return {"pid": os.getpid()}
        world = self.world
        if world is None:
            raise RuntimeError(f"{op!r} before reset")
        if op == "step":
            calls = args["calls"]
            try:
                results = world.step(calls)
            except self.call_failed as exc:
                results = _failed_step(calls, exc)
            return _bounded(results, args.get("max_content_chars"))
        if op == "end_turn":
            for _ in range(int(args.get("count", 1))):
                world.end_turn()
            return None
        if op == "next_user_message":  # only worlds with their own user define it
            return world.next_user_message(args["reply"])
        if op == "evaluate":
            return world.evaluate()
        raise ValueError(f"unknown op {op!r}")


def main(argv: list[str]) -> int:
    global PROTOCOL_FD
    if len(argv) != 2:
        sys.stderr.write("usage: server.py WORLD_MODULE\n")
        return 2
    PROTOCOL_FD = os.dup(1)
    os.dup2(2, 1)  # prints of the benchmark's libraries go to the log, not the protocol
    sys.stdout = sys.stderr
    threading.Thread(target=_orphan_watchdog, args=(os.getppid(),), daemon=True).start()
    hello = {
        "protocol": PROTOCOL_VERSION,
        "pid": os.getpid(),
        "python": list(sys.version_info[:3]),
        "executable": sys.executable,
    }
    try:
        server = _Server(_load_world(argv[1]))
    except BaseException as exc:  # noqa: BLE001 - said to the driver, which decides
        _write_all(PROTOCOL_FD, encode({"id": 0, "ok": False, "error": _error(exc)}))
        return 1
    _write_all(PROTOCOL_FD, encode({"id": 0, "ok": True, "result": hello}))
    stdin = sys.stdin.fileno()
    while True:
        header = _read_exact(stdin, HEADER.size)
        if header is None:
            break
        (size,) = HEADER.unpack(header)
        if size > MAX_REQUEST_BYTES:
            sys.stderr.write(f"request of {size} bytes refused\n")
            return 2
        body = _read_exact(stdin, size)
        if body is None:
            break
        request = json.loads(body.decode("utf-8"))
        rid, op = request.get("id"), request.get("op")
        if op == "close":
            _close(server)
            _write_all(PROTOCOL_FD, encode({"id": rid, "ok": True, "result": None}))
            return 0
        try:
            reply = {"id": rid, "ok": True, "result": server.handle(op, request.get("args", {}))}
            frame = encode(reply)
        except Exception as exc:  # noqa: BLE001 - the driver turns it into an infra error
            frame = encode({"id": rid, "ok": False, "error": _error(exc)})
        _write_all(PROTOCOL_FD, frame)
    _close(server)
    return 0


def _close(server: _Server) -> None:
    close = getattr(server.world, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - the process ends anyway
            traceback.print_exc()


def _error(exc: BaseException) -> dict:
    return {
        "type": type(exc).__name__,
        "message": str(exc)[:4000],
        "traceback": traceback.format_exc()[-8000:],
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv))
