"""The sandbox's tests need Linux namespaces (root, or unprivileged user namespaces):
where they are unavailable, the tests that need them skip with the reason."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from distillery.workers.sandbox import pool
from distillery.workers.sandbox.jail import JAIL_UIDS, Sandbox, namespaces_unavailable


@pytest.fixture(scope="session", params=["warm", "cold"])
def sandbox(request) -> Sandbox:
    """Each test on both paths: warm jails (the default) and a fresh jail per check."""
    why = namespaces_unavailable()
    if why is not None:
        pytest.skip(f"no namespaces here: {why}")
    return Sandbox(warm=request.param == "warm")


def jail_processes() -> list[int]:
    """Processes running under a jail's uid (none may outlive a check)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                uid = os.stat(f"/proc/{entry}").st_uid
            except OSError:
                continue
            if JAIL_UIDS[0] <= uid < JAIL_UIDS[1]:
                found.append(int(entry))
    return found


def sandbox_folders() -> set[str]:
    """Sandbox folders on the host, but the (empty) mount points of the warm jails
    alive for later checks (pool.py removes them when a jail ends)."""
    warm = {Path(jail.root).name for p in pool.POOLS.values() for jail in list(p.all)}
    return {p.name for p in Path(tempfile.gettempdir()).glob("distillery-sandbox-*")} - warm


@pytest.fixture
def leaves_nothing():
    """After the test: no process of a jail alive and no sandbox folder left."""
    before = sandbox_folders()
    yield
    assert jail_processes() == []
    assert sandbox_folders() - before == set()
