"""Every `distillery ...` command line of the README, of the manual (docs/) and of the
experiments' comments runs as written, so they cannot drift from the code; every shell
block of them parses; no page names a path outside the repository; and the manual
builds with `mkdocs build --strict`.

The quickstart line (`distillery -v benchmark.limit=2`, the quickstart experiment) runs
end to end through the `distillery` entry point, its student served by the scripted
OpenAI-compatible server (`student=external`; the manual's student is SmolLM2 on
llama.cpp, minutes on CPU): teacher, memory build and both student methods, Ray and
MLflow included (slow).

The other commands that would start models run with `--plan`, or `--cfg job` where the
output root is an object store (a plan reads its ledger; there is no network here). Both
go through the one validation a run goes through (`cli.validate_sweep`: every key typed
and validated against the config models, the sweep planned, the config-only preflight
checks), so a line these accept, a run accepts too; what they leave out is the world's
pre-flight (keys set, servers answering, vLLM and GPUs here; tested in
test_plan_preflight). `--cfg job` and `--plan` lines run as they are.
`distillery report` runs on a hand-made finished sweep, and `distillery memory ...` on a
real (small) store. Each error example (`$ distillery ...` then `distillery: ...`) must
print exactly the error it shows. Placeholders (`DIR`, `BANK`, `<sweep_id>`, `$PWD`) are
filled in. `bash scripts/quickstart.sh ARGS` passes ARGS to `distillery`, and is checked
as `distillery ARGS`.

Code blocks are the fences that start a line: an inline ```` ```python ```` in prose
opens nothing (it once shifted the pairing, and lines after it went untested), and
`test_every_command_line_is_collected` counts the command lines independently.
docs/cluster.md's own commands are run by tests/k8s/test_runbook.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.orchestrator.cli.app import run_cli
from distillery.testing.scripted_server import run_stub_server
from tests.support import REPO_ROOT

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
EXPERIMENTS = ROOT / "conf" / "experiment"
# Pages whose commands another test runs (they need a cluster's objects to check).
OWN_RUNNER = {DOCS / "cluster.md"}


# A fence is three backticks at the start of a line; its block ends at the next one.
_BLOCK = re.compile(r"^```[a-z]*\n(.*?)^```[^\n]*$", re.DOTALL | re.MULTILINE)
_SHELL_BLOCK = re.compile(r"^```(?:bash|sh|shell)\n(.*?)^```[^\n]*$", re.DOTALL | re.MULTILINE)
QUICKSTART = "distillery -v benchmark.limit=2"
_MENTIONS = {"distillery memory", "distillery compare"}  # subcommands named, not run
_QUICKSTART_SCRIPT = "bash scripts/quickstart.sh "


def pages() -> list[Path]:
    """The README and every page of the manual."""
    return [README, *sorted(DOCS.rglob("*.md"))]


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


def _as_distillery(line: str) -> str | None:
    if line.startswith("distillery "):
        return line
    if line.startswith(_QUICKSTART_SCRIPT):  # its arguments go to `distillery`
        return "distillery " + line.removeprefix(_QUICKSTART_SCRIPT)
    return None


def block_commands(page: Path) -> list[str]:
    """The `distillery ...` lines of a page's code blocks, continuations joined."""
    lines: list[str] = []
    for block in _code_blocks(page.read_text()):
        lines += [c for c in map(_as_distillery, _joined(block.splitlines())) if c]
    return lines


def readme_block_commands() -> list[str]:
    return [c for page in pages() if page not in OWN_RUNNER for c in block_commands(page)]


def readme_commands() -> list[str]:
    """Every command line of the README and the manual: code blocks, then inline spans
    outside code blocks (`distillery memory list --store DIR`, `bash scripts/quickstart.sh
    benchmark.limit=5`); not the pattern `distillery <overrides> cluster=ray` (what
    submit runs on the cluster)."""
    lines = readme_block_commands()
    for page in pages():
        if page in OWN_RUNNER:
            continue
        prose = _BLOCK.sub("", page.read_text())
        spans = re.findall(r"`((?:distillery|bash scripts/quickstart\.sh) [^`]+)`", prose)
        lines += [
            c
            for c in map(_as_distillery, spans)
            # not a bare subcommand named in prose (`distillery memory` answers ...)
            if c and "<overrides>" not in c and c not in _MENTIONS
        ]
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


