"""A model server that dies during start-up is one line on the console (the model, the
cause in words, what to do, the server log's path), never a Ray traceback: killed by
SIGILL, SIGSEGV or SIGKILL, a missing model file, a port in use. The one lines are
checked through the `distillery` CLI (a real sweep whose student's server dies; slow)
and, for the llama_cpp backend's own words, on the server process directly.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.workers.llm.servers import ServerProcess
from distillery.workers.llm.start_failure import ServerStartError, describe
from tests.support import REPO_ROOT


def _dies_by(sig: signal.Signals) -> list[str]:
    return [sys.executable, "-c", f"import os, signal; os.kill(os.getpid(), {int(sig)})"]


def _start(command: list[str], tmp_path: Path, backend: str = "command") -> str:
    server = ServerProcess(
        command,
        "http://127.0.0.1:9/v1",
        tmp_path / "server.log",
        startup_timeout_s=120,
        name="smollm2-135m",
        backend=backend,
    )
    with pytest.raises(ServerStartError) as failed:
        server.start()
    return str(failed.value)


@pytest.mark.parametrize(
    ("sig", "words"),
    [
        (signal.SIGILL, "illegal instruction (SIGILL)"),
        (signal.SIGSEGV, "SIGSEGV, a segmentation fault"),
        (signal.SIGKILL, "out-of-memory killer"),
    ],
)
def test_a_server_killed_by_a_signal(tmp_path, sig, words):
    line = _start(_dies_by(sig), tmp_path)
    assert "\n" not in line and line.startswith("model smollm2-135m: its server ")
    assert words in line and f"(server log: {tmp_path / 'server.log'})" in line
    # the launch line is in the log, not in the message
    assert "--- distillery: the server exited with code" in (tmp_path / "server.log").read_text()


def test_llama_cpp_sigill_names_the_flag_and_the_rebuild(tmp_path, monkeypatch):
    """A venv whose recorded build needs AVX-512, on a CPU without it (the issue's EPYC)."""
    monkeypatch.setattr(sys, "prefix", str(tmp_path))
    (tmp_path / "distillery-llama-cpp.json").write_text(
        json.dumps({"cmake_args": "-DGGML_AVX512=ON", "needs": ["avx2", "avx512f"]})
    )
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("flags\t: sse4_2 avx avx2 fma f16c bmi2\n")
    monkeypatch.setenv("DISTILLERY_CPUINFO", str(cpuinfo))
    line = describe("smollm2-135m", "llama_cpp", -4, tmp_path / "s.log", "")
    assert "illegal instruction (SIGILL)" in line and "avx512f" in line
    assert "-DGGML_AVX512=ON" in line and "bash scripts/setup.sh" in line
    assert "\n" not in line


def test_the_real_llama_server_without_its_model_file(tmp_path):
    missing = tmp_path / "absent.gguf"
    command = [sys.executable, "-m", "distillery.workers.llm.llama_server", "--model"]
    line = _start([*command, str(missing), "--port", "9"], tmp_path, backend="llama_cpp")
    assert "could not find its model file" in line and str(missing) in line
    assert "gguf_path" in line and "\n" not in line


def test_a_port_in_use(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        line = _start(_scripted_server(str(port)), tmp_path)
    assert "could not listen" in line and "the port is in use by another process" in line
    assert str(port) in line


def _scripted_server(port: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "distillery.testing.scripted_server",
        "--script",
        "distillery.testing.scripts:always_text",
        "--port",
        port,
    ]


# -- through the CLI -----------------------------------------------------------------------


def _hydra_list(parts: list[str]) -> str:
    return "[" + ",".join("'" + p.replace("'", "\\'") + "'" for p in parts) + "]"


def _sweep_with_student_server(tmp_path: Path, command: list[str]) -> subprocess.CompletedProcess:
    argv = [
        "benchmark.limit=1",
        "methods=[zero_shot]",
        "student.backend=command",
        "student.model=stub",
        f"student.command={_hydra_list(command)}",
        f"student.command_cwd={REPO_ROOT}",
        "student.startup_timeout_s=300",
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "cluster.num_cpus=2",
    ]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    return subprocess.run(
        [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )


def _one_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("distillery:")]
    assert len(lines) == 1, done.stderr[-3000:]
    line = lines[0]
    assert line.startswith("distillery: model smollm2-135m: its server "), line
    log = line.rsplit("(server log: ", 1)[1].rstrip(")")
    assert Path(log).is_file(), line
    return line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "words"),
    [
        (signal.SIGILL, "died of an illegal instruction (SIGILL)"),
        (signal.SIGSEGV, "crashed during start-up: SIGSEGV"),
        (signal.SIGKILL, "was killed during start-up: SIGKILL, most often sent by the kernel's"),
    ],
)
def test_cli_a_server_killed_by_a_signal(tmp_path, sig, words):
    line = _one_line(_sweep_with_student_server(tmp_path, [*_dies_by(sig), "{port}"]))
    assert words in line


@pytest.mark.slow
def test_cli_a_missing_model_file(tmp_path):
    missing = tmp_path / "absent.gguf"
    command = [sys.executable, "-m", "distillery.workers.llm.llama_server"]
    command += ["--model", str(missing), "--port", "{port}"]
    line = _one_line(_sweep_with_student_server(tmp_path, command))
    assert "could not find its model file" in line and str(missing) in line


@pytest.mark.slow
def test_cli_a_port_in_use(tmp_path):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        # {port} must be in a command backend's line: here it is an ignored argument
        command = ["sh", "-c", " ".join(_scripted_server(str(port))), "{port}"]
        line = _one_line(_sweep_with_student_server(tmp_path, command))
    assert "could not listen on 127.0.0.1:" in line and "in use by another process" in line
