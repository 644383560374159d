"""Builds the jail and starts the check in it (standard library only).

Started by the driver (`jail.py`) as ``python -I -S -B -c BOOTSTRAP`` with an
allow-listed environment, in its own session; the bootstrap reads one marshalled
configuration from stdin, executes the code of this file, `values.py` and
`runner.py` (compiled by the driver), and calls `main(config)`. Frames (4-byte length, JSON) go back on the
descriptor that was stdout.

``mode="jail"`` (the default; needs root, or unprivileged user namespaces):

1. new namespaces: network (not even its loopback is up), mount, PID, IPC, UTS; as a user that is not root, a user namespace first (the user's own uid is the
   only one mapped);
2. a fresh, size-limited tmpfs as the new root, holding only read-only binds of what
   the interpreter needs (``/usr``, ``/lib*``, ``/bin``, the interpreter's prefix),
   ``/dev/null``-like devices, a private ``/tmp`` and the working directory
   ``/work``: no project file, no home, no ``/proc``, no other process;
3. a fork: the child is PID 1 of the new PID namespace, so when it ends, every
   process it started ends with it; the launcher reports the child's PID (as the
   driver sees it) in the ``jailed`` frame, and the driver kills it at the deadline;
4. in the child: chroot, an unprivileged uid of its own (root) or every capability
   dropped (user namespace), no new privileges, resource limits (CPU time, address
   space, open files, processes, file size, no core), then `runner.run`.

``mode="process"`` (only where the user allowed it: no namespaces here): a temporary
working directory, the same resource limits (the process count only under a uid of
its own), and the runner; no network or filesystem isolation.

A failure before the ``jailed`` frame is an ``error`` frame naming the stage: the
sandbox did not start (an infrastructure error, never the program's).
"""

from __future__ import annotations

import ctypes
import os
import resource
import sys
from _json import encode_basestring_ascii

# The launcher starts for every check: it imports only what is built in or a small C
# module (no `json`, `re`, `subprocess`: tens of milliseconds each on a loaded
# machine; nor `typing`: its constant is False). Its configuration arrives
# marshalled (`jail._run` writes it: plain data, read here as such); its frames
# leave as JSON written by `_json_text`.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from distillery.workers.sandbox.seccomp import install_seccomp
    from distillery.workers.sandbox.warm import serve

    Config = dict[str, Any]
    Send = Callable[[dict[str, object]], None]

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 24, 38
SIGKILL = 9
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
DEVICES = ("null", "zero", "random", "urandom")

_libc = ctypes.CDLL(None, use_errno=True)  # the interpreter's own libc


class SetupError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage


def _check(result: int, stage: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise SetupError(stage, f"{os.strerror(errno)} (errno {errno})")


def _json_text(value: object) -> str:
    """`value` (plain data: what `values.encode` makes, and str-keyed dicts of it) as
    ASCII JSON."""
    # Exact types (`type(value) is`, which the checker narrows `value` by): an
    # instance of a subclass is written as its type's name.
    if value is None:
        return "null"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) is int:
        return int.__repr__(value)
    if type(value) is float:
        return float.__repr__(value) if value == value and value not in (_INF, -_INF) else "null"
    if type(value) is str:
        return encode_basestring_ascii(value)
    if type(value) is list or type(value) is tuple:
        return "[" + ",".join([_json_text(v) for v in value]) + "]"
    if type(value) is dict:
        return "{" + ",".join([encode_basestring_ascii(str(k)) + ":" + _json_text(v)
                               for k, v in value.items()]) + "}"  # fmt: skip
    return encode_basestring_ascii(f"<{type(value).__name__}>")


_INF = float("inf")


def frame_writer(fd: int) -> Send:
    """`send(message)`: one frame on `fd`, with the functions it needs bound now, so a
    program that replaces them later does not change how frames are written."""
    text, write = _json_text, os.write

    def send(message: dict[str, object]) -> None:
        body = text(message).encode("ascii")
        view = memoryview(len(body).to_bytes(4, "big") + body)
        while view:
            view = view[write(fd, view) :]

    return send


def _mount(
    source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None
) -> None:
    _check(
        _libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        f"mount {source or fstype} on {target}",
    )


