"""Runs one check of model-written code in a fresh sandbox, and cleans up after it.

The driver side of `launcher.py` (which builds the jail) and `runner.py` (which runs
the check in it). Each check is a fresh process started from an allow-listed
environment (`environment.py`) with isolated interpreter flags (``-I -S -B``: no
``PYTHON*`` variable, no site-packages, no user site, no bytecode written), in its own
session, which then confines itself: new network, mount, PID, IPC and UTS namespaces,
a size-limited tmpfs root holding only the interpreter and its standard library
read-only, a private ``/tmp`` and working directory, an unprivileged identity and
resource limits. See ``docs/sandbox.md`` for what this does and does not guarantee.

Who is to blame is decided by one frame: ``started``, which the runner sends before
any of the program's code runs. A sandbox that fails before it (no namespaces, a
mount refused, an interpreter that does not start) raises `SandboxUnavailable`, an
`InfraError`: the episode is retried, never scored. Everything after it is the
program's: a timeout, a crash, a resource limit hit, a killed or garbled channel are a
failed check (`Check.passed` is False).

At the end, whatever happened, the jail's PID 1 is killed (the kernel then kills every
process of its PID namespace), the launcher's process group is killed and reaped, and
the temporary folder is removed: nothing of the check outlives `run`.
"""

from __future__ import annotations

import contextlib
import json
import marshal
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType
from typing import Any, Literal, NotRequired, TypedDict

from distillery.workers.llm.types import InfraError
from distillery.workers.sandbox import launcher, packages, pool, runner, seccomp, values, warm
from distillery.workers.sandbox.environment import allowed_environment

HEADER_BYTES = 4
STDERR_KEPT = 8000
# What the interpreter needs inside the jail besides its own prefix: system libraries,
# the loader's cache. Symbolic links among them are recreated as links.
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin", "/etc/ld.so.cache")
JAIL_PATH = "/usr/local/bin:/usr/bin:/bin"
# The range uids of jails are drawn from (as root): far above any real account, one per
# check, so a check's process limit is its own and nothing else runs under its uid.
JAIL_UIDS = (1_800_000_000, 1_900_000_000)
NO_NAMESPACES_HELP = (
    "run as root, or enable unprivileged user namespaces (sysctl "
    "kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0); or accept "
    "running model-written code without network and filesystem isolation with "
    "+benchmark.options.sandbox_without_namespaces=true (recorded as a deviation)"
)


class SandboxUnavailable(InfraError):
    """The sandbox could not start this check: never the program's failure."""


Isolation = Literal["namespaces", "process"]
Status = Literal["passed", "failed", "done", "timeout", "crashed", "malformed"]


class ProgramJob(TypedDict):
    """A ``program`` check (runner.py): the preamble and the code, then the tests."""

    kind: Literal["program"]
    code: str
    tests: str
    preamble: NotRequired[str]


class OutputsJob(TypedDict):
    """An ``outputs`` check (runner.py): the entry point called on each input."""

    kind: Literal["outputs"]
    code: str
    entry_point: str
    inputs: list[object]  # each input's argument list, encoded (values.py)
    time_limits: NotRequired[list[float]]  # seconds, input by input


# What a check runs; marshalled into the jail, where runner.py checks its kind.
Job = ProgramJob | OutputsJob


@dataclass(frozen=True)
class Limits:
    """One check's limits. Defaults are ours unless a benchmark passes its own (see
    docs/sandbox.md for each value's source)."""

    timeout_s: float = 10.0  # wall clock from `started` to the verdict
    memory_mb: int = 4096  # address space (EvalPlus's 4 GB)
    cpu_s: float | None = None  # CPU time; None: timeout_s + 1
    open_files: int = 64
    processes: int = 32
    file_mb: int = 16  # largest file the program may write (its printed output too)
    tmpfs_mb: int = 64  # everything it may write, in all
    startup_timeout_s: float = 60.0  # for the jail to come up (a loaded machine is slow)
    max_reply_mb: int = 64  # frames back from the jail

    def launcher_limits(self) -> dict[str, int]:
        return {
            "cpu_s": int(self.cpu_s if self.cpu_s is not None else self.timeout_s + 1) + 1,
            "memory_bytes": self.memory_mb * 1024 * 1024,
            "open_files": self.open_files,
            "processes": self.processes,
            "file_bytes": self.file_mb * 1024 * 1024,
        }