def _filled(line: str, folder: str) -> str:
    """The line with its placeholders filled: `<sweep_id>`, `$PWD` and any other
    `<...>` (a folder of the user's: `<folder holding AppWorld's data/>`)."""
    line = line.replace("$PWD", folder).replace("<sweep_id>", "sweep-a")
    return re.sub(r"<[^<>\n]*>", folder, line)


def _argv(line: str, tmp_path: Path) -> list[str]:
    line = _filled(line, str(tmp_path))
    words = shlex.split(line, comments=True)[1:]
    fill = {"DIR": str(tmp_path / "store"), "BANK": "e" * 16, "RUN_A": "pA0", "RUN_B": "pZ0"}
    return [fill.get(w, w) for w in words]


def test_every_command_line_is_collected():
    """Counted line by line (a fence toggles a block), apart from the regex above."""
    counted = 0
    for page in pages():
        if page in OWN_RUNNER:
            continue
        lines = page.read_text().splitlines()
        fences = [line for line in lines if line.startswith("```")]
        assert len(fences) % 2 == 0, f"an unclosed code block in {page}"
        in_block = False
        for line in lines:
            if line.startswith("```"):
                in_block = not in_block
            elif in_block and _as_distillery(line):
                counted += 1
    assert counted >= 14  # as of writing; grows with the manual
    assert len(readme_block_commands()) == counted
    commands = readme_commands()
    assert QUICKSTART in commands  # after the inline ```python of the prose
    assert "distillery memory list --store DIR" in commands
    assert not any("<overrides>" in c for c in commands)


def test_the_manual_names_its_commands():
    commands = readme_commands()
    assert any(c.startswith("distillery memory list --store") for c in commands)
    assert any(c.startswith("distillery report") for c in commands)
    assert any("--cfg job" in c for c in commands)
    assert any(c.endswith("--plan") or " --plan " in c for c in commands)
    assert len(experiment_commands()) >= 7
    assert "student.action_format" in (DOCS / "running.md").read_text()
    # The README's two commands, exactly as the scripts are.
    readme = README.read_text()
    assert "bash scripts/quickstart.sh\n" in readme and "bash scripts/test.sh\n" in readme
    assert (ROOT / "scripts" / "quickstart.sh").is_file() and (
        ROOT / "scripts" / "test.sh"
    ).is_file()


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shell_block_parses(page):
    """Each shell block is valid bash (`bash -n`), and each line of it splits as the
    shell splits it."""
    for block in _SHELL_BLOCK.findall(page.read_text()):
        done = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
        assert done.returncode == 0, f"{page}: {done.stderr}\n{block}"
        for line in _joined(block.splitlines()):
            shlex.split(line, comments=True)


_OUTSIDE = re.compile(r"(?:\.\./)+[\w.-]+")


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_names_a_path_outside_the_repository(page):
    """A reader of a published manual has the repository, nothing beside it: no link
    or path leaves it (`../shared/...`), and no page names this machine's folders."""
    text = page.read_text()
    for found in _OUTSIDE.findall(text):
        target = (page.parent / found).resolve()
        assert target.is_relative_to(ROOT), f"{page.name} names {found}, outside the repository"
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", link) or link.startswith("#"):
            continue
        target = (page.parent / link.split("#", 1)[0]).resolve()
        assert target.is_relative_to(ROOT), f"{page.name} links {link}, outside the repository"
    for folder in ("/work/", "shared/papers", "shared/vendor", "shared/data"):
        assert folder not in text, f"{page.name} names {folder}"


def build_manual(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    """`mkdocs build --strict` of the manual at `root` (its mkdocs.yml, docs/ and
    hooks). Never `-q`: quiet mode drops the warnings before strict mode counts them,
    and a build with a broken link then passes (it did: docs/benchmarks/memory_methods.md
    linked `../methods/` for weeks)."""
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)},
        timeout=600,
    )


