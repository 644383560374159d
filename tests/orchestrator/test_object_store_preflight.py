"""An object-store output root that does not answer fails the preflight fast, with one
message naming `output_dir`, and Ctrl-C stops the wait at once (offline: no bucket is
reachable here; GCS looks for a metadata server, S3 meets a server that never answers)."""

from __future__ import annotations

import _thread
import signal
import socket
import threading
import time

import pytest

from distillery.orchestrator.planning import preflight
from distillery.orchestrator.planning.preflight import PreflightError, check_output_dir


@pytest.fixture
def silent_s3(monkeypatch):
    """AWS_ENDPOINT_URL at a server that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.getsockname()[1]}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "offline")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "offline-secret")
    yield
    server.close()
    for conn in held:
        conn.close()


def test_gs_offline_fails_fast_naming_the_key(monkeypatch):
    monkeypatch.setattr(preflight, "REMOTE_CHECK_S", 3.0)
    with pytest.raises(PreflightError, match=r"^output_dir: .*gs://some-bucket/runs"):
        check_output_dir("gs://some-bucket/runs")


def test_s3_that_never_answers_fails_fast_naming_the_key(monkeypatch, silent_s3):
    monkeypatch.setattr(preflight, "REMOTE_CHECK_S", 3.0)
    # The deadline or the client's short retry limit, whichever comes first.
    with pytest.raises(PreflightError, match=r"^output_dir: .*s3://some-bucket/runs"):
        check_output_dir("s3://some-bucket/runs")


class _HangingStore:
    """A filesystem whose client does not return until released (any scheme's, at
    worst)."""

    def __init__(self) -> None:
        self.released = threading.Event()

    def get_file_info(self, path):
        self.released.wait()


def test_a_store_whose_client_hangs_is_stopped_at_the_deadline(monkeypatch):
    monkeypatch.setattr(preflight, "REMOTE_CHECK_S", 1.0)
    store = _HangingStore()
    monkeypatch.setattr(preflight, "_probe_filesystem", lambda root: store)
    try:
        with pytest.raises(PreflightError, match=r"output_dir: hdfs://namenode/runs: no answer"):
            check_output_dir("hdfs://namenode/runs")
    finally:
        store.released.set()  # the abandoned check ends with the test


def test_ctrl_c_stops_the_wait(monkeypatch):
    # A client deaf to Ctrl-C while it waits (GCS offline looks for credentials for
    # minutes, 15 by default): the check is still waiting when Ctrl-C comes here. The
    # hanging store stands in for GCS because GCS's own wait is not reliably long: a
    # second offline lookup in one process can fail at once (its retry state is shared).
    monkeypatch.setattr(preflight, "REMOTE_CHECK_S", 120.0)
    store = _HangingStore()
    monkeypatch.setattr(preflight, "_probe_filesystem", lambda root: store)
    # A foreground process's Ctrl-C (a run started in a script's background inherits
    # SIGINT ignored, and then Ctrl-C does not reach it at all).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)  # what Ctrl-C does
    timer.start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            check_output_dir("gs://some-bucket/runs")
    finally:
        timer.cancel()
        store.released.set()  # the abandoned check ends with the test
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 120.0  # honoured before the deadline


def test_plan_with_a_root_that_never_answers_says_so_once_instead_of_hanging(
    monkeypatch, silent_s3, tmp_path, capsys
):
    # What is cached is read from the output root: `--plan` checks it first, within the
    # bound, and reports it as the pre-flight's problem (not twice, not after minutes).
    from distillery.orchestrator.cli.app import run_cli

    monkeypatch.setattr(preflight, "REMOTE_CHECK_S", 3.0)
    monkeypatch.chdir(tmp_path)
    argv = ["output_dir=s3://some-bucket/runs", f"memory.store.path={tmp_path / 'q'}"]
    assert run_cli([*argv, "--plan"]) == 2
    captured = capsys.readouterr()
    assert "plan: not made (the output root does not answer; see below)" in captured.out
    assert captured.err.count("distillery: output_dir:") == 1, captured.err
    assert "pre-flight:" in captured.err