def _write(path: str, text: str) -> None:
    with open(path, "w") as handle:
        handle.write(text)


def _namespaces(config: Config) -> bool:
    """Enter the new namespaces; True when a user namespace was needed."""
    flags = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    if os.geteuid() == 0:
        _check(_libc.unshare(flags), "unshare")
        return False
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc.unshare(flags | CLONE_NEWUSER), "unshare (user namespace)")
    try:
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    except OSError as exc:
        raise SetupError("user namespace id maps", str(exc)) from None
    return True


def _build_root(config: Config, uid: int, gid: int) -> str:
    root = config["root"]
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    size = int(config.get("tmpfs_mb", 64))
    _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, f"size={size}m,mode=0755")
    for path in config["binds"]:
        _bind(path, root)
    if config.get("packages"):  # packages.py's folder, at its mount point
        _bind(config["packages"], root, config["packages_mount"])
    os.makedirs(root + "/dev", exist_ok=True)
    for device in DEVICES:
        source = "/dev/" + device
        if os.path.exists(source):
            open(root + source, "w").close()
            _mount(source, root + source, None, MS_BIND)
    os.makedirs(root + "/tmp")
    os.chmod(root + "/tmp", 0o1777)
    os.makedirs(root + "/work")
    os.chown(root + "/work", uid, gid)
    os.chmod(root + "/work", 0o700)
    return root


