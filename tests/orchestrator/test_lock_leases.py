"""The run lock as a lease, between processes on different hosts: on S3 (moto's server)
and on a shared filesystem whose `flock` does not reach the other host (as on NFS
without a lock manager: the holder's process never flocks). Each holder runs on fake
host `host-a` with its wall clock skewed, each contender on `host-b`:

- a holder that dies (SIGKILL; its clock an hour fast, so its record looks fresh for an
  hour) is taken over once its lease has gone unrenewed for a whole lease;
- a holder that hangs (SIGSTOP) is taken over the same way, and when it wakes it finds
  the other token and stops its run (LockLost) instead of writing beside it;
- a live holder (its clock an hour slow, so its record looks long expired) is never
  taken over: the contender sees it renew and stops, naming it.
- on S3, a dead holder of the contender's own host is taken over at once (its pid).

All scenarios run at once, so the whole test costs about one lease and two starts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from tests.support import REPO_ROOT
from tests.support.servers import s3_server

LEASE_S = 4.0

_PROCESS = """
import fcntl, os, socket, sys, time
host, skew, no_flock, target, lease_s, hold = sys.argv[1:7]
socket.gethostname = lambda: host
_real = time.time
time.time = lambda: _real() + float(skew)
if no_flock == "1":  # this host's flock does not reach the other's
    fcntl.flock = lambda *args, **kwargs: None
from distillery.orchestrator.state.locks import LockHeld, LockLost, run_locks
started = time.monotonic()
try:
    with run_locks(target, None, None, "file:///unused", lease_s=float(lease_s)):
        print(f"locked after {time.monotonic() - started:.2f}", flush=True)
        if hold == "stdin":
            sys.stdin.read()  # until the test closes it
        elif hold == "forever":
            while True:
                time.sleep(0.2)
except LockLost as exc:
    print(f"lost: {exc}", flush=True)
    sys.exit(3)
except LockHeld as exc:
    print(f"held: {exc}", flush=True)
    sys.exit(2)
