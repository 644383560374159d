"""Missing packages, model files and services are named before Ray starts, one line
each with what to install or set."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from hydra import compose, initialize_config_module

from distillery.orchestrator.cli.app import run_cli
from distillery.orchestrator.core.compose import rewrite_role_overrides
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.planning import requirements_check
from distillery.orchestrator.planning.requirements_check import (
    missing_requirements,
    models_in_use,
)
from distillery.workers.llm.servers import free_port
from tests.support import REPO_ROOT


def _config(*overrides: str):
    with initialize_config_module(config_module="distillery.conf", version_base=None):
        return to_config(
            compose(config_name="config", overrides=rewrite_role_overrides(list(overrides)))
        )


def _external(url: str) -> list[str]:
    return ["student=external", f"student.base_url={url}", "student.model=m"]


def test_only_the_models_the_methods_use_are_checked():
    cfg = _config("methods=[zero_shot]", "teacher=smollm2_135m", "teacher.gguf_path=/nope.gguf")
    assert [role for role, _ in models_in_use(cfg)] == ["student"]
    assert missing_requirements([cfg], services=False) == []
    with_teacher = _config(
        "methods=[teacher,zero_shot]", "teacher=smollm2_135m", "teacher.gguf_path=/nope.gguf"
    )
    (missing,) = missing_requirements([with_teacher], services=False)
    assert str(missing) == (
        "teacher.gguf_path=/nope.gguf: no such model file: download the GGUF there or set "
        "teacher.gguf_path to an existing file"
    )


def test_missing_extras_say_what_to_install(monkeypatch):
    absent = {"llama_cpp", "vllm"}
    monkeypatch.setattr(requirements_check, "_installed", lambda name: name not in absent)
    # The benchmark's adapter cannot import bfcl-eval and says what to install.
    for name in [m for m in sys.modules if m.partition(".")[0] == "bfcl_eval"] + ["bfcl_eval"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "distillery.workers.envs.bfcl", raising=False)
    monkeypatch.setattr(requirements_check.shutil, "which", lambda name: None)
    cfg = _config("methods=[zero_shot]", "student=smollm2_135m")
    lines = [str(m) for m in missing_requirements([cfg], services=False)]
    assert lines == [
        "benchmark=bfcl_multi_turn_base: bfcl-eval is not installed: pip install --no-deps "
        "bfcl-eval==2026.3.23 (or bash scripts/setup.sh)",
        "student=smollm2-135m (backend llama_cpp): llama-cpp-python is not installed: "
        "pip install -e .[cpu] (or bash scripts/setup.sh)",
    ]
    vllm = _config("methods=[zero_shot]", "student=qwen3_4b")
    assert any("vLLM is not installed: pip install -e .[gpu]" in str(m) for m in
               missing_requirements([vllm], services=False))  # fmt: skip
    # On a Ray cluster the servers start on worker nodes: the driver's installs say nothing.
    remote = _config("methods=[zero_shot]", "student=qwen3_4b", "cluster.ray_address=auto")
    assert [m.what for m in missing_requirements([remote], services=False)] == [
        "benchmark=bfcl_multi_turn_base: bfcl-eval is not installed"
    ]


def test_services_are_reached_before_the_run():
    port = free_port()  # nothing listens here
    cfg = _config("methods=[zero_shot]", *_external(f"http://127.0.0.1:{port}/v1"))
    (missing,) = missing_requirements([cfg])
    assert missing.what.startswith(f"student.base_url=http://127.0.0.1:{port}/v1: nothing answers")
    assert missing.fix == "start the server, or fix student.base_url"
    assert missing_requirements([cfg], services=False) == []
    with socket.create_server(("127.0.0.1", 0)) as server:
        live = server.getsockname()[1]
        ok = _config("methods=[zero_shot]", *_external(f"http://127.0.0.1:{live}/v1"))
        assert missing_requirements([ok]) == []
        qdrant = _config(
            "methods=[amd_wf]", *_external(f"http://127.0.0.1:{live}/v1"),
            f"memory.store.url=http://127.0.0.1:{port}",
        )  # fmt: skip
        (down,) = missing_requirements([qdrant])
        assert down.what.startswith(f"memory.store.url=http://127.0.0.1:{port}: no Qdrant")


def test_cli_names_the_missing_piece_and_starts_nothing(capsys, tmp_path):
    port = free_port()
    code = run_cli(
        [
            "methods=[zero_shot]",
            f"output_dir={tmp_path}",
            *_external(f"http://127.0.0.1:{port}/v1"),
        ]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"distillery: student.base_url=http://127.0.0.1:{port}/v1: nothing")
    assert err.count("\n") == 1
    assert not (tmp_path / "stages").exists()  # nothing ran


def test_plain_pip_install_without_setup_script_is_one_line_per_piece():
    """`pip install -e .` alone: no llama-cpp-python, no bfcl-eval (the setup script adds
    both). The default quickstart stops in seconds, naming both, with no traceback."""
    blocked = "import sys; sys.modules.update(llama_cpp=None, bfcl_eval=None)"
    run = "from distillery.orchestrator.cli.app import main; main()"
    done = subprocess.run(
        [sys.executable, "-c", f"{blocked}; sys.argv = ['distillery']; {run}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        "distillery: benchmark=bfcl_multi_turn_base: bfcl-eval is not installed: pip install "
        "--no-deps bfcl-eval==2026.3.23 (or bash scripts/setup.sh)",
        "distillery: student=smollm2-135m (backend llama_cpp): llama-cpp-python is not "
        "installed: pip install -e .[cpu] (or bash scripts/setup.sh)",
    ]


def test_plan_needs_only_the_benchmark_package():
    """--plan and --cfg start no server: a GPU student plans on a CPU machine (its
    pre-flight says what a run here would lack); without the benchmark's package there
    are no tasks to plan, which it says with the rest."""
    blocked = "import sys; sys.modules.update(llama_cpp=None, vllm=None)"
    run = "from distillery.orchestrator.cli.app import main; main()"
    argv = "['distillery', 'student=qwen3_4b', 'methods=[zero_shot]', '--plan']"
    done = subprocess.run(
        [sys.executable, "-c", f"{blocked}; sys.argv = {argv}; {run}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "evaluate student=qwen3-4b zero_shot" in done.stdout  # planned all the same
    assert "student=qwen3-4b (backend vllm): vLLM is not installed" in done.stderr
    assert "Nothing ran" in done.stderr
    no_bfcl = blocked.replace("vllm=None", "vllm=None, bfcl_eval=None")
    done = subprocess.run(
        [sys.executable, "-c", f"{no_bfcl}; sys.argv = {argv}; {run}"],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2
    said = done.stderr.splitlines()
    # No tasks, no plan: the missing package first, then the world's other problems.
    assert "plan: not made" in done.stdout
    assert said[0] == (
        "distillery: benchmark=bfcl_multi_turn_base: bfcl-eval is not installed: pip install "
        "--no-deps bfcl-eval==2026.3.23 (or bash scripts/setup.sh)"
    )
    assert any("vLLM is not installed" in line for line in said[1:])
    assert said[-1].startswith("pre-flight: ")


def test_an_mlflow_tracking_server_is_reached_before_the_run():
    port = free_port()  # nothing listens here
    cfg = _config("methods=[teacher]", f"tracking.uri=http://127.0.0.1:{port}")
    (missing,) = missing_requirements([cfg])
    assert str(missing) == (
        f"tracking.uri=http://127.0.0.1:{port}: no MLflow tracking server answers "
        f"(Connection refused): start one there (mlflow server --host 127.0.0.1 --port "
        f"{port}), or fix tracking.uri (leave it unset for the local sqlite:///$PWD/mlflow.db)"
    )
    assert missing_requirements([cfg], services=False) == []
    with socket.create_server(("127.0.0.1", 0)) as server:
        live = server.getsockname()[1]
        up = _config("methods=[teacher]", f"tracking.uri=http://127.0.0.1:{live}")
        assert missing_requirements([up]) == []
    local = _config("methods=[teacher]", "tracking.uri=sqlite:///x.db")  # no service
    assert missing_requirements([local]) == []


def test_a_closed_tracking_port_is_one_line_exit_2_and_no_traceback(tmp_path):
    """As a user runs it: before Ray starts, no MLflow retry traceback."""
    port = free_port()
    run = "from distillery.orchestrator.cli.app import main; main()"
    argv = ["methods=[teacher]", f"output_dir={tmp_path}", f"tracking.uri=http://127.0.0.1:{port}"]
    done = subprocess.run(
        [sys.executable, "-c", run, *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    (line,) = done.stderr.splitlines()
    assert line.startswith(
        f"distillery: tracking.uri=http://127.0.0.1:{port}: no MLflow tracking server answers"
    )
    assert not (tmp_path / "stages").exists()  # nothing ran


def test_a_key_in_an_unreachable_url_is_never_printed():
    port = free_port()  # nothing listens here
    key = "sk-canary-in-a-url-0123456789"
    cfg = _config(
        "methods=[amd_wf]", *_external(f"http://user:{key}@127.0.0.1:{port}/v1"),
        f"memory.store.url=http://q:{key}@127.0.0.1:{port}",
    )  # fmt: skip
    found = missing_requirements([cfg])
    assert len(found) == 2
    assert all(key not in m.what and "<redacted>" in m.what for m in found)


CHAT_TEMPLATES = REPO_ROOT / "tests" / "workers" / "llm" / "chat_templates"


def test_a_llama_cpp_format_that_cannot_carry_the_action_format_is_refused(tmp_path):
    """Native tool calls need a template with a tool-call syntax; the prompt format needs
    system messages kept. Read from the model file's header: no server, no weights."""
    native = _config("methods=[zero_shot]", "student.action_format=native")
    (missing,) = missing_requirements([native], services=False)
    assert missing.what.startswith(
        "student=smollm2-135m (backend llama_cpp, action_format native): the chat template of "
    )
    assert "never shows the tools to the model" in missing.what
    assert missing.fix.startswith("set student.action_format=prompt, or student.chat_template_file")
    gemma = _config("methods=[zero_shot]", "student.chat_format=gemma")
    (missing,) = missing_requirements([gemma], services=False)
    assert missing.what.endswith("chat_format gemma cannot be used: it drops system messages")
    assert missing.fix.startswith("unset student.chat_format")
    hermes = CHAT_TEMPLATES / "hermes.jinja"
    with_template = _config(
        "methods=[zero_shot]",
        "student.action_format=native",
        f"student.chat_template_file={hermes}",
    )
    assert missing_requirements([with_template], services=False) == []
    absent = _config("methods=[zero_shot]", f"student.chat_template_file={tmp_path}/none.jinja")
    (missing,) = missing_requirements([absent], services=False)
    assert str(missing) == (
        f"student.chat_template_file={tmp_path}/none.jinja: no such file: point "
        "student.chat_template_file at a Jinja chat template, or unset it"
    )


def test_cli_refuses_a_native_student_without_tool_calls_and_starts_nothing(capsys, tmp_path):
    code = run_cli(
        ["methods=[zero_shot]", f"output_dir={tmp_path}", "student.action_format=native"]
    )
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("distillery: student=smollm2-135m (backend llama_cpp, action_format")
    assert "student.action_format=prompt" in err and err.count("\n") == 1
    assert not (tmp_path / "stages").exists()  # nothing ran
