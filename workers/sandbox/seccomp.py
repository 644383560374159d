"""A seccomp-bpf filter installed in the jail after it is set up (standard library only).

Graded code never needs to make namespaces, mount file systems, load BPF programs, use
the kernel's keyrings, trace processes or open performance counters — the kernel
surface a sandbox escape usually starts from. Once the jail is built and every
privilege dropped, the launcher installs this filter (`install_seccomp`, after
``no_new_privs``); from then on these calls fail with ``EPERM`` in the program and in
everything it starts (a filter is inherited and cannot be removed):

- ``unshare``, ``setns``; ``clone`` with any namespace flag (a plain ``fork`` or
  thread is allowed); ``clone3`` fails with ``ENOSYS`` (its flags are behind a pointer
  a filter cannot read: the C library then falls back to ``clone``, as under Docker's
  default profile);
- ``mount``, ``umount2``, ``pivot_root``, ``chroot`` and the new mount API
  (``open_tree``, ``move_mount``, ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``,
  ``mount_setattr``);
- ``bpf``, ``perf_event_open``, ``userfaultfd``, ``io_uring_setup``/``enter``/
  ``register``, ``keyctl``/``add_key``/``request_key``, ``ptrace``,
  ``process_vm_readv``/``writev``, ``kcmp``;
- modules, ``kexec``, ``reboot``, swap, ``acct``, host and domain names, ``syslog``,
  ``quotactl``, ``open_by_handle_at``/``name_to_handle_at``;
- ``personality`` with any persona but those Docker's default profile allows (the
  default 0x0, 0x8, 0x20000, 0x20008, and the query 0xffffffff): no
  READ_IMPLIES_EXEC, no ADDR_NO_RANDOMIZE;
- ``socket`` of the families graded code never needs: AF_VSOCK (a VM's channel to its
  host, e.g. Kata's agent: a network namespace does not isolate it), AF_PACKET, and
  AF_NETLINK but for NETLINK_ROUTE (what the C library's address lookups use).

A system call of another ABI (32-bit calls on x86_64, x32 calls) kills the process:
graded code never makes one, and a filter written for one table must not let another
table's numbers through. Written for x86_64 and aarch64; elsewhere `install_seccomp` reports
that it has no table (the launcher then refuses to start the check: an infrastructure
error, never a silent jail without it).
"""

from __future__ import annotations

import ctypes
import os

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
EPERM, ENOSYS = 1, 38
# BPF instruction classes and modes (linux/filter.h).
BPF_LD_W_ABS = 0x20
BPF_JEQ_K = 0x15
BPF_JGE_K = 0x35
BPF_JSET_K = 0x45
BPF_RET_K = 0x06
# Offsets in struct seccomp_data: nr, arch, instruction pointer, args[6] (u64 each;
# the low half of args[0] first on these little-endian machines).
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0_LOW = 0, 4, 16
# Namespace flags of clone(2)'s first argument (CLONE_NEWTIME is 0x80, which in
# clone(2) is part of the exit signal: it exists only for unshare and clone3).
CLONE_NAMESPACE_FLAGS = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
)
X32_SYSCALL_BIT = 0x40000000
OFFSET_ARG2_LOW = OFFSET_ARG0_LOW + 16
# personality(2) values Docker's default profile allows (moby profiles/seccomp).
ALLOWED_PERSONAS = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
AF_NETLINK, AF_PACKET, AF_VSOCK, NETLINK_ROUTE = 16, 17, 40, 0

DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree",
    "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "bpf",
    "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter",
    "io_uring_register", "keyctl", "add_key", "request_key", "ptrace",
    "process_vm_readv", "process_vm_writev", "kcmp", "init_module", "finit_module",
    "delete_module", "kexec_load", "reboot", "swapon", "swapoff", "acct", "sethostname",
    "setdomainname", "syslog", "quotactl", "open_by_handle_at", "name_to_handle_at",
)  # fmt: skip

