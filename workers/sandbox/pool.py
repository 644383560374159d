"""The driver's side of warm jails (`warm.py`): a pool of them per process, a check
at a time on each.

`WarmJail.run` writes one check to the jail's zygote and reads the frames back:
the keeper's (tagged ``K``: ``error``, ``timeout``, ``overflow``, ``ended``) and the
program's (``P``: ``started``, then its verdict, judged as a cold check's). The
driver's own deadline (the check's timeout plus `GRACE_S`) backs the keeper's: a jail
that overruns it, or breaks its protocol in any way, is killed whole (its PID 1; the
kernel ends the rest) and never reused.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import marshal
import os
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Any

from distillery.workers.sandbox import launcher

GRACE_S = 10.0  # past the keeper's deadline, before the driver kills the jail
PRELOAD = ("numpy",)  # imported once by the zygote (when the jail offers it)
JAIL_TMPFS_MB = 4  # the jail's root: mount points only (a check gets a tmpfs of its own)


class JailBroken(Exception):  # noqa: N818 - the pool's signal to discard a jail
    """The jail did not behave: kill it and start another."""


class WarmJail:
    """One warm jail (a launcher in ``warm`` mode); not thread-safe: the pool hands it
    to one thread at a time."""

    def __init__(self, python: str, env: dict[str, str], config: dict[str, Any],
                 startup_timeout_s: float) -> None:  # fmt: skip
        self.root = tempfile.mkdtemp(prefix="distillery-sandbox-")
        self.init_pid: int | None = None
        self.stderr = bytearray()
        self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and launcher
            [python, "-I", "-S", "-B", "-c", launcher.BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=self.root,
            close_fds=True,
            start_new_session=True,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.proc.stdout, selectors.EVENT_READ)
        self.selector.register(self.proc.stderr, selectors.EVENT_READ)
        self.buffer = bytearray()
        try:
            self._send({**config, "root": self.root, "mode": "warm", "tmpfs_mb": JAIL_TMPFS_MB,
                        "preload": PRELOAD if config.get("packages") else ()})  # fmt: skip
            deadline = time.monotonic() + startup_timeout_s
            jailed = self._next(deadline)
            if jailed[:1] != b"K" or not isinstance(_event(jailed).get("init_pid"), int):
                raise JailBroken(f"the jail sent {jailed[:200]!r} first")
            self.init_pid = _event(jailed)["init_pid"]
            ready = _event(self._next(deadline))
            if ready.get("event") != "ready":
                raise JailBroken(f"the jail did not start ({ready})")
        except BaseException:
            self.close()
            raise

    def _send(self, data: dict[str, Any]) -> None:
        assert self.proc.stdin
        body = marshal.dumps(data)
        self.proc.stdin.write(len(body).to_bytes(4, "big") + body)
        self.proc.stdin.flush()

    def _next(self, deadline: float) -> bytes:
        """The next frame (tag first), reading until `deadline`."""
        while True:
            if len(self.buffer) >= 4:
                size = int.from_bytes(self.buffer[:4], "big")
                if size > 1 << 30:
                    raise JailBroken("a frame of absurd length")
                if len(self.buffer) >= 4 + size:
                    frame = bytes(self.buffer[4 : 4 + size])
                    del self.buffer[: 4 + size]
                    return frame
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for key, _ in self.selector.select(min(left, 1.0)):
                chunk = os.read(key.fd, 1 << 20)
                if key.fileobj is self.proc.stderr:
                    if len(self.stderr) < 8000:
                        self.stderr += chunk[: 8000 - len(self.stderr)]
                    continue
                if not chunk:
                    raise JailBroken("the jail ended" + self.stderr_tail())
                self.buffer += chunk

    def stderr_tail(self) -> str:
        text = bytes(self.stderr).decode("utf-8", "replace").strip()
        return f": {text[-1500:]}" if text else ""

    def run(self, job: dict[str, Any], limits: Any, uid: int) -> tuple[str, dict[str, Any], str]:
        """(status, verdict frame, detail) of one check: status ``started-none`` when
        the sandbox failed before the program started, else what `jail.Check` takes.
        Raises JailBroken (the check's outcome is then decided by the caller)."""
        self._send({
            "job": job, "limits": limits.launcher_limits(), "uid": uid,
            "tmpfs_mb": limits.tmpfs_mb, "timeout_s": limits.timeout_s,
            "startup_s": limits.startup_timeout_s, "max_reply": limits.max_reply_mb << 20,
        })  # fmt: skip
        deadline = time.monotonic() + limits.startup_timeout_s + GRACE_S
        started = False
        outcome: tuple[str, dict[str, Any], str] | None = None
        while True:
            try:
                frame = self._next(deadline)
            except TimeoutError:
                raise JailBroken("timeout" if started else "no start") from None
            tag, message = frame[:1], _event(frame)
            event = message.get("event")
            if tag == b"K":
                if event == "ended":
                    if outcome is not None:
                        return outcome
                    if not started:
                        return "unavailable", {}, "the check's process ended before starting"
                    return "crashed", {}, "the program ended without a verdict"
                if outcome is not None:
                    continue  # the keeper's word after the verdict: the verdict stands
                if event == "error":
                    outcome = ("unavailable", {}, f"{str(message.get('stage'))[:100]}: "
                               f"{str(message.get('message'))[:500]}")  # fmt: skip
                elif event == "timeout":
                    outcome = ("timeout", {}, f"no verdict within {limits.timeout_s:g} s")
                elif event == "no_start":
                    outcome = ("unavailable", {}, "the check did not start in time")
                elif event in ("overflow", "garbled"):
                    outcome = ("malformed", {}, f"more than {limits.max_reply_mb} MB sent back"
                               if event == "overflow" else "a garbled frame")  # fmt: skip
                continue
            if tag != b"P":
                raise JailBroken(f"a frame with tag {tag!r}")
            if outcome is not None:
                continue
            if not started:
                if event == "started":
                    started = True
                    deadline = time.monotonic() + limits.timeout_s + GRACE_S
                    continue
                detail = message.get("message") if event == "error" else frame[:200]
                outcome = ("unavailable", {}, f"the check's process sent {str(detail)[:500]}")
                continue
            if event == "result" and message.get("status") in ("passed", "failed", "done"):
                outcome = (str(message["status"]), message, "")
            else:
                outcome = ("malformed", {}, f"an unexpected frame {str(message)[:200]}")

    def close(self) -> None:
        """Kill the jail and everything in it; remove its folder."""
        if self.init_pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(self.init_pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self.selector.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        shutil.rmtree(self.root, ignore_errors=True)


def _event(frame: bytes) -> dict[str, Any]:
    try:
        message = json.loads(frame[1:])
    except (ValueError, RecursionError):
        return {}
    return message if isinstance(message, dict) else {}


class Pool:
    """Idle warm jails of one configuration, taken by one check at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[WarmJail] = []
        self.all: set[WarmJail] = set()

    def take(self, start: Any) -> tuple[WarmJail, bool]:
        """An idle jail, else a fresh one from `start()`; True when fresh."""
        with self.lock:
            if self.idle:
                return self.idle.pop(), False
        jail = start()
        with self.lock:
            self.all.add(jail)
        return jail, True

    def give_back(self, jail: WarmJail) -> None:
        with self.lock:
            self.idle.append(jail)

    def discard(self, jail: WarmJail) -> None:
        with self.lock:
            self.all.discard(jail)
        jail.close()

    def close(self) -> None:
        with self.lock:
            jails, self.all, self.idle = list(self.all), set(), []
        for jail in jails:
            jail.close()


POOLS: dict[tuple[Any, ...], Pool] = {}
_POOLS_LOCK = threading.Lock()


def pool_for(key: tuple[Any, ...]) -> Pool:
    with _POOLS_LOCK:
        if key not in POOLS:
            POOLS[key] = Pool()
        return POOLS[key]


@atexit.register
def close_all() -> None:
    """Every warm jail of this process, ended (also at exit)."""
    with _POOLS_LOCK:
        pools = list(POOLS.values())
    for pool in pools:
        pool.close()
