"""One run per output root (and per embedded Qdrant folder and SQLite tracking file).

Two runs on one output root would play the same episodes twice, race on the ledger and
crash on the embedded Qdrant's or SQLite's own locks only after creating a second MLflow
parent run. So a run takes its locks first, and a second run stops naming the holder.

Every lock is a *lease*: a record of its holder (pid, host, start time, command, a
random token) and a renewal counter that a thread of the holder bumps every
`lease_s / RENEWALS_PER_LEASE` seconds for as long as it holds the lock.

- Holder on this host: its pid says at once whether it lives. A local lock file is
  also `flock`ed for as long as the holder's process lives (the kernel releases it
  however the process dies, SIGKILL included), so a dead run's lock is taken over at
  once (the stale holder is named in a warning) and a live one refuses at once.
- Holder on another host (a new Ray head after the old one's pod was lost, on an
  object store or a shared filesystem, where neither pids nor `flock` can be trusted):
  the contender watches the record. If it is renewed, the holder lives and the contender
  stops naming it. If it stays unchanged for a whole lease (`lease_s`, as measured by
  the contender's own monotonic clock: hosts' wall clocks may disagree by any amount,
  so the record's times are for people, never compared), the holder is dead or hung
  and the contender takes the lock over.
- A holder whose record was taken over while it hung (a stopped process, a frozen VM)
  finds someone else's token at its next renewal: it stops its run at once (the main
  thread gets a signal of its own, `WAKE_SIGNAL`, whose handler `run_locks` installs:
  KeyboardInterrupt, which `run_locks` turns into `LockLost`) instead of writing next to
  the new holder. Not SIGINT itself: a driver started in the background of a script
  inherits SIGINT ignored, and another library may own its handler.

An object store offers no atomic create through pyarrow, so a lock object is written,
then read back after `settle_s`: of two contenders that saw the same expired lease,
the one whose write is not the last one sees the other's token and stops.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from distillery.orchestrator.core.errors import UserError
from distillery.redaction import redact
from distillery.workers.storage import Location

log = logging.getLogger(__name__)
LOCK_NAME = "distillery.lock"
# Ours: a lease long enough that a loaded head node (GC pauses, a slow object store)
# renews it many times over, short enough that a RayJob retry after a lost head waits
# about a minute for the old holder's lease to run out.
LEASE_S = 60.0
RENEWALS_PER_LEASE = 6
# The signal that wakes the main thread when the lease is lost (ours: a real-time signal
# nothing else here uses; its handler is installed and unblocked by `run_locks`).
WAKE_SIGNAL = signal.SIGRTMIN + 3


class LockHeld(UserError):
    """Another run holds the lock; the message names it."""


class LockLost(UserError):
    """This run's lease was taken over while it could not renew it (it hung)."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started_at: float
    command: str
    token: str
    lease_s: float = LEASE_S
    renewals: int = 0
    renewed_at: float = 0.0  # the holder's wall clock: for people, never compared

    @staticmethod
    def me(lease_s: float = LEASE_S) -> Holder:
        now = time.time()
        return Holder(
            os.getpid(),
            socket.gethostname(),
            now,
            redact(" ".join(sys.argv))[:500],
            uuid.uuid4().hex,
            lease_s,
            0,
            now,
        )

    @staticmethod
    def parse(text: str) -> Holder | None:
        try:
            data = json.loads(text)
            return Holder(
                int(data["pid"]),
                str(data["host"]),
                float(data["started_at"]),
                str(data.get("command", "")),
                str(data.get("token", "")),
                float(data.get("lease_s", LEASE_S)),
                int(data.get("renewals", 0)),
                float(data.get("renewed_at", data["started_at"])),
            )
        except (ValueError, TypeError, KeyError):
            return None

    def to_json(self) -> str:
        return json.dumps(
            {
                "pid": self.pid,
                "host": self.host,
                "started_at": self.started_at,
                "started": _when(self.started_at),
                "command": self.command,
                "token": self.token,
                "lease_s": self.lease_s,
                "renewals": self.renewals,
                "renewed_at": self.renewed_at,
                "renewed": _when(self.renewed_at),
            },
            indent=1,
        )

    def renewed(self) -> Holder:
        return replace(self, renewals=self.renewals + 1, renewed_at=time.time())

    @property
    def version(self) -> tuple[str, int]:
        """What changes at every write of the record: its token and renewal count."""
        return (self.token, self.renewals)

    def describe(self) -> str:
        return f"pid {self.pid} on host {self.host}, started {_when(self.started_at)}" + (
            f" ({self.command})" if self.command else ""
        )

    @property
    def alive_here(self) -> bool | None:
        """True/False for a process of this host; None when it runs elsewhere."""
        if self.host != socket.gethostname():
            return None
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # exists, owned by someone else
            return True
        return True


def _when(epoch: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(epoch))


def _poll_s(lease_s: float) -> float:
    return min(1.0, lease_s / (2 * RENEWALS_PER_LEASE))