"""


@dataclass
class Scenario:
    name: str
    backend: str  # s3 | shared
    holder_host: str = "host-a"
    skew_s: float = 0.0
    holder: subprocess.Popen | None = None
    contender: subprocess.Popen | None = None


def _start(host: str, skew: float, no_flock: bool, target: str, env: dict, hold: str):
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            _PROCESS,
            host,
            str(skew),
            "1" if no_flock else "0",
            target,
            str(LEASE_S),
            hold,
        ],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return process


def test_lease_takeover_across_hosts_dead_hung_and_skewed(tmp_path):
    with s3_server() as store:
        env = {**os.environ, **store.env, "PYTHONPATH": str(REPO_ROOT)}
        scenarios = [
            Scenario(f"{kind}-{backend}", backend, skew_s=skew)
            for backend in ("s3", "shared")
            for kind, skew in (("dies", 3600.0), ("hangs", 0.0), ("lives", -3600.0))
        ]
        here = Scenario("dies_here-s3", "s3", holder_host="host-b")
        scenarios.append(here)

        def target(s: Scenario) -> str:
            if s.backend == "s3":
                return f"s3://distillery/leases/{s.name}"
            return str(tmp_path / s.name)

        try:
            for s in scenarios:
                s.holder = _start(
                    s.holder_host, s.skew_s, s.backend == "shared", target(s), env, "forever"
                )
            for s in scenarios:
                line = s.holder.stdout.readline()
                assert line.startswith("locked"), (s.name, line, s.holder.stderr.read())
            for s in scenarios:
                if s.name.startswith("dies"):
                    s.holder.kill()
                    s.holder.wait()
                elif s.name.startswith("hangs"):
                    s.holder.send_signal(signal.SIGSTOP)
            for s in scenarios:
                s.contender = _start("host-b", 0.0, False, target(s), env, "stdin")
            out = {s.name: s.contender.stdout.readline() for s in scenarios}

            for backend in ("s3", "shared"):
                # A live holder, however wrong its clock, is never taken over.
                lives = out[f"lives-{backend}"]
                assert lives.startswith("held: "), lives
                assert "renewed its lease while this run waited" in lives
                assert "on host host-a" in lives
                # A dead one, however fresh its clock makes it look, is after a lease.
                for kind in ("dies", "hangs"):
                    s = next(x for x in scenarios if x.name == f"{kind}-{backend}")
                    line = out[s.name]
                    assert line.startswith("locked after "), (s.name, line)
                    assert float(line.split()[-1]) >= LEASE_S  # watched a whole lease
            # The hung holder wakes, finds the new holder's token and stops its run.
            for backend in ("s3", "shared"):
                s = next(x for x in scenarios if x.name == f"hangs-{backend}")
                s.holder.send_signal(signal.SIGCONT)
                assert s.holder.wait(timeout=120) == 3
                holder_out = s.holder.stdout.read()
                assert "lease was taken over by pid" in holder_out
                assert "on host host-b" in holder_out
            # On S3, a dead holder of this host is known dead by its pid: no wait.
            line = out["dies_here-s3"]
            assert line.startswith("locked after "), line
            for s in scenarios:
                if s.contender.poll() is None:
                    s.contender.stdin.close()
                s.contender.wait(timeout=60)
            recovered = [s for s in scenarios if "recovered the lock" in s.contender.stderr.read()]
            assert {s.name for s in recovered} == {
                "dies-s3",
                "hangs-s3",
                "dies-shared",
                "hangs-shared",
                "dies_here-s3",
            }
            # Released on exit: only the live holder's lock object is left.
            listed = store.client().list_objects_v2(Bucket="distillery", Prefix="leases/")
            locks = [o["Key"] for o in listed["Contents"] if o["Key"].endswith(".lock")]
            assert locks == ["leases/lives-s3/distillery.lock"]
        finally:
            for s in scenarios:
                for process in (s.holder, s.contender):
                    if process is not None and process.poll() is None:
                        process.send_signal(signal.SIGCONT)
                        process.kill()
                        process.wait()


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_hung_holder_of_a_running_sweep_stops_with_lock_lost(tmp_path, sigint):
    """In-process: the renewal thread's signal reaches a main thread blocked in a wait,
    and run_locks reports the lost lease rather than an interrupt; also where SIGINT is
    ignored (a driver started in the background of a script inherits it so)."""
    from distillery.orchestrator.state import locks

    previous = signal.getsignal(signal.SIGINT)
    if sigint == "ignored":
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    root = tmp_path / "root"
    started = time.monotonic()
    try:
        with (
            pytest.raises(locks.LockLost, match="taken over by pid 1 on host elsewhere"),
            locks.run_locks(str(root), None, None, "file:///unused", lease_s=0.6),
        ):
            # Another host overwrites the record (as after a takeover while we hung).
            stolen = locks.Holder(1, "elsewhere", time.time(), "", "other-token", 0.6)
            (root / locks.LOCK_NAME).write_text(stolen.to_json())
            time.sleep(60)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 60  # woken by the renewal thread, not the sleep
    # The new holder's record is left alone.
    assert "other-token" in (root / locks.LOCK_NAME).read_text()
    assert signal.getsignal(locks.WAKE_SIGNAL) is not locks._woken  # handler restored


def test_a_run_leaves_the_signal_mask_it_found(tmp_path):
    """The wake signal is unblocked while the locks are held, and blocked again after
    for a process that had it blocked."""
    from distillery.orchestrator.state import locks

    before = signal.pthread_sigmask(signal.SIG_BLOCK, {locks.WAKE_SIGNAL})
    try:
        with locks.run_locks(str(tmp_path / "root"), None, None, "file:///unused"):
            held = signal.pthread_sigmask(signal.SIG_BLOCK, set())
            assert locks.WAKE_SIGNAL not in held
        assert locks.WAKE_SIGNAL in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
