"""The driver side of the process boundary: one worker process, its pipe and its fate.

A `WorkerProcess` is the benchmark's interpreter running `server.py` for one world
module, in its own process group (so a kill reaches whatever it started). Every reply
is data from another program: it is read with a deadline, its size is bounded before it
is read, and its encoding and shape are checked; anything else (a crash, a hang past
the call's timeout, a malformed or oversized frame, an exception of the world itself)
ends the worker and raises an `IsolatedWorkerError`, which is an `InfraError`: the
episode runner retries the episode with a fresh environment and never scores it against
the student. (A call that failed inside the world, the world's `CallFailed`, is no
error here: the server answers it as the call's observation, see `server.py`.) A worker
serves one episode and is never reused (strict isolation); the `WorkerPool` only starts
the next one early so its interpreter boots while the previous episode plays.

Nothing outlives the driver: workers are killed (their process group) on close, on
any error and at interpreter exit, and a worker whose driver dies exits by itself
(stdin EOF, and a parent watchdog in the server).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import select
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from distillery.workers.envs.isolated import server
from distillery.workers.llm.types import InfraError
from distillery.workers.sandbox.environment import PrivateHome
from distillery.workers.sandbox.netns import without_network

SERVER_PATH = Path(server.__file__).resolve()
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
_LOG_TAIL_BYTES = 4000


class IsolatedWorkerError(InfraError):
    """The benchmark's worker process failed this episode (never the student's doing)."""


class WorkerCrashed(IsolatedWorkerError):
    """The worker exited or closed its pipe."""


class WorkerTimeout(IsolatedWorkerError):
    """The worker did not answer within the call's timeout (it is killed)."""


class MalformedReply(IsolatedWorkerError):
    """A reply that is not a well-formed frame of the expected shape and size."""


class WorkerRaised(IsolatedWorkerError):
    """The world raised: a bug or a setup problem of the benchmark side."""


_LIVE: weakref.WeakSet[WorkerProcess] = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


@atexit.register
def _kill_all() -> None:
    with _LIVE_LOCK:
        workers = list(_LIVE)
    for worker in workers:
        worker.kill(close_pipes=False)