def await_lease_end(
    read: Callable[[], Holder | None], first: Holder, what: str, where: str
) -> Holder | None:
    """Watch another host's lease until it is renewed (raise LockHeld), released
    (return None) or left unrenewed for a whole lease (return the stale holder)."""
    seen = first.version
    since = time.monotonic()
    while True:
        time.sleep(_poll_s(first.lease_s))
        current = read()
        if current is None:
            return None
        if current.version != seen:
            raise LockHeld(
                f"{what} is in use by another distillery run: {current.describe()}, which "
                f"renewed its lease while this run waited; {where}. Wait for that run to "
                "finish, or use another output_dir."
            )
        if time.monotonic() - since >= first.lease_s:
            return first


class LeaseKeeper:
    """The holder's renewal thread: bumps the record every lease_s/RENEWALS_PER_LEASE
    seconds; when it finds another holder's token there, the lease was lost."""

    def __init__(
        self,
        holder: Holder,
        read: Callable[[], Holder | None],
        write: Callable[[Holder], None],
        what: str,
    ) -> None:
        self.holder = holder
        self._read = read
        self._write = write
        self.what = what
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="distillery-lease", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        interval = self.holder.lease_s / RENEWALS_PER_LEASE
        while not self._stop.wait(interval):
            try:
                current = self._read()
            except Exception as exc:  # a store hiccup: the next renewal tries again
                log.warning("%s: could not read the lock to renew it: %s", self.what, exc)
                continue
            if self._stop.is_set():
                return
            if current is None or current.token != self.holder.token:
                who = current.describe() if current else "nobody (the lock is gone)"
                self.lost = (
                    f"{self.what}: this run's lock lease was taken over by {who} while this "
                    f"run could not renew it for {self.holder.lease_s:.0f} s (it hung); "
                    "stopping so that two runs never write to one output root"
                )
                log.error("%s", self.lost)
                # The main thread wakes from whatever it waits on and the run stops like
                # an interrupted one (run_locks names the reason): by WAKE_SIGNAL where
                # run_locks installed its handler, else by SIGINT.
                wake = WAKE_SIGNAL if signal.getsignal(WAKE_SIGNAL) is _woken else signal.SIGINT
                signal.pthread_kill(threading.main_thread().ident or 0, wake)
                return
            self.holder = self.holder.renewed()
            try:
                self._write(self.holder)
            except Exception as exc:
                log.warning("%s: could not renew the lock: %s", self.what, exc)


