"""Grades math answers in grader processes with an outer wall-clock limit.

`MathGrader.grade(gold, answer)` sends the pair to one of a few grader processes
(`server.py`), which forks a child per grading and kills it when the time is up. The
verdict is a `Grade`: correct or not, and whether the limit was hit (`timed_out`,
which the benchmark counts as ``grader_timeouts``: a wrong answer, never a silent
one). The grader processes parse the model's text with sympy, so they start from the
allow-listed environment (no secret of the driver's) in a network namespace of their
own (`sandbox.netns`), and hold nothing between gradings but math-verify itself (and,
in a grading child, the parses of answers it has seen). A verdict is kept per pool for
the same pair of strings (`VERDICT_CACHE`; a timeout never is), so a repeated answer
costs a dictionary look-up.

A grader process that dies, garbles its reply or does not answer within the limit
plus `SERVER_SLACK_S` is killed and replaced; the grading is tried once more on a
fresh one, and a second failure is a `GraderUnavailable` (an infrastructure error: the
episode is retried, never scored).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import queue
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from distillery.workers.llm.types import InfraError
from distillery.workers.sandbox.environment import allowed_environment
from distillery.workers.sandbox.netns import network_isolation_unavailable, without_network

SERVER = Path(__file__).resolve().parent / "server.py"
HEADER = struct.Struct(">I")
SERVER_SLACK_S = 30.0  # beyond the grading's limit, for the server's own answer
STARTUP_TIMEOUT_S = 120.0  # importing sympy and math-verify on a loaded machine
NO_HOME = "/nonexistent/distillery-grader"
MAX_ANSWER_CHARS = 100_000  # longer extracted answers are wrong without parsing (ours)
# ours: verdicts kept per grader pool (see MathGrader), and the longest pair kept:
# at most ~16 MB of strings, in practice (answers of a few characters) well under 1 MB.
VERDICT_CACHE = 16_384
VERDICT_CACHE_CHARS = 1_000


class GraderUnavailable(InfraError):
    """No grader process could grade (it would not start, or kept failing)."""


@dataclass(frozen=True)
class Grade:
    correct: bool
    timed_out: bool = False
    error: str | None = None


class _Server:
    """One grader process."""

    def __init__(self, network: bool) -> None:
        command = [sys.executable, "-I", str(SERVER)]
        if not network:
            command = without_network(command, sys.executable)
        self.proc = subprocess.Popen(  # noqa: S603 - our interpreter and server
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            # A grader writes nothing: its home is a path that does not exist (so a
            # killed driver leaves no folder behind), its TMPDIR none either.
            env=allowed_environment(NO_HOME),
            cwd="/",
            close_fds=True,
            start_new_session=True,
        )
        self.next_id = 1
        self.ready = False
        assert self.proc.stdout is not None
        self.selector = selectors.DefaultSelector()  # one for the process's life
        self.selector.register(self.proc.stdout.fileno(), selectors.EVENT_READ)

    def call(self, request: dict, timeout: float) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        if not self.ready:
            self._read(time.monotonic() + STARTUP_TIMEOUT_S)
            self.ready = True
        request = {**request, "id": self.next_id}
        self.next_id += 1
        body = json.dumps(request).encode()
        self.proc.stdin.write(HEADER.pack(len(body)) + body)
        self.proc.stdin.flush()
        reply = self._read(deadline)
        if reply.get("id") != request["id"]:
            raise OSError(f"grader answered {str(reply)[:200]} to request {request['id']}")
        return reply

    def _read(self, deadline: float) -> dict:
        header = self._exact(HEADER.size, deadline)
        (size,) = HEADER.unpack(header)
        if size > 1 << 20:
            raise OSError(f"grader reply of {size} bytes")
        return json.loads(self._exact(size, deadline))

    def _exact(self, n: int, deadline: float) -> bytes:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                raise TimeoutError("the grader process did not answer in time")
            chunk = os.read(fd, n - got)
            if not chunk:
                raise OSError(f"the grader process exited ({self.proc.poll()})")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def kill(self) -> None:
        self.selector.close()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:  # never: both are pipes
                with contextlib.suppress(OSError):
                    pipe.close()


class MathGrader:
    """A pool of at most `processes` grader processes, shared by every episode of the
    process (see `shared_grader`)."""

    def __init__(
        self, processes: int | None = None, network: bool = False, verdicts: int = VERDICT_CACHE
    ) -> None:
        self.processes = processes or max(2, os.cpu_count() or 1)
        self.network = network  # True only where the user allowed it (no namespaces here)
        self._idle: queue.LifoQueue[_Server] = queue.LifoQueue()
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.processes)
        self._all: list[_Server] = []
        # Verdicts of pairs already graded: math-verify is a pure function of the two
        # strings, and replies repeat (the samples of a problem mostly agree, a task is
        # graded again by every method and seed). A timed-out grading is never kept.
        self._verdicts: OrderedDict[tuple[str, str], Grade] = OrderedDict()
        self.verdicts = verdicts  # how many are kept (0: none)
        self.cache_hits = 0
        atexit.register(self.close)

    def grade(self, gold: str, answer: str, timeout_s: float) -> Grade:
        """Whether `answer` is equivalent to `gold` (strings as extracted)."""
        if not answer.strip():
            return Grade(False, error="no answer")
        if len(answer) > MAX_ANSWER_CHARS:
            return Grade(False, error=f"an answer of {len(answer)} characters")
        key = (gold, answer)
        with self._lock:
            known = self._verdicts.get(key)
            if known is not None:
                self._verdicts.move_to_end(key)
                self.cache_hits += 1
                return known
        request = {"gold": gold, "answer": answer, "timeout_s": timeout_s}
        failure = ""
        with self._slots:
            for _ in range(2):
                server = self._take()
                try:
                    reply = server.call(request, timeout_s + SERVER_SLACK_S)
                except (OSError, ValueError, TimeoutError) as exc:
                    failure = f"{type(exc).__name__}: {exc}"
                    self._discard(server)
                    continue
                self._idle.put(server)
                grade = Grade(
                    bool(reply.get("correct")),
                    bool(reply.get("timeout")),
                    None if reply.get("error") is None else str(reply["error"])[:500],
                )
                self._keep(key, grade)
                return grade
        raise GraderUnavailable(f"the math grader failed twice: {failure}")

    def _keep(self, key: tuple[str, str], grade: Grade) -> None:
        # Not a timeout (the limit and the load decide it, not the strings), nor a child
        # that died (its memory limit: the same).
        if grade.timed_out or (grade.error or "").startswith("grading child"):
            return
        if not self.verdicts or len(key[0]) + len(key[1]) > VERDICT_CACHE_CHARS:
            return
        with self._lock:
            self._verdicts[key] = grade
            if len(self._verdicts) > self.verdicts:
                self._verdicts.popitem(last=False)

    def _take(self) -> _Server:
        try:
            return self._idle.get_nowait()
        except queue.Empty:
            pass
        try:
            server = _Server(self.network)
        except OSError as exc:
            raise GraderUnavailable(f"the math grader did not start: {exc}") from None
        with self._lock:
            self._all.append(server)
        return server

    def _discard(self, server: _Server) -> None:
        server.kill()
        with self._lock:
            if server in self._all:
                self._all.remove(server)

    def close(self) -> None:
        with self._lock:
            servers, self._all = self._all, []
        for server in servers:
            server.kill()
        while not self._idle.empty():
            with contextlib.suppress(queue.Empty):
                self._idle.get_nowait()


_SHARED: dict[bool, MathGrader] = {}
_SHARED_LOCK = threading.Lock()


def shared_grader(network: bool = False) -> MathGrader:
    """The process's grader pool (its processes start lazily and die at exit);
    `network`: without a network namespace (only where none can be made and the user
    allowed it)."""
    with _SHARED_LOCK:
        if network not in _SHARED:
            _SHARED[network] = MathGrader(network=network)
        return _SHARED[network]


def isolation_unavailable() -> str | None:
    """Why the grader processes cannot run without network here (None: they can)."""
    return network_isolation_unavailable(sys.executable)
