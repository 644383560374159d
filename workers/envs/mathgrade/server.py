"""The math grader's process: math-verify behind a fork per grading.

Run by `grader.py` as ``python -I server.py`` (the driver's interpreter, for its
math-verify), from the allow-listed environment and in a network namespace of its
own. It imports math-verify once and forks a grading child from that clean state; for
each request (a 4-byte length and a JSON ``{"id", "gold", "answer", "timeout_s"}`` on
stdin) the child parses both strings and compares them, and the server answers
``{"id", "correct", "timeout", "error"}`` on stdout. When the request's time is up the
child is killed (``"timeout": true``) and a fresh one forked: math-verify's own
timeouts are signals that only work on a main thread and answer "wrong" silently, so
they are off and this outer limit replaces them, counted by the caller. A child that
hits its memory limit dies the same way (a wrong answer), and every child is replaced
after `CHILD_GRADINGS` gradings: what parses leave behind never grows without bound.
Within a child, an answer's parse is cached (`_parsed`): the gold of a problem is
parsed once for all its replies. This process itself never parses a model's text.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import logging
import os
import re
import resource
import select
import signal
import struct
import sys
import time
from pathlib import Path
from typing import cast

HEADER = struct.Struct(">I")
CHILD_MEMORY_BYTES = 2 * 1024**3  # ours: sympy on a contrived expression stops here
# ours: a grading child is replaced after this many gradings. sympy's own cache is an
# LRU of 1,000 entries (SYMPY_CACHE_SIZE) and `_parsed`'s holds PARSED_CACHE answers, so
# this bounds only what a library might leak; a fresh child starts cold (~ms a parse).
CHILD_GRADINGS = 2000
PARSED_CACHE = 512
MAX_REQUEST_BYTES = 16 * 1024 * 1024
# math-verify's `parse` annotates its timeout as int, yet None is how it is turned off
# (math_verify/parser.py checks `parsing_timeout is None`; its own error message
# recommends None where signals cannot be used): the one cast, at that seam.
NO_PARSING_TIMEOUT = cast(int, None)


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


@functools.lru_cache(maxsize=PARSED_CACHE)
def _parsed(text: str) -> tuple:
    """math-verify's parse of one extracted answer, as a boxed expression. Cached in the
    child: a gold answer is parsed once for all the replies to its problem, and a
    parse is a pure function of the text (sympy's expressions are immutable)."""
    from math_verify import parse

    # Timeouts off (None): the parent's wall clock is the limit, and it is counted.
    return tuple(parse(f"\\boxed{{{text}}}", parsing_timeout=NO_PARSING_TIMEOUT))


# A thin space between digit groups (``1\\,000``, SI style) is a thousands separator;
# math-verify reads ``\\,`` as a product (1*0). Qwen2.5-Math's evaluator reads it as
# 1000, as it does ``1,000`` and ``1{,}000`` (which math-verify handles itself).
_THIN_SPACE_GROUP = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")
_PERCENT = re.compile(r"\\?%")


# Pairs graded once before the first fork, so that what sympy and math-verify import
# and build lazily on a first use (simplify, matrices, sets, relations, floats) is in
# every grading child already, not paid again by each fresh one (ours).
WARM_UP = (
    ("1", "1"),
    ("\\frac{1}{2}", "0.5"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("x^2+2x+1", "(x+1)^2"),
    ("25\\%", "25"),
    ("30^\\circ", "\\frac{\\pi}{6}"),
    ("(1,2]", "[1,2)"),
    ("\\{1,2\\}", "1, 2"),
    ("(3,-1)", "(3, -1)"),
    ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1\\\\2\\end{pmatrix}"),
    ("x=5", "5"),
    ("\\text{(A)}", "A"),
    ("1+2i", "2i+1"),
    ("\\infty", "\\infty"),
    ("\\log_2 8", "3"),
    ("\\sin^{-1}(1/2)", "\\frac{\\pi}{6}"),
)


def _normalised(text: str) -> str:
    return _THIN_SPACE_GROUP.sub("", text)


def _verdict(gold: str, answer: str) -> bool:
    """math-verify's verdict on the two extracted answers; where either has a percent
    sign, also the verdict with the signs removed, as Qwen2.5-Math's evaluator compares
    them (its strip_string drops ``\\%``): math-verify alone takes ``25\\%`` = 25 only for
    integers, so ``12.5`` against gold ``12.5\\%`` would be wrong."""
    from math_verify import verify

    gold, answer = _normalised(gold), _normalised(answer)
    pairs = [(gold, answer)]
    if _PERCENT.search(gold) or _PERCENT.search(answer):
        pairs.append((_PERCENT.sub("", gold), _PERCENT.sub("", answer)))
    for gold_text, answer_text in pairs:
        gold_parsed, answer_parsed = _parsed(gold_text), _parsed(answer_text)
        if (
            gold_parsed
            and answer_parsed
            and verify(list(gold_parsed), list(answer_parsed), timeout_seconds=None)
        ):
            return True
    return False


class _Child:
    """The grading child: forked from this (clean) process, it grades requests one at
    a time over its pipes; killed when a grading overruns, replaced after
    `CHILD_GRADINGS` gradings."""

    def __init__(self) -> None:
        to_child_read, self.to_child = os.pipe()
        self.from_child, from_child_write = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.to_child)
            os.close(self.from_child)
            _serve(to_child_read, from_child_write)
        os.close(to_child_read)
        os.close(from_child_write)
        self.served = 0

    def grade(self, request: dict) -> dict | None:
        """The verdict, or None when the time ran out (the child is then killed)."""
        self.served += 1
        _write(self.to_child, request)
        deadline = time.monotonic() + float(request.get("timeout_s", 10))
        header = self._read(HEADER.size, deadline)
        if header is None:
            return None
        body = self._read(HEADER.unpack(header)[0], deadline)
        return None if body is None else json.loads(body)

    def _read(self, n: int, deadline: float) -> bytes | None:
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.from_child], [], [], left)[0]:
                return None
            chunk = os.read(self.from_child, n - got)
            if not chunk:
                raise EOFError("the grading child ended")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.to_child)
        os.close(self.from_child)


