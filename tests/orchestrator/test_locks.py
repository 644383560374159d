"""One run per output root: a second process stops at once naming the holder; the lock
of a process that died (SIGKILL) is recovered."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distillery.orchestrator.state.locks import LOCK_NAME, FileLock, LockHeld, run_locks
from tests.support import REPO_ROOT

_HOLD = """
import sys, time
from distillery.orchestrator.state.locks import run_locks
with run_locks(sys.argv[1], None, None, sys.argv[2]):
    print("locked", flush=True)
    time.sleep(120)
"""


def _holder(root: Path, tracking: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(root), tracking],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout.readline().strip() == "locked"
    return process


def test_a_second_process_is_refused_naming_the_holder_then_a_killed_holder_is_recovered(
    tmp_path, caplog
):
    root = tmp_path / "runs"
    holder = _holder(root, "sqlite:///" + str(tmp_path / "other.db"))
    try:
        with pytest.raises(LockHeld) as caught, run_locks(str(root), None, None, "file:///x"):
            pass
        message = str(caught.value)
        assert f"output root {root} is in use by another distillery run" in message
        assert f"pid {holder.pid} on host {socket.gethostname()}" in message
        assert str(root / LOCK_NAME) in message
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    # The dead holder's lock file is still there, with its pid; the kernel released it.
    assert f'"pid": {holder.pid}' in (root / LOCK_NAME).read_text()
    with caplog.at_level(logging.WARNING), run_locks(str(root), None, None, "file:///x"):
        assert f'"pid": {os.getpid()}' in (root / LOCK_NAME).read_text()
    assert f"recovered the lock of a run that is gone (pid {holder.pid}" in caplog.text
    assert not (root / LOCK_NAME).exists()  # released on exit


def test_a_shared_sqlite_store_or_embedded_qdrant_folder_is_locked_too(tmp_path):
    db = f"sqlite:///{tmp_path / 'mlflow.db'}"
    holder = _holder(tmp_path / "a", db)
    try:
        with (
            pytest.raises(LockHeld, match=r"MLflow SQLite store .*mlflow\.db is in use"),
            run_locks(str(tmp_path / "b"), None, None, db),
        ):
            pass
        # The other root's lock was given back when the SQLite one could not be taken.
        assert not (tmp_path / "b" / LOCK_NAME).exists()
    finally:
        holder.kill()
        holder.wait()
    qdrant = tmp_path / "qdrant"
    with (
        run_locks(str(tmp_path / "a"), str(qdrant), None, "file:///x"),
        pytest.raises(LockHeld, match="embedded Qdrant store"),
    ):
        FileLock(qdrant / LOCK_NAME, f"embedded Qdrant store {qdrant}").acquire()


def _cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv]


@pytest.mark.slow
def test_two_real_runs_on_one_output_root(tmp_path):
    """The second `distillery` stops within seconds, before any MLflow run, naming the
    first; the first finishes normally with one parent run."""
    from mlflow.tracking import MlflowClient

    from distillery.testing.scripted_server import run_stub_server

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    with run_stub_server(
        script="distillery.testing.bfcl_scripts:replay_native", delay_s=0.5
    ) as url:
        argv = [
            f"output_dir={tmp_path / 'runs'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
            "benchmark.limit=2",
            "methods=[zero_shot]",
            "student=external",
            f"student.base_url={url}",
            "student.model=scripted",
            "cluster.num_cpus=2",
        ]
        first_log = (tmp_path / "first.log").open("w")
        first = subprocess.Popen(
            _cli(argv), cwd=REPO_ROOT, env=env, stdout=first_log, stderr=subprocess.STDOUT
        )
        lock = tmp_path / "runs" / LOCK_NAME
        deadline = time.time() + 120
        while not lock.exists() and time.time() < deadline:
            assert first.poll() is None
            time.sleep(0.1)
        started = time.perf_counter()
        second = subprocess.run(_cli(argv), cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        took = time.perf_counter() - started
        finished = first.wait(timeout=300)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"is in use by another distillery run: pid {first.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    assert took < 60  # composing the config and planning; no Ray, no MLflow
    first_log.close()
    assert finished == 0, (tmp_path / "first.log").read_text()[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("distillery")
    runs = client.search_runs([experiment.experiment_id])
    assert len([r for r in runs if "mlflow.parentRunId" not in r.data.tags]) == 1
    assert len(runs) == 2  # the parent and the zero-shot child of the first run only