@dataclass(frozen=True)
class Check:
    """What one check came to. `status`: the runner's verdict (``passed``/``failed``
    for a program check, ``done``/``failed`` for an outputs check), or what ended it
    from outside (``timeout``, ``crashed``: no verdict, ``malformed``: a garbled
    channel). `result` is the runner's verdict frame (empty without one)."""

    status: Status
    result: dict[str, Any] = field(default_factory=dict)
    isolation: Isolation = "namespaces"
    wall_s: float = 0.0
    detail: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    @property
    def summary(self) -> str:
        """One line on what went wrong (empty when it passed)."""
        if self.status in ("passed", "done"):
            return ""
        if self.status == "timeout":
            return f"timed out ({self.detail})" if self.detail else "timed out"
        if self.status in ("crashed", "malformed"):
            return self.detail or self.status
        return str(self.result.get("error") or self.detail or "failed")[:2000]


def _compiled() -> list[CodeType]:
    """The code of values.py, runner.py, seccomp.py, warm.py and launcher.py, compiled
    once."""
    code = []
    for module in (values, runner, seccomp, warm, launcher):
        path = module.__file__
        assert path is not None  # modules of this package, loaded from their files
        code.append(compile(Path(path).read_text(), path, "exec"))
    return code


_CODE: list[CodeType] | None = None
_PROBE: dict[str, str | None] = {}
_PROBE_LOCK = threading.Lock()


def interpreter() -> str:
    """The base interpreter (not a venv's link to it): what runs inside the jail."""
    base = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(base)


def jail_binds(python: str | None = None) -> list[str]:
    """The host paths bound read-only into the jail: system libraries and the
    interpreter's own prefix (wherever it is installed)."""
    python = python or interpreter()
    paths = [p for p in SYSTEM_PATHS if os.path.lexists(p)]
    covered = [os.path.realpath(p) for p in paths if os.path.isdir(p)]
    for extra in {os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}:
        if not any(extra == c or extra.startswith(c + os.sep) for c in covered):
            paths.append(extra)
    home = os.path.dirname(os.path.dirname(python))
    if not any(home == c or home.startswith(c + os.sep) for c in [*covered, *paths]):
        paths.append(home)
    return paths


