"""Warm jails (issue 34 item 4): a jail per worker reused across checks, a fresh
process per check — nothing of one check reaches the next (files, processes, uid),
and a jail that breaks is replaced."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from distillery.workers.sandbox import pool
from distillery.workers.sandbox.jail import JAIL_UIDS, Limits, Sandbox

QUICK = Limits(timeout_s=20.0)


def _run(sandbox: Sandbox, code: str, limits: Limits = QUICK):
    return sandbox.run({"kind": "program", "code": code, "tests": ""}, limits)


def test_nothing_of_a_check_reaches_the_next(leaves_nothing):
    sandbox = Sandbox(warm=True)
    first = _run(
        sandbox,
        "import os, subprocess, sys\n"
        "open('/work/left', 'w').write('x')\n"
        "open('/tmp/left', 'w').write('x')\n"
        # a process that outlives the program's verdict, if the jail let it
        "subprocess.Popen([sys.executable, '-I', '-S', '-c', 'import time; time.sleep(60)'])\n"
        "print(os.getuid())\n",
    )
    assert first.passed, first.summary
    second = _run(
        sandbox,
        "import os\n"
        "print(os.path.exists('/work/left'), os.path.exists('/tmp/left'), os.getuid(), os.getpid())\n",
    )
    assert second.passed, second.summary
    work, tmp, uid, pid = second.result["output"].split()
    assert (work, tmp, pid) == ("False", "False", "1")
    if os.geteuid() == 0:
        assert uid != first.result["output"].strip() and int(uid) >= JAIL_UIDS[0]
    jails = pool.pool_for((sandbox.python, sandbox.packages))
    assert jails.idle  # both ran in a warm jail, which is kept for the next check


def test_numpy_is_preloaded_and_a_program_cannot_change_it_for_the_next(leaves_nothing):
    sandbox = Sandbox(warm=True)
    spoiled = _run(sandbox, "import numpy\nnumpy.sum = lambda *a, **k: 42\nprint(numpy.sum([1]))\n")
    assert spoiled.passed and spoiled.result["output"].strip() == "42"
    clean = _run(sandbox, "import numpy\nprint(numpy.sum([1, 2]))\n")
    assert clean.passed and clean.result["output"].strip() == "3"


def test_a_broken_jail_is_replaced(leaves_nothing):
    sandbox = Sandbox(warm=True)
    # Two checks at once leave (at least) two idle jails; all are killed below: every
    # dead one is skipped, not only the first.
    with ThreadPoolExecutor(2) as both:
        checks = list(both.map(lambda _: _run(sandbox, "import time; time.sleep(1)"), [0, 1]))
    assert all(check.passed for check in checks)
    jails = pool.pool_for((sandbox.python, sandbox.packages))
    assert len(jails.idle) >= 2
    for jail in list(jails.idle):
        assert jail.init_pid is not None
        os.kill(jail.init_pid, 9)  # the jail dies between checks (e.g. the OOM killer)
    assert _run(sandbox, "pass").passed  # on a new jail
