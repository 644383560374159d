"""Every `distillery ...` command line of the README and of the experiments' comments
runs as written, so they cannot drift from the code.

The README's quickstart line (`distillery -v benchmark.limit=2`, the quickstart
experiment) runs end to end through the `distillery` entry point, its student served by
the scripted OpenAI-compatible server (`student=external`; the README's student is
SmolLM2 on llama.cpp, minutes on CPU): teacher, memory build and both student methods,
Ray and MLflow included (slow).

The other commands that would start models run with `--plan`, or `--cfg job` where the
output root is an object store (a plan reads its ledger; there is no network here). Both
go through the one validation a run goes through (`cli.validate_sweep`: every key typed
and validated, the sweep planned, the config-only preflight checks), so a line these
accept, a run accepts too; what they leave out is what needs the run's world (writable
folders, a bucket, key variables set, servers answering; tested in test_preflight and
test_requirements_check). `--cfg job` and `--plan` lines run as they are.
`distillery report` runs on a hand-made finished sweep, and `distillery memory ...` on a
real (small) store. The README's error example must print exactly the error the README
shows. Placeholders (`DIR`, `BANK`, `<sweep_id>`, `$PWD`) are filled in.

Code blocks are the fences that start a line: an inline ```` ```python ```` in prose
opens nothing (it once shifted the pairing, and lines after it went untested), and
`test_every_readme_command_line_is_collected` counts the command lines independently.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.orchestrator.cli import run_cli
from distillery.testing.scripted_server import run_stub_server
from tests.support import REPO_ROOT

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXPERIMENTS = ROOT / "conf" / "experiment"


# A fence is three backticks at the start of a line; its block ends at the next one.
_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```[^\n]*$", re.DOTALL | re.MULTILINE)
QUICKSTART = "distillery -v benchmark.limit=2"


def _code_blocks(text: str) -> list[str]:
    return _BLOCK.findall(text)


def _joined(lines: list[str]) -> list[str]:
    out, current = [], ""
    for line in lines:
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def readme_block_commands() -> list[str]:
    """The `distillery ...` lines of the README's code blocks, continuations joined."""
    lines: list[str] = []
    for block in _code_blocks(README.read_text()):
        lines += [line for line in _joined(block.splitlines()) if line.startswith("distillery ")]
    return lines


def readme_commands() -> list[str]:
    text = README.read_text()
    lines = readme_block_commands()
    # inline spans outside code blocks: `distillery memory list --store DIR`; not the
    # pattern `distillery <overrides> cluster=ray` (what submit runs on the cluster)
    prose = _BLOCK.sub("", text)
    lines += [s for s in re.findall(r"`(distillery [^`]+)`", prose) if "<overrides>" not in s]
    return list(dict.fromkeys(lines))


def experiment_commands() -> list[str]:
    out = []
    for path in sorted(EXPERIMENTS.glob("*.yaml")):
        # command lines are indented in the comment: "#   distillery ..."
        comments = [
            line.removeprefix("#").strip()
            for line in path.read_text().splitlines()
            if line.startswith("#   ")
        ]
        out += [line for line in _joined(comments) if line.startswith("distillery ")]
    return out


def _argv(line: str, tmp_path: Path) -> list[str]:
    line = line.replace("$PWD", str(tmp_path)).replace("<sweep_id>", "sweep-a")
    words = shlex.split(line, comments=True)[1:]
    fill = {"DIR": str(tmp_path / "store"), "BANK": "e" * 16, "RUN_A": "pA0", "RUN_B": "pZ0"}
    return [fill.get(w, w) for w in words]


def test_every_readme_command_line_is_collected():
    """Counted line by line (a fence toggles a block), apart from the regex above."""
    lines = README.read_text().splitlines()
    fences = [line for line in lines if line.startswith("```")]
    assert len(fences) % 2 == 0, "an unclosed code block"
    in_block, counted = False, 0
    for line in lines:
        if line.startswith("```"):
            in_block = not in_block
        elif in_block and line.startswith("distillery "):
            counted += 1
    # As of writing; grows with the README (the Kubernetes runbook's lines live in
    # docs/cluster.md, run by tests/k8s/test_runbook.py).
    assert counted >= 13
    assert len(readme_block_commands()) == counted
    commands = readme_commands()
    assert QUICKSTART in commands  # after the inline ```python of the prose
    assert "distillery memory list --store DIR" in commands
    assert not any("<overrides>" in c for c in commands)


def test_the_readme_names_its_commands():
    commands = readme_commands()
    assert any(c.startswith("distillery memory list --store") for c in commands)
    assert any(c.startswith("distillery report") for c in commands)
    assert any("--cfg job" in c for c in commands)
    assert len(experiment_commands()) >= 7
    assert "student.action_format" in README.read_text()


def quickstart_student(request: dict) -> dict:
    """The scripted student of the quickstart line: the quickstart decomposes each task
    for Subtask retrieval (one label will do), and plays BFCL's ground truth."""
    from distillery.testing.bfcl_scripts import replay_native

    if str(request["messages"][0]["content"]).startswith("Break the given task"):
        return {"content": '["do what the user asks"]'}
    return replay_native(request)