def _bind(path: str, root: str, inside: str | None = None) -> None:
    """`path` of the host at the same place in the jail (or at `inside`), read-only
    (a symbolic link is recreated as the same link)."""
    target = root + (inside or path)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if os.path.islink(path):
        if not os.path.lexists(target):
            os.symlink(os.readlink(path), target)
        return
    if os.path.isdir(path):
        os.makedirs(target, exist_ok=True)
    elif os.path.isfile(path):
        open(target, "w").close()
    else:
        return
    _mount(path, target, None, MS_BIND | MS_REC)
    _mount(None, target, None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def _drop_capabilities() -> None:
    """No capability left, in the bounding set either (a user namespace's creator
    holds them all inside it)."""
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break  # past the last capability this kernel knows
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(_libc.capset(ctypes.byref(header), data), "capset")


def _limits(limits: dict[str, int], processes: bool) -> None:
    pairs = [
        (resource.RLIMIT_CPU, limits.get("cpu_s")),
        (resource.RLIMIT_AS, limits.get("memory_bytes")),
        (resource.RLIMIT_NOFILE, limits.get("open_files")),
        (resource.RLIMIT_FSIZE, limits.get("file_bytes")),
        (resource.RLIMIT_CORE, 0),
    ]
    if processes:
        pairs.append((resource.RLIMIT_NPROC, limits.get("processes")))
    for which, value in pairs:
        if value is not None:
            value = int(value)
            soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(which, (value, value))


def _quiet_stdin() -> None:
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def _close_other_fds(keep: int) -> None:
    for fd in range(3, 1024):
        if fd != keep:
            try:  # noqa: SIM105 - contextlib costs an import on every check
                os.close(fd)
            except OSError:
                pass


def _start_check(config: Config, channel: int, namespace: dict[str, Any]) -> None:
    send = frame_writer(channel)
    if config.get("packages"):  # importable after the standard library, never before it
        sys.path.append(config["packages_mount"] if config.get("mode") == "jail"
                        else config["packages"])  # fmt: skip
    namespace["run"](config["job"], send)


def _child(
    config: Config, channel: int, namespace: dict[str, Any], user_namespace: bool, go: int
) -> None:
    """PID 1 of the jail: confine, drop privileges, run the check; never returns."""
    code = 0
    try:
        os.read(go, 1)  # the launcher has sent `jailed` (frames keep their order)
        os.close(go)
        root = config["root"]
        os.chroot(root)
        os.chdir("/work")
        _confine(int(config["uid"]), user_namespace, config["limits"], channel)
    except BaseException as exc:  # noqa: BLE001 - said to the driver: the jail did not start
        _report(channel, "confine", exc)
        os._exit(2)
    try:
        _start_check(config, channel, namespace)
    except BaseException:  # noqa: BLE001 - the program's doing, seen by the driver as no verdict
        code = 1
    os._exit(code)


def _confine(uid: int, user_namespace: bool, limits: dict[str, int], channel: int) -> None:
    """The check's process, in the jail: no privilege (a uid of its own as root, every
    capability dropped in a user namespace), no new privileges, its resource limits,
    no descriptor but the channel, then the seccomp filter (seccomp.py's)."""
    if user_namespace:
        _drop_capabilities()
    else:
        _drop_bounding_set()
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # from root to a uid of its own: every capability goes
    _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    _check(_libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "pdeathsig")
    _limits(limits, processes=True)
    _quiet_stdin()
    _close_other_fds(channel)
    install_seccomp()  # the last step of setup


def _drop_bounding_set() -> None:
    for cap in range(64):
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            break


def _report(channel: int, stage: str, exc: BaseException) -> None:
    try:  # noqa: SIM105 - contextlib costs an import on every check
        frame_writer(channel)({"event": "error", "stage": stage, "message": str(exc)[:2000]})
    except OSError:
        pass


def _jail(config: Config, channel: int, namespace: dict[str, Any]) -> None:
    try:
        user_namespace = _namespaces(config)  # its loopback stays down: no network at all
        uid = os.geteuid() if user_namespace else int(config["uid"])
        gid = os.getegid() if user_namespace else int(config["uid"])
        _build_root(config, uid, gid)
        if user_namespace:
            config["uid"] = uid
    except SetupError as exc:
        _report(channel, exc.stage, exc)
        os._exit(2)
    except OSError as exc:
        _report(channel, "jail", exc)
        os._exit(2)
    go_read, go_write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(go_write)
        _child(config, channel, namespace, user_namespace, go_read)
    os.close(go_read)
    send = frame_writer(channel)
    send({"event": "jailed", "init_pid": pid, "isolation": "namespaces",
          "user_namespace": user_namespace})  # fmt: skip
    os.write(go_write, b"x")
    os.close(go_write)
    os.close(channel)
    _, status = os.waitpid(pid, 0)
    os._exit(0 if status == 0 else 1)


def _process(config: Config, channel: int, namespace: dict[str, Any]) -> None:
    """No namespaces (allowed by the user): limits and a working directory only."""
    try:
        os.chdir(config["root"])
        own_uid = os.geteuid() == 0 and config.get("uid") is not None
        if own_uid:
            uid = int(config["uid"])
            os.chown(config["root"], uid, uid)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        _libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        _limits(config["limits"], processes=own_uid)
        _quiet_stdin()
        _close_other_fds(channel)
        install_seccomp()
    except BaseException as exc:  # noqa: BLE001
        _report(channel, "confine", exc)
        os._exit(2)
    frame_writer(channel)({"event": "jailed", "init_pid": os.getpid(), "isolation": "process"})
    try:
        _start_check(config, channel, namespace)
    except BaseException:  # noqa: BLE001
        os._exit(1)
    os._exit(0)


def main(config: Config, namespace: dict[str, Any]) -> None:
    channel = os.dup(1)
    if config.get("mode", "jail") == "warm":
        serve(config, channel, namespace)  # warm.py's
    elif config.get("mode", "jail") == "jail":
        _jail(config, channel, namespace)
    else:
        _process(config, channel, namespace)


# Run by the driver as `python -I -S -B -c BOOTSTRAP`: the configuration on stdin
# (4 bytes of length, then marshalled by the same interpreter; a warm jail reads its
# checks after it on the same descriptor, so nothing is read ahead) holds the compiled code of values.py, runner.py
# and this file, executed in one namespace.
BOOTSTRAP = """
import marshal, os
def read(size):
    data = b""
    while len(data) < size:
        chunk = os.read(0, size - len(data))
        if not chunk:
            raise SystemExit("the configuration was cut short")
        data += chunk
    return data
config = marshal.loads(read(int.from_bytes(read(4), "big")))
namespace = {"__name__": "distillery_sandbox"}
for code in config.pop("code"):
    exec(code, namespace)
namespace["main"](config, namespace)
"""

if __name__ == "__main__":  # pragma: no cover - run through BOOTSTRAP
    sys.exit("run through jail.py")
