"""A warm jail: one jail per worker, a fresh process per check (standard library only).

Starting a jail costs an interpreter's start-up and the jail's mounts on every check;
a warm jail pays them once. The launcher (``mode="warm"``) builds the jail as for one
check (namespaces, the read-only tmpfs root, ``launcher._build_root``) and forks its
PID 1, the *zygote*: it enters the root, imports what checks may use (numpy), says
``ready`` and then reads checks from its stdin, one at a time. It never runs a
program's code. For each check it forks a *keeper*, which:

1. enters new mount and PID namespaces of the check's own, mounts a fresh
   size-limited tmpfs holding the check's ``/work`` (its own uid's, 0700) and ``/tmp``
   (nothing of an earlier check is there: the earlier tmpfs went with its namespace);
2. forks the check's process — PID 1 of that PID namespace, in a session of its own —
   which takes the check's uid (drawn per check) or drops every capability, sets
   ``no_new_privs``, its resource limits and the seccomp filter (`launcher._confine`,
   exactly as a cold jail's check), and runs `runner.run`;
3. relays the check's frames to the driver, each tagged as the program's (``P``: the
   program cannot write a frame the driver reads as the keeper's ``K``), enforces the
   deadline (from ``started``, the check's timeout) and the reply budget, kills the
   check's PID 1 — the kernel then kills every process of its namespace — reaps it and
   says ``ended``.

The driver (`pool.py`) keeps its own deadline past the keeper's: a jail that does not
end a check in time is killed whole and replaced.
"""

from __future__ import annotations

import marshal
import os
import select
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from distillery.workers.sandbox.launcher import (
        CLONE_NEWNS,
        CLONE_NEWPID,
        MS_BIND,
        MS_NODEV,
        MS_NOSUID,
        MS_PRIVATE,
        MS_REC,
        SIGKILL,
        Config,
        SetupError,
        _build_root,
        _check,
        _confine,
        _json_text,
        _libc,
        _mount,
        _namespaces,
    )

TAG_KEEPER, TAG_PROGRAM = b"K", b"P"
STARTED = b'{"event":"started"}'
SCRATCH = "/.scratch"  # the check's tmpfs, whose folders are bound at /work and /tmp


def tagged_writer(fd: int, tag: bytes):  # noqa: ANN201 - a frame writer, like frame_writer
    text, write = _json_text, os.write

    def send(message: dict[str, object]) -> None:
        _write_frame(write, fd, tag + text(message).encode("ascii"))

    return send


def _write_frame(write, fd: int, body: bytes) -> None:  # noqa: ANN001 - os.write
    view = memoryview(len(body).to_bytes(4, "big") + body)
    while view:
        view = view[write(fd, view) :]


def _read_exact(fd: int, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def serve(config: Config, channel: int, namespace: dict[str, Any]) -> None:
    """The launcher of a warm jail: build it, fork the zygote, wait for it."""
    send = tagged_writer(channel, TAG_KEEPER)
    try:
        user_namespace = _namespaces(config)
        uid = os.geteuid() if user_namespace else 0
        _build_root(config, uid, uid)
        os.makedirs(config["root"] + SCRATCH)
    except (SetupError, OSError) as exc:
        send({"event": "error", "stage": getattr(exc, "stage", "jail"), "message": str(exc)[:2000]})
        os._exit(2)
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_write)
        os.read(go_read, 1)
        os.close(go_read)
        _zygote(config, channel, namespace, user_namespace)
    os.close(go_read)
    send({"event": "jailed", "init_pid": pid, "user_namespace": user_namespace})
    os.write(go_write, b"x")
    os.close(go_write)
    os.close(channel)
    os._exit(0 if os.waitpid(pid, 0)[1] == 0 else 1)