class Sandbox:
    """Runs checks (see the module docstring). `allow_process` lets a check run
    without namespaces where they are unavailable (a deviation the caller records);
    `max_concurrent` bounds the jails alive at once in this process; `distributions`
    are what graded code may import besides the standard library (packages.py:
    numpy, as in the references' grading environments; ``()`` for none). `warm`: with
    namespaces, checks run in warm jails (warm.py: a jail per concurrent check,
    reused, forking a fresh process per check); False: a fresh jail per check."""

    _slots_lock = threading.Lock()
    _slots: dict[int, threading.BoundedSemaphore] = {}

    def __init__(
        self,
        allow_process: bool = False,
        max_concurrent: int | None = None,
        distributions: tuple[str, ...] = packages.JAIL_DISTRIBUTIONS,
        warm: bool = True,
    ) -> None:
        self.allow_process = allow_process
        self.warm = warm
        self.python = interpreter()
        self.packages = packages.jail_packages(distributions) if distributions else None
        limit = max_concurrent or max(4, 2 * (os.cpu_count() or 1))
        with Sandbox._slots_lock:
            self._slot = Sandbox._slots.setdefault(limit, threading.BoundedSemaphore(limit))

    # -- isolation -----------------------------------------------------------------

    def isolation(self) -> Isolation:
        """What this machine offers: namespaces, else (where allowed) a plain
        process; otherwise `SandboxUnavailable` saying how to get namespaces."""
        why = namespaces_unavailable(self.python)
        if why is None:
            return "namespaces"
        if not self.allow_process:
            raise SandboxUnavailable(
                f"no sandbox for model-written code here ({why}): {NO_NAMESPACES_HELP}"
            )
        hidden = _unreadable_to_others(self.python) if os.geteuid() == 0 else None
        if hidden is not None:
            # As root, a check runs under a uid of its own, which must read the
            # interpreter's files (pyenv under /root: it cannot).
            raise SandboxUnavailable(
                f"without namespaces a check runs under an unprivileged uid, which cannot "
                f"read the interpreter's {hidden}: install Python where every user can read it"
            )
        return "process"

    # -- one check -----------------------------------------------------------------

    def run(self, job: Job, limits: Limits | None = None) -> Check:
        """Run `job` (a `runner.py` check) in a fresh jail; see the module docstring."""
        limits = limits or Limits()
        mode = self.isolation()
        with self._slot:
            if mode == "namespaces" and self.warm:
                return self._run_warm(job, limits)
            return _run(self.python, mode, job, limits, self.packages)

    def _run_warm(self, job: Job, limits: Limits) -> Check:
        """One check in a warm jail of the pool (see warm.py and pool.py)."""
        global _CODE
        if _CODE is None:
            _CODE = _compiled()
        code = _CODE
        started = time.monotonic()

        def start() -> pool.WarmJail:
            config = {"binds": jail_binds(self.python), "packages": self.packages,
                      "packages_mount": packages.MOUNT_POINT, "code": code, "limits": {}}  # fmt: skip
            try:
                return pool.WarmJail(self.python, _jail_environment(), config,
                                     limits.startup_timeout_s)  # fmt: skip
            except (pool.JailBroken, TimeoutError, OSError) as exc:
                raise SandboxUnavailable(f"the sandbox did not start: {exc}") from None

        jails = pool.pool_for((self.python, self.packages))
        uid = JAIL_UIDS[0] + secrets.randbelow(JAIL_UIDS[1] - JAIL_UIDS[0])
        # Idle jails may have died since their last check (the OOM killer may take several
        # at once): each is discarded and the next taken, ending with a fresh jail, whose
        # failure is the sandbox's. Bounded: the idle list only shrinks here.
        while True:
            warm, fresh = jails.take(start)
            try:
                status, result, detail = warm.run(dict(job), limits, uid)
                break
            except (pool.JailBroken, OSError) as exc:
                jails.discard(warm)
                if str(exc) == "timeout":  # the keeper missed its deadline: the driver's
                    return Check("timeout", {}, "namespaces", time.monotonic() - started,
                                 f"no verdict within {limits.timeout_s:g} s")  # fmt: skip
                if fresh:
                    raise SandboxUnavailable(f"the sandbox failed: {exc}") from None
        if status == "unavailable":
            jails.discard(warm)
            raise SandboxUnavailable(f"the sandbox did not start the check ({detail})")
        jails.give_back(warm)
        return Check(status, result, "namespaces", time.monotonic() - started, detail)  # type: ignore[arg-type]


def _jail_environment() -> dict[str, str]:
    env = allowed_environment("/work", source=os.environ)
    env.update(PATH=JAIL_PATH, TMPDIR="/tmp")
    env.update(packages.THREAD_VARIABLES)
    return env


def _unreadable_to_others(python: str) -> str | None:
    """The first folder on the way to the interpreter's prefix that other users cannot
    enter (None: all can)."""
    for path in {os.path.realpath(sys.base_prefix), os.path.dirname(python)}:
        current = Path(path)
        for folder in [*reversed(current.parents), current]:
            try:
                if not folder.stat().st_mode & 0o001:
                    return str(folder)
            except OSError:
                return str(folder)
    return None


