"""One run per output root (and per embedded Qdrant folder and SQLite tracking file).

Two runs on one output root would play the same episodes twice, race on the ledger and
crash on the embedded Qdrant's or SQLite's own locks only after creating a second MLflow
parent run. So a run takes its locks first, and a second run stops at once naming the
holder.

A local lock is a file holding the holder's pid, host, start time and command, locked
with `flock` for as long as the run's process lives: the kernel releases it when the
process dies however it dies (SIGKILL included), so a lock left by a dead run is found
unlocked and taken over (the stale holder is named in a warning). On an object store
(no flock) the lock is a JSON object, taken over when its holder is a dead pid of this
host; another host's lock must be removed by hand (the message says where).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distillery.orchestrator.errors import UserError
from distillery.redaction import redact
from distillery.workers.storage import Location

log = logging.getLogger(__name__)
LOCK_NAME = "distillery.lock"


class LockHeld(UserError):
    """Another run holds the lock; the message names it."""


@dataclass(frozen=True)
class Holder:
    pid: int
    host: str
    started_at: float
    command: str
    token: str

    @staticmethod
    def me() -> Holder:
        return Holder(
            os.getpid(),
            socket.gethostname(),
            time.time(),
            redact(" ".join(sys.argv))[:500],
            uuid.uuid4().hex,
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
            },
            indent=1,
        )

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


class FileLock:
    """An flock'ed lock file on a local disk, held until `release()` or process death."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        self.what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = Holder.me()
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
            try:
                same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
            if not same:
                os.close(fd)
                continue
            stale = Holder.parse(_read_fd(fd))
            if stale is not None:
                log.warning(
                    "%s: recovered the lock of a run that is gone (%s)",
                    self.what,
                    stale.describe(),
                )
            os.ftruncate(fd, 0)
            os.pwrite(fd, me.to_json().encode(), 0)
            os.fsync(fd)
            self._fd = fd
            return
        raise LockHeld(f"{self.what}: could not take the lock file {self.path}")

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)  # while still locked: nobody can take a half-released lock
        os.close(fd)


def _read_fd(fd: int) -> str:
    return os.pread(fd, 65536, 0).decode(errors="replace")


class ObjectLock:
    """A best-effort lock object on an object store (no atomic create): written, then
    read back to check that it is ours."""

    def __init__(self, location: Location, what: str) -> None:
        self.location = location
        self.what = what
        self._token: str | None = None

    def acquire(self) -> None:
        me = Holder.me()
        if self.location.exists():
            holder = Holder.parse(self.location.read_bytes().decode(errors="replace"))
            if holder is not None and holder.alive_here is not False:
                raise LockHeld(
                    f"{self.what} is in use by another distillery run: {holder.describe()}; "
                    f"lock object {self.location}. Wait for that run to finish, or use another "
                    "output_dir (if that run is gone, delete the lock object)."
                )
            if holder is not None:
                log.warning(
                    "%s: recovered the lock of a run that is gone (%s)",
                    self.what,
                    holder.describe(),
                )
        self.location.write_bytes(me.to_json().encode())
        again = Holder.parse(self.location.read_bytes().decode(errors="replace"))
        if again is None or again.token != me.token:
            who = again.describe() if again else "another run"
            raise LockHeld(f"{self.what} was taken at the same moment by {who}")
        self._token = me.token

    def release(self) -> None:
        token, self._token = self._token, None
        if token is None:
            return
        with contextlib.suppress(OSError):
            current = Holder.parse(self.location.read_bytes().decode(errors="replace"))
            if current is not None and current.token == token:
                self.location.delete()


def lock_for(target: Location | Path, what: str, *, beside: bool = False) -> Any:
    """The lock of a folder (a file inside it) or, with `beside`, of a file (next to it)."""
    if isinstance(target, Path) or target.is_local:
        path = Path(target.local_path if isinstance(target, Location) else target)
        lock_path = path.with_name(path.name + "." + LOCK_NAME) if beside else path / LOCK_NAME
        return FileLock(lock_path, what)
    return ObjectLock(target / LOCK_NAME, what)


def sqlite_path(tracking_uri: str) -> Path | None:
    if not tracking_uri.startswith("sqlite://"):
        return None
    db = tracking_uri.split("://", 1)[1].split("?", 1)[0][1:]
    if not db or db == ":memory:":
        return None
    return Path(db).expanduser().resolve()


@contextlib.contextmanager
def run_locks(
    output_dir: str, store_path: str | None, store_url: str | None, tracking_uri: str
) -> Iterator[None]:
    """Hold the output root's lock, the embedded Qdrant folder's (when it lives outside
    the root) and the SQLite tracking file's for the duration of a run."""
    root = Location.of(output_dir)
    locks = [lock_for(root, f"output root {root}")]
    if store_path and not store_url:
        folder = Path(store_path).expanduser().resolve()
        locks.append(lock_for(folder, f"embedded Qdrant store {folder}"))
    db = sqlite_path(tracking_uri)
    if db is not None:
        locks.append(lock_for(db, f"MLflow SQLite store {db}", beside=True))
    taken: list[Any] = []
    try:
        for lock in locks:
            lock.acquire()
            taken.append(lock)
        yield
    finally:
        for lock in reversed(taken):
            lock.release()