def _zygote(config: Config, channel: int, namespace: dict[str, Any], user_namespace: bool) -> None:
    send = tagged_writer(channel, TAG_KEEPER)
    try:
        os.chroot(config["root"])
        os.chdir("/")
        _libc.prctl(1, SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG: ends with its launcher
        if config.get("packages"):
            sys.path.append(config["packages_mount"])
        for name in config.get("preload", ()):
            try:  # noqa: SIM105 - contextlib costs an import
                __import__(name)  # numpy: a check's import then costs nothing
            except Exception:  # noqa: BLE001 - a check that imports it sees the error
                pass
    except BaseException as exc:  # noqa: BLE001
        send({"event": "error", "stage": "zygote", "message": str(exc)[:2000]})
        os._exit(2)
    send({"event": "ready"})
    while True:
        header = _read_exact(0, 4)
        if header is None:
            os._exit(0)  # the driver closed the jail
        body = _read_exact(0, int.from_bytes(header, "big"))
        if body is None:
            os._exit(0)
        pid = os.fork()
        if pid == 0:
            _keeper(marshal.loads(body), channel, namespace, user_namespace)
        os.waitpid(pid, 0)


def _keeper(
    check: dict[str, Any], channel: int, namespace: dict[str, Any], user_namespace: bool
) -> None:
    send = tagged_writer(channel, TAG_KEEPER)
    uid = os.geteuid() if user_namespace else int(check["uid"])
    try:
        _check(_libc.unshare(CLONE_NEWNS | CLONE_NEWPID), "unshare (check)")
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
        size = int(check["tmpfs_mb"])
        _mount("tmpfs", SCRATCH, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size}m,mode=0755")
        os.makedirs(SCRATCH + "/work")
        os.chown(SCRATCH + "/work", uid, uid)
        os.chmod(SCRATCH + "/work", 0o700)
        os.makedirs(SCRATCH + "/tmp")
        os.chmod(SCRATCH + "/tmp", 0o1777)
        _mount(SCRATCH + "/work", "/work", None, MS_BIND)
        _mount(SCRATCH + "/tmp", "/tmp", None, MS_BIND)
        read_end, write_end = os.pipe()
    except BaseException as exc:  # noqa: BLE001 - the sandbox's failure, not the program's
        send(
            {"event": "error", "stage": getattr(exc, "stage", "check"), "message": str(exc)[:2000]}
        )
        send({"event": "ended"})
        os._exit(2)
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        _check_process(check, uid, user_namespace, write_end, namespace)
    os.close(write_end)
    outcome = _relay(read_end, channel, check)
    try:  # noqa: SIM105
        os.kill(pid, SIGKILL)  # PID 1 of the check's namespace: all of it goes
    except OSError:
        pass
    os.waitpid(pid, 0)
    if outcome:
        send({"event": outcome})
    send({"event": "ended"})
    os._exit(0)


def _check_process(check: dict[str, Any], uid: int, user_namespace: bool, channel: int,
                   namespace: dict[str, Any]) -> None:  # fmt: skip
    try:
        os.setsid()
        os.chdir("/work")
        _confine(uid, user_namespace, check["limits"], channel)
    except BaseException as exc:  # noqa: BLE001
        try:  # noqa: SIM105
            _write_frame(os.write, channel, b'{"event":"error","stage":"confine","message":'
                         + _json_text(str(exc)[:2000]).encode("ascii") + b"}")  # fmt: skip
        except OSError:
            pass
        os._exit(2)
    code = 0
    try:
        namespace["run"](check["job"], namespace["frame_writer"](channel))
    except BaseException:  # noqa: BLE001 - the program's doing: no verdict
        code = 1
    os._exit(code)


def _relay(fd: int, channel: int, check: dict[str, Any]) -> str:
    """Forward the check's frames, tagged, until its verdict, its end, its deadline or
    its budget; returns what ended it when the keeper must say so ("" otherwise)."""
    deadline = time.monotonic() + float(check["startup_s"])
    budget = int(check["max_reply"])
    started = False
    buffer = bytearray()
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "timeout" if started else "no_start"
        if not select.select([fd], [], [], left)[0]:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return ""  # every writer is gone: the driver sees no verdict
        budget -= len(chunk)
        if budget < 0:
            return "overflow"
        buffer += chunk
        while len(buffer) >= 4:
            size = int.from_bytes(buffer[:4], "big")
            if size > 1 << 30:
                return "garbled"
            if len(buffer) < 4 + size:
                break
            frame = bytes(buffer[4 : 4 + size])
            del buffer[: 4 + size]
            _write_frame(os.write, channel, TAG_PROGRAM + frame)
            if started or frame != STARTED:
                return ""  # the verdict (or anything else after start): the driver decides
            started = True
            deadline = time.monotonic() + float(check["timeout_s"])
