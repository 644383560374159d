"""`distillery`'s entry point routes a subcommand whatever stands around `-v`: the
flag may come before the subcommand, after it, or both, and is never passed on."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from distillery.orchestrator.cli import app as cli
from tests.support import REPO_ROOT


@pytest.mark.parametrize(
    "argv",
    [
        ["-v", "memory", "list", "--store", "S"],
        ["--verbose", "memory", "list", "--store", "S"],
        ["memory", "-v", "list", "--store", "S"],
        ["memory", "list", "--store", "S", "-v"],
        ["-v", "-v", "memory", "list", "--store", "S"],
    ],
)
def test_verbose_anywhere_still_routes_the_subcommand(argv, monkeypatch):
    seen = []
    monkeypatch.setattr(
        "distillery.orchestrator.cli.memory_cli.main", lambda args: seen.append(args) or 0
    )
    monkeypatch.setattr(cli, "run_cli", lambda args: pytest.fail(f"run_cli({args})"))
    assert cli.route(argv) == 0
    assert seen == [["list", "--store", "S"]]


@pytest.mark.parametrize(
    ("name", "target"),
    [
        ("report", "distillery.orchestrator.report.main"),
        ("compare", "distillery.orchestrator.cli.compare.main"),
        ("submit", "distillery.orchestrator.cluster.submit.main"),
    ],
)
def test_every_subcommand_is_routed_after_v(name, target, monkeypatch):
    seen = []
    monkeypatch.setattr(target, lambda args: seen.append(args) or 0)
    assert cli.route(["-v", name, "X"]) == 0
    assert seen == [["X"]]


def test_a_sweep_keeps_v_for_run_cli(monkeypatch):
    seen = []
    monkeypatch.setattr(cli, "run_cli", lambda args: seen.append(args) or 0)
    assert cli.route(["-v", "benchmark.limit=2", "--plan"]) == 0
    assert seen == [["-v", "benchmark.limit=2", "--plan"]]


def test_distillery_v_memory_list_end_to_end(tmp_path):
    """The installed entry point, as a user types it."""
    from distillery.workers.memory.store import MemoryStore
    from tests.workers.memory.test_store_retrieval import WFS, write_amd

    path = str(tmp_path / "qdrant")
    store = MemoryStore(path=path)
    write_amd(store, "e" * 64, "wf", WFS)
    store.close()
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from distillery.orchestrator.cli.app import main; main()",
            "-v",
            "memory",
            "list",
            "--store",
            path,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (row,) = [line.split() for line in out.stdout.splitlines() if line.startswith("e" * 16)]
    assert row[-3:] == ["wf=3", "st=0", "fn=0"]