def _warnings(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in (done.stdout + done.stderr).splitlines() if line.startswith("WARNING")]


def test_the_manual_builds_strictly(tmp_path):
    """`mkdocs build --strict`: no broken link or anchor, no page missing from the nav,
    the configuration reference generated from the config models; and not one warning
    (counted here too, so a build that hides them cannot pass)."""
    done = build_manual(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not _warnings(done), _warnings(done)
    reference = (tmp_path / "site" / "reference" / "configuration" / "index.html").read_text()
    for key in ("benchmark.limit", "cluster.ray_address", "student.temperature", "k_st"):
        assert key in reference, key


def test_the_strict_build_fails_on_a_planted_broken_link(tmp_path):
    """The check above can fail: the same build of a copy of the manual with one broken
    link planted in a page exits non-zero and names the link."""
    import shutil

    copy = tmp_path / "manual"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "mkdocs_hooks.py", copy / "scripts" / "mkdocs_hooks.py")
    page = copy / "docs" / "benchmarks" / "memory_methods.md"
    page.write_text(page.read_text() + "\nSee [the methods](../no-such-page/).\n")
    done = build_manual(copy, tmp_path / "site")
    assert done.returncode != 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert any("no-such-page" in line for line in _warnings(done)), _warnings(done)


def test_the_configuration_reference_covers_every_key():
    """Every key of the typed config, with a type, a default and where it comes from."""
    from distillery.orchestrator.cli.config_reference import reference
    from distillery.orchestrator.core.config import DistilleryConfig
    from distillery.workers.llm.config import ModelConfig

    page = reference()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    assert all(line.count(" | ") >= 4 for line in rows)
    documented = {line.split("`")[1] for line in rows}
    assert "## Models: `teacher.*`, `student.*`, `builder_models.NAME.*`" in page  # one table
    for name in set(DistilleryConfig.model_fields) - {"teacher", "builder_models"}:
        assert any(k == name or k.startswith(f"{name}.") for k in documented), name
    for name in ModelConfig.model_fields:
        assert f"student.{name}" in documented, name
    row = next(line for line in rows if line.startswith("| `benchmark.limit` |"))
    assert "`conf/experiment/quickstart.yaml`" in row and "(model: `null`)" in row


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
            [sys.executable, "-c", "from distillery.orchestrator.cli.app import main; main()"]
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
    # The summary's lines (not the heartbeat's, which a run without a terminal prints)
    summary = [line.split() for line in out.stdout.splitlines() if line.startswith("    ")]
    summary = [w for w in summary if "success" in w]
    # the scripted student plays the ground truth: every method solves both tasks
    assert {(w[0], w[3], w[-4]) for w in summary} == {
        (method, "100.0%", "n=2") for method in ("teacher", "zero_shot", "amd_wf_st_fn")
    }
    assert (tmp_path / "mlflow.db").is_file()
    assert (tmp_path / "distillery_runs" / "sweeps").is_dir()


def distinct_commands() -> list[str]:
    """Every command line once: lines that differ only in comments or in `--plan` (which
    the test adds to a line that would run) are the same check."""
    seen: set[tuple[str, ...]] = set()
    out = []
    for line in readme_commands() + experiment_commands():
        key = tuple(w for w in shlex.split(_filled(line, "F"), comments=True) if w != "--plan")
        if key not in seen:
            seen.add(key)
            out.append(line)
    return out