# (audit arch, system call numbers) per machine, from the kernel's tables
# (arch/x86/entry/syscalls/syscall_64.tbl, include/uapi/asm-generic/unistd.h).
TABLES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {
        "clone": 56, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "pivot_root": 155, "chroot": 161, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 250, "add_key": 248, "request_key": 249, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "reboot": 169, "swapon": 167, "swapoff": 168, "acct": 163, "sethostname": 170,
        "setdomainname": 171, "syslog": 103, "quotactl": 179, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "personality": 135, "socket": 41,
    }),
    "aarch64": (0xC00000B7, {
        "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40,
        "umount2": 39, "pivot_root": 41, "chroot": 51, "open_tree": 428,
        "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "keyctl": 219, "add_key": 217, "request_key": 218, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "kcmp": 272,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "reboot": 142, "swapon": 224, "swapoff": 225, "acct": 89, "sethostname": 161,
        "setdomainname": 162, "syslog": 116, "quotactl": 60, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "personality": 92, "socket": 198,
    }),
}  # fmt: skip


class _Instruction(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_ushort),
        ("jt", ctypes.c_ubyte),
        ("jf", ctypes.c_ubyte),
        ("k", ctypes.c_uint32),
    ]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def seccomp_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter for `machine` as (code, jt, jf, k) instructions."""
    arch, numbers = TABLES[machine]
    deny = SECCOMP_RET_ERRNO | EPERM
    out = [
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARCH),
        (BPF_JEQ_K, 1, 0, arch),
        (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS),
        (BPF_LD_W_ABS, 0, 0, OFFSET_NR),
    ]
    if machine == "x86_64":
        out += [(BPF_JGE_K, 0, 1, X32_SYSCALL_BIT), (BPF_RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS)]
    for name in DENIED:
        out += [(BPF_JEQ_K, 0, 1, numbers[name]), (BPF_RET_K, 0, 0, deny)]
    out += _personality_block(numbers["personality"], deny)
    out += _socket_block(numbers["socket"], deny)
    out += [(BPF_JEQ_K, 0, 1, numbers["clone3"]), (BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)]
    out += [
        (BPF_JEQ_K, 0, 3, numbers["clone"]),
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW),
        (BPF_JSET_K, 0, 1, CLONE_NAMESPACE_FLAGS),
        (BPF_RET_K, 0, 0, deny),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]
    return out


def _personality_block(number: int, deny: int) -> list[tuple[int, int, int, int]]:
    """personality(p): allowed for ALLOWED_PERSONAS, else denied. Other calls skip the
    block with the call's number still loaded."""
    n = len(ALLOWED_PERSONAS)
    block = [(BPF_JEQ_K, 0, n + 3, number), (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW)]
    for i, persona in enumerate(ALLOWED_PERSONAS):  # a match jumps to the allow below
        block.append((BPF_JEQ_K, n - i, 0, persona))
    return [*block, (BPF_RET_K, 0, 0, deny), (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW)]


def _socket_block(number: int, deny: int) -> list[tuple[int, int, int, int]]:
    """socket(domain, type, protocol): AF_VSOCK and AF_PACKET denied, AF_NETLINK only
    with NETLINK_ROUTE, the rest allowed. Other calls skip the block."""
    return [
        (BPF_JEQ_K, 0, 8, number),
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARG0_LOW),  # the family
        (BPF_JEQ_K, 4, 0, AF_VSOCK),  # -> deny
        (BPF_JEQ_K, 3, 0, AF_PACKET),  # -> deny
        (BPF_JEQ_K, 0, 3, AF_NETLINK),  # not netlink -> allow
        (BPF_LD_W_ABS, 0, 0, OFFSET_ARG2_LOW),  # the netlink protocol
        (BPF_JEQ_K, 1, 0, NETLINK_ROUTE),  # -> allow
        (BPF_RET_K, 0, 0, deny),
        (BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ]


def install_seccomp() -> None:
    """Install the filter on this process (``no_new_privs`` must be set): raises
    OSError when it cannot."""
    machine = os.uname().machine
    if machine not in TABLES:
        raise OSError(f"no seccomp table for {machine}")
    instructions = seccomp_program(machine)
    array = (_Instruction * len(instructions))(*[_Instruction(*i) for i in instructions])
    prog = _Program(len(instructions), array)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"seccomp filter: {os.strerror(errno)}")