class WorkerProcess:
    """One started worker: `call` sends a request and returns its validated result.

    The world may run the model's code (AppWorld's interpreter does), so the worker
    starts from the allow-listed environment (`sandbox.environment`: PATH, locale, a
    private HOME and TMPDIR, and only the `extra_env` its adapter declares; never the
    driver's keys), and without network unless its benchmark says it needs it
    (`network`): then it runs in a network namespace of its own (`sandbox.netns`)."""

    def __init__(
        self,
        python: str | Path,
        world: str,
        log_dir: str | Path,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        extra_env: dict[str, str] | None = None,
        network: bool = False,
    ) -> None:
        self.max_reply_bytes = max_reply_bytes
        log_fd, log_name = tempfile.mkstemp(prefix="worker-", suffix=".log", dir=log_dir)
        self.log_path = Path(log_name)
        self.home = PrivateHome.create(prefix="distillery-world-")
        env = self.home.environment(extra_env)
        # -I: neither PYTHONPATH nor the user site nor distillery's own path leaks in;
        # the world runs against the venv's packages only.
        command = [str(python), "-I", str(SERVER_PATH), world]
        if not network:
            command = without_network(command, str(python))
        try:
            self._proc = subprocess.Popen(  # noqa: S603 - our own interpreter and server
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_fd,
                env=env,
                cwd=self.home.path,
                close_fds=True,
                start_new_session=True,  # its own process group: killpg reaches its children
            )
        except BaseException:
            self.home.remove()
            raise
        finally:
            os.close(log_fd)
        assert self._proc.stdin is not None and self._proc.stdout is not None
        self._in = self._proc.stdin.fileno()
        self._out = self._proc.stdout.fileno()
        os.set_blocking(self._in, False)  # a worker that stops reading cannot block us
        self.pid = self._proc.pid
        self._lock = threading.Lock()
        self._next_id = 1
        self._pending: list[int] = [0]  # replies owed, in order; 0 is the hello
        self.hello: dict[str, Any] | None = None
        self._broken: IsolatedWorkerError | None = None
        self._closed = False
        with _LIVE_LOCK:
            _LIVE.add(self)

    # -- requests -------------------------------------------------------------------

    def send(self, op: str, args: dict[str, Any] | None = None, timeout: float = 30.0) -> int:
        """Send a request without waiting for its reply (read by the next `call`)."""
        with self._lock:
            return self._send(op, args or {}, time.monotonic() + timeout)

    def call(self, op: str, args: dict[str, Any] | None = None, timeout: float = 60.0) -> Any:
        """Send `op` and return its result; replies owed to earlier `send`s are read
        (and checked) first. `timeout` bounds the whole call, earlier replies included."""
        with self._lock:
            return self._call(op, args or {}, timeout)

    def _call(self, op: str, args: dict[str, Any], timeout: float) -> Any:
        deadline = time.monotonic() + timeout
        rid = self._send(op, args, deadline)
        result = None
        while self._pending:
            owed = self._pending[0]
            value = self._receive(owed, deadline, timeout)
            self._pending.pop(0)
            if owed == rid:
                result = value
        return result

    def ready(self, timeout: float) -> dict[str, Any]:
        """The hello (protocol, pid, python), waiting for it at most `timeout`."""
        with self._lock:
            deadline = time.monotonic() + timeout
            while self.hello is None:
                self._receive(self._pending[0], deadline, timeout)
                self._pending.pop(0)
            return self.hello

    def _send(self, op: str, args: dict[str, Any], deadline: float) -> int:
        self._check_usable()
        rid = self._next_id
        self._next_id += 1
        frame = server.encode({"id": rid, "op": op, "args": args})
        view = memoryview(frame)
        while view:
            self._wait(self._in, "write", deadline, f"sending {op!r}")
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                continue
            except (BrokenPipeError, OSError) as exc:
                self._fail(WorkerCrashed(f"worker {self.pid} closed its input ({exc})"))
        self._pending.append(rid)
        return rid

    def _receive(self, rid: int, deadline: float, timeout: float) -> Any:
        header = self._read(server.HEADER.size, deadline, timeout)
        (size,) = server.HEADER.unpack(header)
        if size > self.max_reply_bytes:
            self._fail(
                MalformedReply(
                    f"worker {self.pid}: a reply of {size} bytes exceeds the limit of "
                    f"{self.max_reply_bytes}"
                )
            )
        body = self._read(size, deadline, timeout)
        try:
            message = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self._fail(MalformedReply(f"worker {self.pid}: a reply is not UTF-8 JSON ({exc})"))
        if not (
            isinstance(message, dict)
            and message.get("id") == rid
            and isinstance(message.get("ok"), bool)
        ):
            self._fail(
                MalformedReply(f"worker {self.pid}: reply {_short(message)} is not reply {rid}")
            )
        if not message["ok"]:
            error = message.get("error")
            if not isinstance(error, dict):
                self._fail(MalformedReply(f"worker {self.pid}: error reply {_short(message)}"))
            self._fail(
                WorkerRaised(
                    f"the world raised {_text(error.get('type'))}: "
                    f"{_text(error.get('message'))}\n{_text(error.get('traceback'))}"
                )
            )
        if rid == 0:
            self._accept_hello(message.get("result"))
        return message.get("result")

    def _accept_hello(self, hello: Any) -> None:
        if not (isinstance(hello, dict) and hello.get("protocol") == server.PROTOCOL_VERSION):
            self._fail(
                MalformedReply(
                    f"worker {self.pid} speaks {_short(hello)}, not protocol "
                    f"{server.PROTOCOL_VERSION}"
                )
            )
        self.hello = hello

    def _read(self, n: int, deadline: float, timeout: float) -> bytes:
        chunks, got = [], 0
        while got < n:
            self._wait(self._out, "read", deadline, f"a reply within {timeout:g} s")
            try:
                chunk = os.read(self._out, min(n - got, 1 << 20))
            except OSError:
                chunk = b""  # the pipe went away with the worker
            if not chunk:
                code = self._proc.poll()
                if code is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        code = self._proc.wait(0.5)
                self._fail(
                    WorkerCrashed(
                        f"worker {self.pid} exited (code {code}) mid-episode{self._log_tail()}"
                    )
                )
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)

    def _wait(self, fd: int, direction: str, deadline: float, what: str) -> None:
        """Until `fd` is ready for `direction` or `deadline` passes (then the worker is
        killed). `poll`, not `select`: select cannot watch a descriptor numbered 1024 or
        more (FD_SETSIZE), and a busy Ray worker, whose descriptor limit Ray raises,
        gets there; the deadline must hold at any number."""
        left = deadline - time.monotonic()
        if left > 0:
            poller = select.poll()
            poller.register(fd, select.POLLIN if direction == "read" else select.POLLOUT)
            # Hang-up and error events are always reported: the read or write that
            # follows then says the worker is gone.
            if poller.poll(max(1, math.ceil(left * 1000))):
                return
        self._fail(WorkerTimeout(f"worker {self.pid} gave no answer: {what}"))

    # -- life -----------------------------------------------------------------------

    def _check_usable(self) -> None:
        if self._broken is not None:
            raise type(self._broken)(f"worker {self.pid} already failed: {self._broken}")
        if self._closed:
            raise WorkerCrashed(f"worker {self.pid} is closed")

    def _fail(self, error: IsolatedWorkerError) -> NoReturn:
        """Kill the worker (its state can no longer be trusted) and raise `error`."""
        self._broken = error
        self.kill()
        raise error

    def alive(self) -> bool:
        return self._broken is None and not self._closed and self._proc.poll() is None

    def close(self, timeout: float = 2.0) -> None:
        """Ask the world to close, wait for the exit at most `timeout`, then kill."""
        if self._closed:
            return
        # A call still running (the episode timed out behind it) holds the lock: the
        # worker is killed at once, which also ends that call.
        if self._lock.acquire(blocking=False):
            try:
                if self.alive():
                    with contextlib.suppress(IsolatedWorkerError):
                        self._call("close", {}, timeout)
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self._proc.wait(timeout)
            finally:
                self._lock.release()
            self.kill()
        else:
            self.kill(close_pipes=False)  # the running call closes them as it fails
        if self._broken is None:
            self.log_path.unlink(missing_ok=True)  # kept after a failure, for the post-mortem

    def kill(self, close_pipes: bool = True) -> None:
        """SIGKILL the worker's process group and reap it; idempotent. The pipes are
        closed only by the thread that may use them (`close_pipes`)."""
        self._closed = True
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
            self._proc.wait(5.0)
        self.home.remove()
        if close_pipes:
            for pipe in (self._proc.stdin, self._proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()  # type: ignore[union-attr]
        with _LIVE_LOCK:
            _LIVE.discard(self)

    def _log_tail(self) -> str:
        try:
            with self.log_path.open("rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - _LOG_TAIL_BYTES))
                tail = log.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""
        return f"; its log ({self.log_path}) ends:\n{tail}" if tail else ""


class WorkerPool:
    """Hands out fresh workers, one per episode; `spares` are started ahead of need so
    an episode does not wait for the interpreter to boot. A spare that died while
    waiting is dropped, never handed out. `network` may be decided late (a callable,
    asked when the first episode's worker starts): a listing's worker needs no
    decision (`acquire(network=True)`), so a machine that cannot isolate the network
    still lists tasks (see `IsolatedBenchmark._tasks`)."""

    def __init__(
        self,
        python: str | Path,
        world: str,
        spares: int = 1,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        extra_env: dict[str, str] | None = None,
        network: bool | Callable[[], bool] = False,
    ) -> None:
        self.python = str(python)
        self.world = world
        self.spares = spares
        self.max_reply_bytes = max_reply_bytes
        self.extra_env = dict(extra_env or {})
        self._network = network
        self._log_dir = tempfile.mkdtemp(prefix="distillery-workers-")
        self._lock = threading.Lock()
        self._idle: list[WorkerProcess] = []
        self.started = 0
        self.recent_pids: deque[int] = deque(maxlen=4096)  # for checks and post-mortems

    @property
    def network(self) -> bool:
        """Whether the episodes' workers get the network (decided once, on first use)."""
        if callable(self._network):
            self._network = self._network()
        return self._network

    def _start(self, network: bool | None = None) -> WorkerProcess:
        worker = WorkerProcess(
            self.python,
            self.world,
            self._log_dir,
            self.max_reply_bytes,
            self.extra_env,
            self.network if network is None else network,
        )
        self.started += 1
        self.recent_pids.append(worker.pid)
        return worker

    def acquire(self, refill: bool = True, network: bool | None = None) -> WorkerProcess:
        """A fresh worker; `refill` starts spares for the episodes to come (a one-off
        use, like listing the tasks, leaves none behind). `network` given: a one-off
        worker with (True) or without it, never a spare."""
        if network is not None:
            with self._lock:
                return self._start(network)
        with self._lock:
            worker = None
            while self._idle and worker is None:
                candidate = self._idle.pop(0)
                if candidate.alive():
                    worker = candidate
                else:
                    candidate.kill()
            if worker is None:
                worker = self._start()
            while refill and len(self._idle) < self.spares:
                self._idle.append(self._start())
            return worker

    def shutdown(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for worker in idle:
            worker.kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit, atexit has killed them
            self.shutdown()


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _text(value: Any, limit: int = 4000) -> str:
    return (value if isinstance(value, str) else repr(value))[:limit]


def pids_alive(pids: Sequence[int]) -> list[int]:
    """The pids of `pids` that still name a process that is not a zombie."""
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z":
            alive.append(pid)
    return alive