@pytest.mark.parametrize("line", distinct_commands())
def test_command_line_runs(line, tmp_path, monkeypatch, capsys, plan_offline):
    monkeypatch.chdir(tmp_path)
    argv = _argv(line, tmp_path)
    if argv[0] == "memory":
        from distillery.orchestrator.cli.memory_cli import main as memory_main
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
        from distillery.orchestrator.cli.compare import main as compare_main
        from tests.orchestrator.test_report import write_sweep

        write_sweep(tmp_path / "distillery_runs")
        assert compare_main(argv[1:]) == 0, capsys.readouterr().err
        assert "McNemar: b = 4 (A only), c = 1 (B only)" in capsys.readouterr().out
        return
    if "|" in argv:  # `distillery ... | kubectl create -f -`: distillery's part
        argv = argv[: argv.index("|")]
    if argv[0] == "submit":
        if "--k8s" in argv:  # renders a RayJob: runs as it is
            from distillery.orchestrator.cluster.submit import main as submit_main

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
    for word in argv:  # a file of the user's the line names (AppWorld's prompt file)
        key, _, value = word.partition("=")
        if key.endswith("_file") and value.startswith(str(tmp_path)):
            Path(value).parent.mkdir(parents=True, exist_ok=True)
            Path(value).write_text("USER:\nthe user's own file\n")  # a ReAct prompt's shape
    if re.search(r"experiment=(appworld|toolsandbox)_", line):
        # Planning lists these benchmarks' tasks from the user's data and venv (absent
        # here): the line is planned on a listing shaped like theirs instead.
        from tests.orchestrator.test_appworld_plans import use_listing

        use_listing(monkeypatch)
        argv = [a.replace("<folder>", str(tmp_path)) for a in argv]
    if _needs_data_not_here(argv):
        # A benchmark whose data the line names (a folder of the user's, a dataset to
        # download) cannot list its tasks here: the line's config keys are checked
        # against the config models (composed and validated, every sweep point).
        _keys_valid(argv)
        return
    remote_root = any(re.match(r"output_dir=\w+://", a) for a in argv)
    if "--cfg" not in argv and "--plan" not in argv:
        # A plan reads the output root's ledger: on an object store (no network here)
        # the line's config is composed and validated instead.
        argv += ["--cfg", "job"] if remote_root else ["--plan"]
    code = run_cli(argv)
    captured = capsys.readouterr()
    assert code == 0, f"{line}\n{captured.err}"
    assert captured.out


def _sweep_of(argv: list[str]) -> list:
    from distillery.orchestrator.cli.hydra_flags import parse_flags
    from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points

    flags = parse_flags(argv)
    return sweep_points(rewrite_role_overrides(flags.overrides), multirun=flags.multirun)


def _keys_valid(argv: list[str]) -> None:
    from distillery.orchestrator.core.config import to_config

    for _, composed in _sweep_of(argv):
        to_config(composed)  # raises ConfigError naming the key


def _needs_data_not_here(argv: list[str]) -> bool:
    """Whether the line's benchmark cannot list its tasks on this machine (its data is
    the user's to fetch); anything else it refuses is the line's own error."""
    from distillery.orchestrator.core.config import ConfigError, to_config
    from distillery.orchestrator.planning.tasks import resolve_tasks
    from distillery.workers.envs.base import BenchmarkUnavailable

    try:
        configs = [to_config(c) for _, c in _sweep_of(argv)]
    except ConfigError:
        return False  # the run below refuses it, with its message
    try:
        for cfg in configs:
            resolve_tasks(cfg)
    except BenchmarkUnavailable:
        return True
    except Exception:  # noqa: BLE001 - the run below says what is wrong
        return False
    return False


def test_each_error_example_prints_what_the_page_shows(capsys):
    examples = [
        pair
        for page in pages()
        for pair in re.findall(r"\$ (distillery [^\n]+)\n(distillery: [^\n]+)", page.read_text())
    ]
    assert len(examples) >= 2
    for command, shown in examples:
        assert run_cli(shlex.split(command)[1:]) == 2, command
        assert capsys.readouterr().err.splitlines()[0] == shown


def test_the_experiments_table_names_the_students_the_ablation_sweeps():
    import yaml

    sweep = yaml.safe_load((EXPERIMENTS / "bfcl_ablation.yaml").read_text())["sweep"]
    running = (DOCS / "running.md").read_text()
    (row,) = [line for line in running.splitlines() if "| `bfcl_ablation` |" in line]
    for student in sweep["student"]:
        assert f"`{student}`" in row, student
