"""Inside the jail, a seccomp filter denies what graded code never needs: a program
that tries each denied call gets EPERM (ENOSYS for clone3) and cannot make a
namespace, mount, load BPF, trace, ...; a program that forks, starts threads and
a subprocess still passes."""

from __future__ import annotations

import os

import pytest

from distillery.workers.sandbox import seccomp
from distillery.workers.sandbox.jail import Limits

QUICK = Limits(timeout_s=20.0)
MACHINE = os.uname().machine

# Each denied call, tried with arguments that would do something without the filter
# (or fail with another errno than EPERM): the program prints the errno it got.
TRIES = {
    "unshare": "(0x10000000,)",  # CLONE_NEWUSER: allowed to an unprivileged user elsewhere
    "setns": "(0, 0)",
    "mount": "(b'none', b'/tmp', b'tmpfs', 0, None)",
    "umount2": "(b'/tmp', 0)",
    "pivot_root": "(b'/tmp', b'/tmp')",
    "chroot": "(b'/tmp',)",
    "bpf": "(0, None, 0)",
    "keyctl": "(0, 0, 0, 0, 0)",
    "add_key": "(b'user', b'k', b'v', 1, -3)",
    "request_key": "(b'user', b'k', None, -3)",
    "userfaultfd": "(0,)",
    "io_uring_setup": "(8, ctypes.create_string_buffer(120))",
    "ptrace": "(0, 0, 0, 0)",  # PTRACE_TRACEME
    "perf_event_open": "(ctypes.create_string_buffer(128), 0, -1, -1, 0)",
    "process_vm_readv": "(1, None, 0, None, 0, 0)",
    "fsopen": "(b'tmpfs', 0)",
    "open_tree": "(-100, b'/tmp', 1)",
    "clone3": "(ctypes.create_string_buffer(88), 88)",
}


def _try(name: str, args: str) -> str:
    number = seccomp.TABLES[MACHINE][1][name]
    return (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"rc = libc.syscall({number}, *{args})\n"
        "print(rc, ctypes.get_errno())\n"
    )


pytestmark = pytest.mark.skipif(MACHINE not in seccomp.TABLES, reason="no seccomp table here")


@pytest.mark.parametrize("name", sorted(TRIES))
def test_each_denied_call_fails_with_eperm(sandbox, name, leaves_nothing):
    check = sandbox.run({"kind": "program", "code": _try(name, TRIES[name]), "tests": ""}, QUICK)
    assert check.passed, check.summary
    rc, errno = check.result["output"].split()
    expected = 38 if name == "clone3" else 1  # ENOSYS: the C library falls back to clone
    assert (int(rc), int(errno)) == (-1, expected), name


def test_clone_with_a_namespace_flag_is_denied_and_a_plain_fork_is_not(sandbox, leaves_nothing):
    code = (
        "import ctypes, os, signal\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        # clone(CLONE_NEWUSER|SIGCHLD, NULL, ...): the raw call, as an escape would make it
        f"rc = libc.syscall({seccomp.TABLES[MACHINE][1]['clone']}, 0x10000000 | 17, 0, 0, 0, 0)\n"
        "print(rc, ctypes.get_errno())\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(7)\n"
        "print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))\n"
    )
    check = sandbox.run({"kind": "program", "code": code, "tests": ""}, QUICK)
    assert check.passed, check.summary
    denied, forked = check.result["output"].splitlines()
    assert denied.split() == ["-1", "1"] and forked == "7"


def test_ordinary_graded_code_still_runs(sandbox, leaves_nothing):
    code = (
        "import threading, subprocess, sys, tempfile, multiprocessing\n"
        "out = []\n"
        "t = threading.Thread(target=lambda: out.append(sum(range(10))))\n"
        "t.start(); t.join()\n"
        "r = subprocess.run([sys.executable, '-I', '-S', '-c', 'print(6 * 7)'],\n"
        "                   capture_output=True, text=True)\n"
        "with tempfile.TemporaryFile() as f:\n    f.write(b'x')\n"
        "def f():\n    return out[0], r.stdout.strip()\n"
    )
    check = sandbox.run({"kind": "program", "code": code, "tests": "assert f() == (45, '42')\n"},
                        QUICK)  # fmt: skip
    assert check.passed, check.summary


def test_another_abi_is_killed(sandbox, leaves_nothing):
    if MACHINE != "x86_64":
        pytest.skip("x32 calls exist on x86_64 only")
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall(0x40000000 | 39)\n"  # getpid through the x32 table
        "print('survived')\n"
    )
    check = sandbox.run({"kind": "program", "code": code, "tests": ""}, QUICK)
    assert not check.passed and check.status == "crashed"


def test_personality_and_socket_families_docker_refuses_are_refused(sandbox, leaves_nothing):
    """personality(READ_IMPLIES_EXEC | ADDR_NO_RANDOMIZE) and AF_VSOCK / AF_PACKET /
    netlink other than route sockets are refused (EPERM), as under Docker's default
    profile; the persona query and the route netlink socket the C library uses are not."""
    numbers = seccomp.TABLES[MACHINE][1]
    code = (
        "import ctypes, socket\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "def call(number, *args):\n"
        "    rc = libc.syscall(number, *args)\n"
        "    return 'ok' if rc >= 0 else ctypes.get_errno()\n"
        f"print(call({numbers['personality']}, 0x0400000 | 0x0040000))\n"
        f"print(call({numbers['personality']}, 0xFFFFFFFF))\n"
        f"print(call({numbers['socket']}, 40, 1, 0))\n"  # AF_VSOCK, SOCK_STREAM
        f"print(call({numbers['socket']}, 17, 3, 0))\n"  # AF_PACKET, SOCK_RAW
        f"print(call({numbers['socket']}, 16, 3, 9))\n"  # AF_NETLINK, NETLINK_AUDIT
        f"print(call({numbers['socket']}, 16, 3, 0))\n"  # AF_NETLINK, NETLINK_ROUTE
        "print(socket.socket(socket.AF_INET, socket.SOCK_STREAM).fileno() >= 0)\n"
    )
    check = sandbox.run({"kind": "program", "code": code, "tests": ""}, QUICK)
    assert check.passed, check.summary
    assert check.result["output"].split() == ["1", "ok", "1", "1", "1", "ok", "True"]
