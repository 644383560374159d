"""`distillery report` and `distillery memory` on bad input, as a user meets them
(through the command's own entry point): one line naming what is wrong and rc 2, never
a traceback or a hang; a read command creates nothing; a tracking server that is down
costs seconds, and the report still writes its files with a note."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest

from distillery.orchestrator.cli.app import route
from distillery.workers.memory.store import MemoryStore
from tests.orchestrator.test_report import write_sweep
from tests.workers.memory.test_store_retrieval import WFS, WordHashEmbedder, write_amd

BANK = "c" * 64


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = route(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_refusal(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    for word in words:
        assert word in lines[0], lines[0]


@pytest.fixture(scope="module")
def store_path(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("mem") / "qdrant"
    store = MemoryStore(path=str(path))
    write_amd(store, BANK, "wf", WFS, WordHashEmbedder())
    store.close()
    return path


@pytest.fixture
def sweep(tmp_path) -> Path:
    return write_sweep(tmp_path / "runs")


# -- report ---------------------------------------------------------------------------


def test_report_prices_that_are_no_price_table(capsys, sweep):
    record = json.loads((sweep / "sweep.json").read_text())
    record["prices"] = "expensive"
    (sweep / "sweep.json").write_text(json.dumps(record))
    code, _, err = _run(capsys, "report", str(sweep), "--no-mlflow")
    _one_line_refusal(code, err, "prices", "sweep.json")


def test_report_out_that_is_a_file(capsys, sweep, tmp_path):
    out = tmp_path / "a_file"
    out.write_text("x")
    code, _, err = _run(capsys, "report", str(sweep), "--no-mlflow", "--out", str(out))
    _one_line_refusal(code, err, "--out", "a file")


def test_report_path_that_is_a_file(capsys, tmp_path):
    path = tmp_path / "sweep.txt"
    path.write_text("x")
    code, _, err = _run(capsys, "report", str(path), "--no-mlflow")
    _one_line_refusal(code, err, "not a folder")


def _silent_server() -> tuple[socket.socket, str]:
    """A tracking server that accepts connections and never answers."""
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
    return server, f"http://127.0.0.1:{server.getsockname()[1]}"


@pytest.mark.parametrize("kind", ["silent"])  # a closed port is refused at once
def test_report_with_its_tracking_server_unreachable_writes_its_files_with_a_note(
    capsys, tmp_path, kind
):
    server = None
    if kind == "silent":
        server, uri = _silent_server()
    else:
        uri = "http://127.0.0.1:9"  # nothing listens
    try:
        sweep = write_sweep(tmp_path / "runs", parent_run_id="0" * 32, tracking_uri=uri)
        out = tmp_path / "rep"
        code, printed, err = _run(capsys, "report", str(sweep), "--out", str(out))
    finally:
        if server is not None:
            server.close()
    assert code == 1 and "Traceback" not in err
    assert (out / "report.md").exists()
    assert "not logged to MLflow" in err and "127.0.0.1" in err


# -- memory ---------------------------------------------------------------------------


def test_memory_list_of_a_missing_store_creates_nothing(capsys, tmp_path):
    missing = tmp_path / "no_store"
    code, _, err = _run(capsys, "memory", "list", "--store", str(missing))
    _one_line_refusal(code, err, "no memory store", str(missing))
    assert not missing.exists()


def test_memory_store_that_is_a_file(capsys, tmp_path):
    path = tmp_path / "qdrant"
    path.write_text("x")
    code, _, err = _run(capsys, "memory", "list", "--store", str(path))
    _one_line_refusal(code, err, "not a folder")


def test_memory_damaged_store(capsys, tmp_path, store_path):
    damaged = tmp_path / "damaged"
    os.system(f"cp -r {store_path} {damaged}")  # noqa: S605 - a test's own folders
    for sqlite in damaged.rglob("storage.sqlite"):
        sqlite.write_bytes(b"not a database" * 100)
    (damaged / "meta.json").write_text("{not json")
    code, _, err = _run(capsys, "memory", "list", "--store", str(damaged))
    _one_line_refusal(code, err, "cannot read the memory store", str(damaged))


@pytest.mark.parametrize("url", ["http://127.0.0.1:9", "not a url", "http://[::1"])
def test_memory_url_down_or_malformed(capsys, url):
    code, _, err = _run(capsys, "memory", "list", "--url", url)
    _one_line_refusal(code, err, "--url")


def test_memory_show_of_a_collection_the_bank_does_not_have(capsys, store_path):
    code, out, err = _run(
        capsys, "memory", "show", BANK, "--collection", "nosuch", "--store", str(store_path)
    )
    _one_line_refusal(code, err, "nosuch", "wf")
    assert "0 entries" not in out


def test_memory_export_to_a_folder_it_cannot_write(capsys, tmp_path, store_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the folder should be")
    code, _, err = _run(
        capsys, "memory", "export", BANK, "--out", str(blocked / "x"), "--store", str(store_path)
    )
    _one_line_refusal(code, err, "--out")