def namespaces_unavailable(python: str | None = None) -> str | None:
    """None when a jail starts here (probed once per process with an empty
    program), else why not."""
    python = python or interpreter()
    with _PROBE_LOCK:
        if python not in _PROBE:
            try:
                check = _run(python, "namespaces", {"kind": "program", "code": "", "tests": ""},
                             Limits(timeout_s=30.0))  # fmt: skip
                _PROBE[python] = None if check.passed else f"the probe check {check.status}"
            except SandboxUnavailable as exc:
                _PROBE[python] = str(exc)
        return _PROBE[python]


def _run(
    python: str, mode: Isolation, job: Job, limits: Limits, packages_dir: str | None = None
) -> Check:
    global _CODE
    if _CODE is None:
        _CODE = _compiled()
    root = tempfile.mkdtemp(prefix="distillery-sandbox-")
    uid = JAIL_UIDS[0] + secrets.randbelow(JAIL_UIDS[1] - JAIL_UIDS[0])
    config = {
        "mode": "jail" if mode == "namespaces" else "process",
        "root": root,
        "binds": jail_binds(python),
        "tmpfs_mb": limits.tmpfs_mb,
        "uid": uid if os.geteuid() == 0 else None,
        "limits": limits.launcher_limits(),
        "job": job,
        "code": _CODE,
        "packages": packages_dir,
        "packages_mount": packages.MOUNT_POINT,
    }
    if mode == "namespaces":
        env = _jail_environment()
    else:
        env = allowed_environment(root, source=os.environ)
        env["TMPDIR"] = root
    env.update(packages.THREAD_VARIABLES)
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and launcher
            [python, "-I", "-S", "-B", "-c", launcher.BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=root,
            close_fds=True,
            start_new_session=True,
        )
    except OSError as exc:
        shutil.rmtree(root, ignore_errors=True)
        raise SandboxUnavailable(f"the sandbox's interpreter did not start: {exc}") from None
    session = _Session(proc, limits, started)
    try:
        data = marshal.dumps(config)
        check = session.drive(len(data).to_bytes(4, "big") + data)
    finally:
        session.end(uid if mode == "process" and os.geteuid() == 0 else None)
        shutil.rmtree(root, ignore_errors=True)
    return Check(
        check.status, check.result, "namespaces" if mode == "namespaces" else "process",
        time.monotonic() - started, check.detail,
    )  # fmt: skip


