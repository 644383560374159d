"""Every `distillery ...` command line of the README and of the experiments' comments
runs as written, so they cannot drift from the code.

Commands that would start models run with `--plan` (everything is composed, validated
and planned: the same validation as a run, nothing starts); `--cfg job` and `--plan`
lines run as they are. `distillery report` runs on a hand-made finished sweep, and
`distillery memory ...` on a real (small) store. The README's error example must print
exactly the error the README shows. Placeholders (`DIR`, `BANK`, `<sweep_id>`,
`$PWD`) are filled in.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from distillery.orchestrator.cli import run_cli

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
EXPERIMENTS = ROOT / "distillery" / "conf" / "experiment"


def _code_blocks(text: str) -> list[str]:
    return re.findall(r"```[a-z]*\n(.*?)```", text, re.DOTALL)


def _joined(lines: list[str]) -> list[str]:
    out, current = [], ""
    for line in lines:
        current += line.rstrip().removesuffix("\\") + " "
        if not line.rstrip().endswith("\\"):
            out.append(current.strip())
            current = ""
    return out


def readme_commands() -> list[str]:
    text = README.read_text()
    lines: list[str] = []
    for block in _code_blocks(text):
        lines += [line for line in _joined(block.splitlines()) if line.startswith("distillery ")]
    # inline spans outside code blocks: `distillery memory list --store DIR`
    prose = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    lines += [span for span in re.findall(r"`(distillery [^`]+)`", prose)]
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


def test_the_readme_names_its_commands():
    commands = readme_commands()
    assert any(c.startswith("distillery memory list --store") for c in commands)
    assert any(c.startswith("distillery report") for c in commands)
    assert any("--cfg job" in c for c in commands)
    assert len(experiment_commands()) >= 7
    assert "student.action_format" in README.read_text()


@pytest.mark.parametrize("line", readme_commands() + experiment_commands())
def test_command_line_runs(line, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    argv = _argv(line, tmp_path)
    if argv[0] == "memory":
        from distillery.orchestrator.memory_cli import main as memory_main
        from distillery.workers.memory.store import MemoryStore
        from tests.workers.memory.test_store_retrieval import WFS, WordHashEmbedder

        store = MemoryStore(path=str(tmp_path / "distillery_runs" / "qdrant"))
        store.write("e" * 64, "wf", WFS, WordHashEmbedder().embed([e.key_text for e in WFS]))
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