class FileLock:
    """A lock file: `flock`ed while its holder lives (a local disk), with a lease in it
    for holders on other hosts (a shared filesystem where `flock` may not reach them)."""

    def __init__(self, path: Path, what: str, lease_s: float = LEASE_S) -> None:
        self.path = path
        self.what = what
        self.lease_s = lease_s
        self._fd: int | None = None
        self._keeper: LeaseKeeper | None = None

    @property
    def lost(self) -> str | None:
        return self._keeper.lost if self._keeper else None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = Holder.me(self.lease_s)
        for _ in range(10):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                text = _read_fd(fd)
                os.close(fd)
                holder = Holder.parse(text)
                who = holder.describe() if holder else "a process that is still starting"
                raise LockHeld(
                    f"{self.what} is in use by another distillery run: {who}; lock file "
                    f"{self.path}. Wait for that run to finish, or use another output_dir."
                ) from None
            # Locked; but the holder before us may have removed the file after we opened
            # it: then we locked a deleted inode and must start again.
            if not self._same_file(fd):
                os.close(fd)
                continue
            stale = Holder.parse(_read_fd(fd))
            if stale is not None and stale.host != me.host:
                # flock does not reach across hosts on every shared filesystem: the
                # holder's lease decides.
                try:
                    stale = await_lease_end(self._read, stale, self.what, f"lock file {self.path}")
                except BaseException:
                    os.close(fd)
                    raise
                if not self._same_file(fd):  # released and removed while we watched
                    os.close(fd)
                    continue
            if stale is not None:
                log.warning(
                    "%s: recovered the lock of a run that is gone (%s)",
                    self.what,
                    stale.describe(),
                )
            self._fd = fd
            self._write(me)
            self._keeper = LeaseKeeper(me, self._read, self._write, self.what)
            self._keeper.start()
            return
        raise LockHeld(f"{self.what}: could not take the lock file {self.path}")

    def _same_file(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def _read(self) -> Holder | None:
        try:
            return Holder.parse(self.path.read_text(errors="replace"))
        except FileNotFoundError:
            return None

    def _write(self, holder: Holder) -> None:
        fd = self._fd
        if fd is None:
            return
        data = holder.to_json().encode()
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
        os.fsync(fd)

    def release(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if not self.lost:
            with contextlib.suppress(OSError):
                os.unlink(self.path)  # while still locked: nobody takes a half-released lock
        os.close(fd)


def _read_fd(fd: int) -> str:
    return os.pread(fd, 65536, 0).decode(errors="replace")


class ObjectLock:
    """A lease object on an object store (no flock, no atomic create): written, then
    read back after `settle_s` to check that it is still ours."""

    def __init__(
        self,
        location: Location,
        what: str,
        lease_s: float = LEASE_S,
        settle_s: float | None = None,
    ) -> None:
        self.location = location
        self.what = what
        self.lease_s = lease_s
        self.settle_s = min(2.0, lease_s / 10) if settle_s is None else settle_s
        self._token: str | None = None
        self._keeper: LeaseKeeper | None = None

    @property
    def lost(self) -> str | None:
        return self._keeper.lost if self._keeper else None

    def _read(self) -> Holder | None:
        try:
            data = self.location.read_bytes()
        except FileNotFoundError:
            return None
        return Holder.parse(data.decode(errors="replace"))

    def _write(self, holder: Holder) -> None:
        self.location.write_bytes(holder.to_json().encode())

    def acquire(self) -> None:
        me = Holder.me(self.lease_s)
        holder = self._read()
        where = f"lock object {self.location}"
        if holder is not None:
            alive = holder.alive_here
            if alive:
                raise LockHeld(
                    f"{self.what} is in use by another distillery run: {holder.describe()}; "
                    f"{where}. Wait for that run to finish, or use another output_dir."
                )
            if alive is None:  # another host: its lease decides
                holder = await_lease_end(self._read, holder, self.what, where)
            if holder is not None:
                log.warning(
                    "%s: recovered the lock of a run that is gone (%s; its lease was not "
                    "renewed for %.0f s)",
                    self.what,
                    holder.describe(),
                    holder.lease_s,
                )
        self._write(me)
        time.sleep(self.settle_s)
        again = self._read()
        if again is None or again.token != me.token:
            who = again.describe() if again else "another run"
            raise LockHeld(f"{self.what} was taken at the same moment by {who}; {where}")
        self._token = me.token
        self._keeper = LeaseKeeper(again, self._read, self._write, self.what)
        self._keeper.start()

    def release(self) -> None:
        if self._keeper is not None:
            self._keeper.stop()
        token, self._token = self._token, None
        if token is None:
            return
        with contextlib.suppress(OSError):
            current = self._read()
            if current is not None and current.token == token:
                self.location.delete()


def lock_for(
    target: Location | Path, what: str, *, beside: bool = False, lease_s: float = LEASE_S
) -> Any:
    """The lock of a folder (a file inside it) or, with `beside`, of a file (next to it)."""
    if isinstance(target, Path) or target.is_local:
        path = Path(target.local_path if isinstance(target, Location) else target)
        lock_path = path.with_name(path.name + "." + LOCK_NAME) if beside else path / LOCK_NAME
        return FileLock(lock_path, what, lease_s)
    return ObjectLock(target / LOCK_NAME, what, lease_s)


def sqlite_path(tracking_uri: str) -> Path | None:
    if not tracking_uri.startswith("sqlite://"):
        return None
    db = tracking_uri.split("://", 1)[1].split("?", 1)[0][1:]
    if not db or db == ":memory:":
        return None
    return Path(db).expanduser().resolve()


def _woken(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt("this run's lock lease was lost")


@contextlib.contextmanager
def _wake_on_lost_lease() -> Iterator[None]:
    """WAKE_SIGNAL raises KeyboardInterrupt in the main thread while the run holds its
    locks (handler installed and the signal unblocked here, whatever the process
    inherited); outside the main thread signals are left alone (the keeper then sends
    SIGINT)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(WAKE_SIGNAL, _woken)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {WAKE_SIGNAL})
    try:
        yield
    finally:
        # The process's own mask and handler again: a caller that had the signal
        # blocked (a test runner, an embedding program) finds it blocked after the run.
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(WAKE_SIGNAL, previous)


@contextlib.contextmanager
def run_locks(
    output_dir: str,
    store_path: str | None,
    store_url: str | None,
    tracking_uri: str,
    lease_s: float = LEASE_S,
) -> Iterator[None]:
    """Hold the output root's lock, the embedded Qdrant folder's (when it lives outside
    the root) and the SQLite tracking file's for the duration of a run."""
    root = Location.of(output_dir)
    locks = [lock_for(root, f"output root {root}", lease_s=lease_s)]
    if store_path and not store_url:
        folder = Path(store_path).expanduser().resolve()
        locks.append(lock_for(folder, f"embedded Qdrant store {folder}", lease_s=lease_s))
    db = sqlite_path(tracking_uri)
    if db is not None:
        locks.append(lock_for(db, f"MLflow SQLite store {db}", beside=True, lease_s=lease_s))
    taken: list[Any] = []
    try:
        for lock in locks:
            lock.acquire()
            taken.append(lock)
        try:
            with _wake_on_lost_lease():
                yield
        except KeyboardInterrupt:
            lost = [lock.lost for lock in taken if lock.lost]
            if lost:
                raise LockLost(lost[0]) from None
            raise
    finally:
        for lock in reversed(taken):
            lock.release()