class _Session:
    """One launcher process: feeds it the configuration, reads its frames against the
    deadlines, and ends it."""

    def __init__(self, proc: subprocess.Popen[bytes], limits: Limits, started: float) -> None:
        self.proc = proc
        self.limits = limits
        self.started = started
        self.init_pid: int | None = None
        self.stderr = bytearray()

    def drive(self, config: bytes) -> Check:
        proc, limits = self.proc, self.limits
        assert proc.stdin and proc.stdout and proc.stderr
        selector = selectors.DefaultSelector()  # epoll/poll: any descriptor number
        pending = memoryview(config)
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        buffer = bytearray()
        received = 0
        began: float | None = None  # when the program's check started
        deadline = self.started + limits.startup_timeout_s
        budget = limits.max_reply_mb * 1024 * 1024
        try:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    if began is None:
                        raise SandboxUnavailable(
                            f"the sandbox did not start within {limits.startup_timeout_s:g} s"
                            + self._stderr_tail()
                        )
                    return Check("timeout", detail=f"no verdict within {limits.timeout_s:g} s")
                events = selector.select(min(left, 1.0))
                for key, _ in events:
                    if key.fileobj is proc.stdin:
                        try:
                            pending = pending[os.write(proc.stdin.fileno(), pending) :]
                        except (BrokenPipeError, OSError):
                            pending = pending[:0]
                        if not pending:
                            selector.unregister(proc.stdin)
                            proc.stdin.close()
                        continue
                    chunk = os.read(key.fd, 1 << 20)
                    if key.fileobj is proc.stderr:
                        if not chunk:
                            selector.unregister(proc.stderr)
                        elif len(self.stderr) < STDERR_KEPT:
                            self.stderr += chunk[: STDERR_KEPT - len(self.stderr)]
                        continue
                    if not chunk:  # every writer of the channel is gone
                        if began is None:
                            raise SandboxUnavailable(
                                "the sandbox exited before starting the check" + self._stderr_tail()
                            )
                        return Check("crashed", detail="the program ended without a verdict")
                    received += len(chunk)
                    if received > budget:
                        if began is None:
                            raise SandboxUnavailable("the sandbox sent too much before starting")
                        return Check(
                            "malformed", detail=f"more than {limits.max_reply_mb} MB sent back"
                        )
                    buffer += chunk
                    for frame in _frames(buffer):
                        outcome = self._frame(frame, began)
                        if outcome == "started":
                            began = time.monotonic()
                            deadline = began + limits.timeout_s
                        elif isinstance(outcome, Check):
                            return outcome
        finally:
            selector.close()

    def _frame(self, frame: bytes | None, began: float | None) -> str | Check | None:
        if frame is None:
            if began is None:
                raise SandboxUnavailable("the sandbox sent a malformed frame before starting")
            return Check("malformed", detail="a malformed frame from the program's process")
        try:
            message = json.loads(frame)
        except (ValueError, RecursionError):
            message = None
        # A frame is JSON from the jail: an object with an "event", or anything else.
        fields: dict[str, Any] = message if isinstance(message, dict) else {}
        event = fields.get("event")
        if began is None:
            if event == "jailed" and isinstance(fields.get("init_pid"), int):
                self.init_pid = fields["init_pid"]
                return None
            if event == "started" and self.init_pid is not None:
                return "started"
            if event == "error":
                raise SandboxUnavailable(
                    f"the sandbox did not start ({str(fields.get('stage'))[:100]}: "
                    f"{str(fields.get('message'))[:500]})"
                )
            raise SandboxUnavailable(f"the sandbox sent {str(message)[:200]} before starting")
        if event == "result" and fields.get("status") in ("passed", "failed", "done"):
            return Check(fields["status"], fields)
        return Check("malformed", detail=f"an unexpected frame {str(message)[:200]}")

    def end(self, uid: int | None) -> None:
        """Kill everything the check started and reap the launcher."""
        if self.init_pid is not None and self.init_pid != self.proc.pid:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.init_pid, signal.SIGKILL)
            # The launcher reaps the jail's PID 1, whose end waits for every process of
            # its namespace: once the launcher is gone, so is all of the jail.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        if uid is not None:
            _kill_uid(uid)
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:  # never: all three are pipes
                with contextlib.suppress(OSError):
                    pipe.close()

    def _stderr_tail(self) -> str:
        text = bytes(self.stderr).decode("utf-8", "replace").strip()
        return f": {text[-1500:]}" if text else ""


def _frames(buffer: bytearray):  # noqa: ANN202 - a generator of complete frames
    """Complete frames at the start of `buffer` (consumed); None for a frame whose
    declared length is absurd (the rest of the buffer is dropped)."""
    while len(buffer) >= HEADER_BYTES:
        size = int.from_bytes(buffer[:HEADER_BYTES], "big")
        if size > 1 << 30:
            del buffer[:]
            yield None
            return
        if len(buffer) < HEADER_BYTES + size:
            return
        frame = bytes(buffer[HEADER_BYTES : HEADER_BYTES + size])
        del buffer[: HEADER_BYTES + size]
        yield frame


def _kill_uid(uid: int) -> None:
    """Every process of `uid` (a check's own, without a PID namespace), killed."""
    for _ in range(50):
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError):
                    if os.stat(f"/proc/{entry}").st_uid == uid:
                        found.append(int(entry))
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