@pytest.mark.slow
def test_the_quickstart_line_runs_end_to_end(tmp_path):
    """`distillery -v benchmark.limit=2` as a user runs it (the entry point, in a fresh
    folder: default output root and MLflow store), the student served by the scripted
    server. The README's limit of 2 tasks is kept: it is already tiny."""
    assert QUICKSTART in readme_commands()
    argv = shlex.split(QUICKSTART)[1:]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    with run_stub_server(script=f"{__name__}:quickstart_student") as url:
        student = ["student=external", f"student.base_url={url}", "student.model=scripted"]
        out = subprocess.run(
            [sys.executable, "-c", "from distillery.orchestrator.cli import main; main()"]
            + argv
            + student,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "Traceback" not in out.stderr
    assert "tasks=2" in out.stdout  # the line's benchmark.limit=2
    summary = [line.split() for line in out.stdout.splitlines() if "success " in line]
    # the scripted student plays the ground truth: every method solves both tasks
    assert {(w[0], w[3], w[-4]) for w in summary} == {
        (method, "100.0%", "n=2") for method in ("teacher", "zero_shot", "amd_wf_st_fn")
    }
    assert (tmp_path / "mlflow.db").is_file()
    assert (tmp_path / "distillery_runs" / "sweeps").is_dir()


@pytest.mark.parametrize("line", readme_commands() + experiment_commands())
def test_command_line_runs(line, tmp_path, monkeypatch, capsys, plan_offline):
    monkeypatch.chdir(tmp_path)
    argv = _argv(line, tmp_path)
    if argv[0] == "memory":
        from distillery.orchestrator.memory_cli import main as memory_main
        from distillery.workers.memory.store import MemoryStore
        from tests.workers.memory.test_store_retrieval import WFS, write_amd

        store = MemoryStore(path=str(tmp_path / "distillery_runs" / "qdrant"))
        write_amd(store, "e" * 64, "wf", WFS)
        store.close()
        if "--store" not in argv:
            argv += ["--store", str(tmp_path / "distillery_runs" / "qdrant")]
        else:
            argv[argv.index("--store") + 1] = str(tmp_path / "distillery_runs" / "qdrant")
        assert memory_main(argv[1:]) == 0, capsys.readouterr().err
        return
    if argv[0] == "report":
        from distillery.orchestrator.report import main as report_main
        from tests.orchestrator.test_report import write_sweep

        write_sweep(tmp_path / "distillery_runs")
        assert report_main(argv[1:] + ["--no-mlflow"] * ("--no-mlflow" not in argv)) == 0
        assert "sweep sweep-a" in capsys.readouterr().out
        return
    if argv[0] == "compare":  # two points of the hand-made sweep of test_report
        from distillery.orchestrator.compare import main as compare_main
        from tests.orchestrator.test_report import write_sweep

        write_sweep(tmp_path / "distillery_runs")
        assert compare_main(argv[1:]) == 0, capsys.readouterr().err
        assert "McNemar: b = 4 (A only), c = 1 (B only)" in capsys.readouterr().out
        return
    if "|" in argv:  # `distillery ... | kubectl create -f -`: distillery's part
        argv = argv[: argv.index("|")]
    if argv[0] == "submit":
        if "--k8s" in argv:  # renders a RayJob: runs as it is
            from distillery.orchestrator.submit import main as submit_main

            assert submit_main(argv[1:]) == 0, capsys.readouterr().err
            assert "kind: RayJob" in capsys.readouterr().out
            return
        # Sending it needs a live cluster (tests/orchestrator/test_submit.py does that):
        # here the sweep it would send is validated and planned like any other line.
        with_value = {"--address", "--env", "--overlay", "--out"}
        rest, skip = [], False
        for word in argv[1:]:
            if skip:
                skip = False
            elif word in with_value:
                skip = True
            elif word != "--follow":
                rest.append(word)
        argv = rest
    if re.search(r"experiment=(appworld|toolsandbox)_", line):
        # Planning lists these benchmarks' tasks from the user's data and venv (absent
        # here): the line is planned on a listing shaped like theirs instead.
        from tests.orchestrator.test_appworld_plans import use_listing

        use_listing(monkeypatch)
        argv = [a.replace("<folder>", str(tmp_path)) for a in argv]
    remote_root = any(re.match(r"output_dir=\w+://", a) for a in argv)
    if "--cfg" not in argv and "--plan" not in argv:
        # A plan reads the output root's ledger: on an object store (no network here)
        # the line's config is composed and validated instead.
        argv += ["--cfg", "job"] if remote_root else ["--plan"]
    code = run_cli(argv)
    captured = capsys.readouterr()
    assert code == 0, f"{line}\n{captured.err}"
    assert captured.out


def test_the_readme_error_example_prints_what_the_readme_shows(capsys):
    text = README.read_text()
    (command, shown) = re.search(r"\$ (distillery [^\n]+)\n(distillery: [^\n]+)", text).groups()
    assert run_cli(shlex.split(command)[1:]) == 2
    assert capsys.readouterr().err.splitlines()[0] == shown


def test_the_experiments_table_names_the_students_the_ablation_sweeps():
    import yaml

    sweep = yaml.safe_load((EXPERIMENTS / "bfcl_ablation.yaml").read_text())["sweep"]
    (row,) = [line for line in README.read_text().splitlines() if "| `bfcl_ablation` |" in line]
    for student in sweep["student"]:
        assert f"`{student}`" in row, student
