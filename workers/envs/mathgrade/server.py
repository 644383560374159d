"""The math grader's process: math-verify behind a fork per grading.

Run by `grader.py` as ``python -I server.py`` (the driver's interpreter, for its
math-verify), from the allow-listed environment and in a network namespace of its
own. It imports math-verify once, then for each request (a 4-byte length and a JSON
``{"id", "gold", "answer", "timeout_s"}`` on stdin) forks a child that parses both
strings and compares them, and answers ``{"id", "correct", "timeout", "error"}`` on
stdout. The child is killed when the request's time is up (``"timeout": true``):
math-verify's own timeouts are signals that only work on a main thread and answer
"wrong" silently, so they are off and this outer limit replaces them, counted by the
caller. A fresh child per grading: a parse that exhausts memory or never ends takes
nothing of the next grading with it.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import select
import signal
import struct
import sys
import time

HEADER = struct.Struct(">I")
CHILD_MEMORY_BYTES = 2 * 1024**3  # ours: sympy on a contrived expression stops here
MAX_REQUEST_BYTES = 16 * 1024 * 1024


def _read_exact(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _write(fd: int, message: dict) -> None:
    body = json.dumps(message).encode()
    view = memoryview(HEADER.pack(len(body)) + body)
    while view:
        view = view[os.write(fd, view) :]


def _verdict(gold: str, answer: str) -> bool:
    from math_verify import parse, verify

    # Timeouts off (None): the parent's wall clock is the limit, and it is counted.
    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=None)
    answer_parsed = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    if not gold_parsed or not answer_parsed:
        return False
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


def _grade(request: dict) -> dict:
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one grading, then gone
        os.close(read_end)
        code = 0
        try:
            limit = int(request.get("timeout_s", 10)) + 2
            resource.setrlimit(resource.RLIMIT_CPU, (limit, limit))
            resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
            correct = _verdict(str(request["gold"]), str(request["answer"]))
            payload = {"correct": correct, "error": None}
        except BaseException as exc:  # noqa: BLE001 - a failed parse is a wrong answer
            payload = {"correct": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
            code = 1
        try:
            os.write(write_end, json.dumps(payload).encode())
        finally:
            os._exit(code)
    os.close(write_end)
    deadline = time.monotonic() + float(request.get("timeout_s", 10))
    chunks: list[bytes] = []
    timed_out = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        ready, _, _ = select.select([read_end], [], [], left)
        if ready:
            chunk = os.read(read_end, 65536)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(read_end)
    if timed_out:
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    if timed_out:
        return {"correct": False, "timeout": True, "error": None}
    try:
        payload = json.loads(b"".join(chunks))
    except ValueError:
        # Killed by a limit (memory, CPU) before answering: the expression's doing.
        return {"correct": False, "timeout": False, "error": f"grader child ended ({status})"}
    return {
        "correct": bool(payload.get("correct")),
        "timeout": False,
        "error": payload.get("error"),
    }


def main() -> int:
    logging.disable(logging.CRITICAL)  # math-verify warns that its timeouts are off
    _verdict("1", "1")  # imports and warms math-verify's parsers once, before any fork

    out = os.dup(1)
    os.dup2(2, 1)  # anything a library prints goes to stderr, not the protocol
    _write(out, {"id": 0, "ready": True, "pid": os.getpid()})
    stdin = sys.stdin.fileno()
    while True:
        header = _read_exact(stdin, HEADER.size)
        if header is None:
            return 0
        (size,) = HEADER.unpack(header)
        if size > MAX_REQUEST_BYTES:
            return 2
        body = _read_exact(stdin, size)
        if body is None:
            return 0
        request = json.loads(body)
        _write(out, {"id": request.get("id"), **_grade(request)})


if __name__ == "__main__":
    sys.exit(main())