def _serve(requests: int, replies: int) -> None:
    """The child's loop; never returns."""
    resource.setrlimit(resource.RLIMIT_AS, (CHILD_MEMORY_BYTES, CHILD_MEMORY_BYTES))
    while True:
        header = _read_exact(requests, HEADER.size)
        if header is None:
            os._exit(0)
        request = json.loads(_read_exact(requests, HEADER.unpack(header)[0]) or b"{}")
        try:
            payload = {"correct": _verdict(str(request["gold"]), str(request["answer"])),
                       "error": None}  # fmt: skip
        except BaseException as exc:  # noqa: BLE001 - a failed parse is a wrong answer
            payload = {"correct": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        _write(replies, payload)


_CHILD: _Child | None = None


def _grade(request: dict) -> dict:
    global _CHILD
    if _CHILD is None or _CHILD.served >= CHILD_GRADINGS:
        if _CHILD is not None:
            _CHILD.kill()
        _CHILD = _Child()
    try:
        payload = _CHILD.grade(request)
    except (EOFError, OSError, ValueError) as exc:
        # Killed by its memory limit, or garbled: the expression's doing.
        _CHILD.kill()
        _CHILD = None
        return {"correct": False, "timeout": False, "error": f"grading child: {exc}"}
    if payload is None:
        _CHILD.kill()
        _CHILD = None
        return {"correct": False, "timeout": True, "error": None}
    error = payload.get("error")
    return {"correct": bool(payload.get("correct")), "timeout": False, "error": error}


def _mend_parser() -> None:
    """latex_parser.install(), loaded by path: this file runs as a script (`-I`), with
    no package around it."""
    path = Path(__file__).resolve().with_name("latex_parser.py")
    spec = importlib.util.spec_from_file_location("distillery_mathgrade_latex_parser", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.install()


def main() -> int:
    logging.disable(logging.CRITICAL)  # math-verify warns that its timeouts are off
    _mend_parser()  # before any parse: percents and \\Gamma under ANTLR 4.9.3
    for gold, answer in WARM_UP:  # once, before any fork: every child starts warm
        _verdict(gold, answer)
    _parsed.cache_clear()  # a child's parse cache holds only what it was asked

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
