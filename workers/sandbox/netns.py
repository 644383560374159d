"""A command started without network: in a network namespace of its own.

For processes that run model-influenced code but need the host's files (an isolated
world in its venv, the math grader): `without_network(argv)` is a command line that
enters a new network namespace (as root; otherwise a user namespace first, mapping the
user's own uid to itself), brings its loopback up and then executes `argv` in it. The
process and everything it starts can talk to themselves over 127.0.0.1 and reach
nothing else. `network_isolation_unavailable()` says, once per interpreter, whether
this works here (and why not).

`EXEC` runs as ``python -I -S -c EXEC ARGV...``: standard library only.
"""

from __future__ import annotations

import subprocess
import threading

from distillery.workers.sandbox.environment import allowed_environment

# Exit status of the wrapper when it cannot isolate (it then runs nothing).
UNAVAILABLE_EXIT = 97

EXEC = r"""
import ctypes, ctypes.util, fcntl, os, socket, struct, sys
libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
CLONE_NEWNET, CLONE_NEWUSER = 0x40000000, 0x10000000
def fail(what):
    errno = ctypes.get_errno()
    sys.stderr.write("distillery-netns: %s: %s\n" % (what, os.strerror(errno) if errno else "failed"))
    sys.stderr.flush()
    os._exit(97)
uid, gid = os.geteuid(), os.getegid()
if uid == 0:
    if libc.unshare(CLONE_NEWNET) != 0:
        fail("unshare(CLONE_NEWNET)")
else:
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
        fail("unshare(CLONE_NEWUSER|CLONE_NEWNET)")
    try:
        for path, text in (("setgroups", "deny"), ("uid_map", "%d %d 1" % (uid, uid)),
                           ("gid_map", "%d %d 1" % (gid, gid))):
            with open("/proc/self/" + path, "w") as handle:
                handle.write(text)
    except OSError as exc:
        sys.stderr.write("distillery-netns: id maps: %s\n" % exc)
        os._exit(97)
try:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", fcntl.ioctl(sock, 0x8913, request))[1]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))
except OSError as exc:
    sys.stderr.write("distillery-netns: loopback: %s\n" % exc)
    os._exit(97)
os.execv(sys.argv[1], sys.argv[1:])
"""

_PROBED: dict[str, str | None] = {}
_LOCK = threading.Lock()


def without_network(argv: list[str], python: str) -> list[str]:
    """`argv`, started in a network namespace of its own by `python` (any Python 3
    interpreter: the wrapper needs the standard library only)."""
    return [python, "-I", "-S", "-c", EXEC, *argv]


def network_isolation_unavailable(python: str) -> str | None:
    """None when `without_network` works with `python` here (probed once), else why
    not: the wrapper's own words."""
    with _LOCK:
        if python not in _PROBED:
            probe = without_network([python, "-I", "-S", "-c", _PROBE_CODE], python)
            try:
                done = subprocess.run(  # noqa: S603 - our own interpreter and code
                    probe,
                    capture_output=True,
                    text=True,
                    timeout=60,
                    env=allowed_environment("/nonexistent"),
                    check=False,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                _PROBED[python] = f"the network-isolation probe did not run: {exc}"
            else:
                if done.returncode == 0 and done.stdout.strip() == "isolated":
                    _PROBED[python] = None
                else:
                    said = (done.stderr or done.stdout).strip().splitlines()
                    _PROBED[python] = said[-1] if said else f"exit status {done.returncode}"
        return _PROBED[python]


# Inside the namespace there is no interface but the loopback.
_PROBE_CODE = "import socket; print('isolated' if [n for _, n in socket.if_nameindex()] == ['lo'] else 'not isolated')"
