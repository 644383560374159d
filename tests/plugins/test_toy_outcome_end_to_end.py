"""An outcome-driven method of another package, end to end through the real `distillery`
command: the toy plugin's `toy_hint` ("retry with a hint", tests/plugins/toy_plugin/
hints.py), registered only by entry points (`distillery.memory_methods` for the method,
`distillery.stage_kinds` for its `toy_retry` stage kind), plays the toy's tasks in
order with a scripted student, asks a scripted teacher on failures, re-plays with the
hint staged provisionally, keeps the hints that recover; its bank is then read by an
ordinary evaluate stage.

One sweep is planned (`--plan` shows the kind's status), killed with SIGKILL (the whole
process group, Ray included) while a teacher call is in flight, planned again (5 of 6
tasks done), resumed, then planned once more (nothing to run); the event log, the bank
and every model call are checked exactly, then MLflow and `distillery report`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.cli.app import route, run_cli
from distillery.orchestrator.stages import kinds as stage_kinds
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.memory import registry
from distillery.workers.trajectories import read_episode_file
from tests.plugins import ENTRY_POINTS, install_toy_plugin
from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow

# What the scripted players do (toy_plugin/hint_players.py): even tasks are solved on
# the first play; a hint makes the odd ones solvable, except task 5.
EXPECTED_LOG = [
    ("toy_0", "played"),
    ("toy_1", "played"),
    ("toy_1", "asked"),
    ("toy_1", "drafted"),
    ("toy_1", "staged"),
    ("toy_1", "played"),
    ("toy_1", "validated"),
    ("toy_1", "committed"),
    ("toy_2", "played"),
    ("toy_3", "played"),  # solved on its first play: it reads toy_1's committed hint
    ("toy_4", "played"),
    ("toy_5", "played"),
    ("toy_5", "asked"),
    ("toy_5", "drafted"),
    ("toy_5", "staged"),
    ("toy_5", "played"),
    ("toy_5", "asked"),
    ("toy_5", "drafted"),
    ("toy_5", "staged"),
    ("toy_5", "played"),
    ("toy_5", "rolled_back"),
    ("toy_5", "rejected"),
]


def _distillery() -> list[str]:
    script = Path(sys.executable).with_name("distillery")
    return (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-m", "distillery.orchestrator.cli.app"]
    )


def _run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_distillery(), *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )


def _play_calls(task: int, solved: bool) -> int:
    """The student's requests in one play of toy task `task`: a solved play makes each
    turn's calls then says Done.; a failed one says Done. once per turn."""
    from toy_plugin.bench import SPECS

    truth = SPECS[task].truth
    return sum(len(calls) + 1 for calls in truth) if solved else len(truth)


def _plan(argv: list[str], capsys) -> str:
    """`distillery ... --plan` in this process (the plugin is on its sys.path): the
    stage line of the kind."""
    assert run_cli([*argv, "--plan"]) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    lines = [x for x in out.splitlines() if x.strip().startswith("toy_retry:")]
    assert len(lines) == 1, out
    return lines[0] + "\n" + out


@pytest.fixture
def plugin_modules():
    """The toy plugin's modules and registrations are forgotten after the test."""
    yield
    for name in [m for m in sys.modules if m == "toy_plugin" or m.startswith("toy_plugin.")]:
        sys.modules.pop(name, None)
    registry._load.cache_clear()
    stage_kinds._load.cache_clear()


def test_an_outcome_driven_plugin_method_plans_runs_resumes_after_sigkill_and_reports(
    tmp_path, monkeypatch, capsys, plugin_modules
):
    paths = install_toy_plugin(tmp_path / "site", ENTRY_POINTS)
    for path in reversed(paths):
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, str(REPO_ROOT)]))
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("TOY_HINT_GATE", str(gate))
    # `--plan` here shows the stage lines, without the pre-flight's probe of the
    # endpoints: a probe would be one more request to the counting teacher.
    monkeypatch.setattr(
        "distillery.orchestrator.planning.plan_check.world_problems", lambda *args, **kwargs: []
    )
    env = {
        **os.environ,
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = tmp_path / "runs"
    with (
        run_stub_server(script="toy_plugin.hint_players:student") as student_url,
        run_stub_server(script="toy_plugin.hint_players:teacher") as teacher_url,
    ):
        argv = [
            "benchmark=toy",
            "benchmark.limit=null",
            "methods=[zero_shot,hint]",
            "+method_catalog.hint={kind: toy_hint}",
            "experiment.name=toy_hints",
            f"output_dir={runs}",
            f"tracking.uri={tracking}",
            "agent.retry_backoff_s=0",
            "cluster.num_workers=1",
            "student=external",
            "student.name=toy-student",
            f"student.base_url={student_url}",
            "student.model=scripted",
            "student.max_retries=1",
            "student.retry_backoff_s=0",
            "teacher=external",
            "teacher.name=toy-teacher",
            f"teacher.base_url={teacher_url}",
            "teacher.model=scripted-teacher",
            "teacher.max_retries=1",
            "teacher.retry_backoff_s=0",
        ]
        monkeypatch.chdir(tmp_path)
        assert "run 6 of 6 tasks in order (0 done), build" in _plan(argv, capsys)

        # The run, killed (SIGKILL, its whole process group) while the teacher's second
        # request is in flight.
        first = subprocess.Popen(
            [*_distillery(), *argv],
            cwd=tmp_path,
            env=env,
            stdout=(tmp_path / "first.out").open("w"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 600
        while not (gate / "asked").exists():
            assert first.poll() is None, (tmp_path / "first.out").read_text()[-5000:]
            assert time.monotonic() < deadline, "the teacher's second request never came"
            time.sleep(0.1)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
        (gate / "release").write_text("1")

        assert "run 1 of 6 tasks in order (5 done), build" in _plan(argv, capsys)

        done = _run(argv, env, tmp_path)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "0 to run" in _plan(argv, capsys)
        student_calls = stub_stats(student_url)["requests"]
        teacher_calls = stub_stats(teacher_url)["requests"]

    # The event log: every play, answer, staged / committed / rolled-back hint and event
    # of the program, in order, once (the killed run's records were replayed, not redone).
    (stage_dir,) = (runs / "stages" / "toy_retry").iterdir()
    journal = [json.loads(p.read_text()) for p in sorted((stage_dir / "journal").glob("*.json"))]
    assert [(r["task"], r["kind"]) for r in journal] == EXPECTED_LOG
    attempts = [(r["task"], r["attempt"]) for r in journal if r["kind"] == "played"]
    assert attempts == [
        ("toy_0", 1), ("toy_1", 1), ("toy_1", 2), ("toy_2", 1), ("toy_3", 1), ("toy_4", 1),
        ("toy_5", 1), ("toy_5", 2), ("toy_5", 3),
    ]  # fmt: skip
    assert all("at" not in r and "time" not in r for r in journal)  # no clock: reproducible
    # Every play's episode carries its attempt and the hints it was shown: toy_1's
    # re-play its staged hint; every later task toy_1's committed one (the bank the
    # stage is still writing: toy_3 is solved by it), toy_5's re-plays their own too.
    shown = {}
    for record in (r for r in journal if r["kind"] == "played"):
        (row,) = read_episode_file(record["summary"]["file"]).to_pylist()
        assert row["attempt"] == record["attempt"] and row["task_id"] == record["task"]
        shown[(record["task"], record["attempt"])] = json.loads(row["extra_json"])["shown"]
    assert shown == {
        ("toy_0", 1): 0, ("toy_1", 1): 0, ("toy_1", 2): 1, ("toy_2", 1): 1, ("toy_3", 1): 1,
        ("toy_4", 1): 1, ("toy_5", 1): 1, ("toy_5", 2): 2, ("toy_5", 3): 2,
    }  # fmt: skip
    # The bank: toy_1's hint only (toy_5's was rolled back), an ordinary bank.
    output = json.loads((stage_dir / "output.json").read_text())
    assert output["counts"]["hints"] == 1

    # Exact model calls. The teacher: 3 answers recorded, plus the one in flight at the
    # kill (sent again after it). The student: its zero-shot episodes, its 9 plays in
    # the stage and its evaluation with the hints (self_excluded: toy_1 cannot read its
    # own hint), each counted once.
    assert teacher_calls == 3 + 1
    zero_shot = sum(_play_calls(i, i % 2 == 0) for i in range(6))
    brew = (
        _play_calls(0, True)
        + _play_calls(1, False) + _play_calls(1, True)
        + _play_calls(2, True) + _play_calls(3, True) + _play_calls(4, True)
        + 3 * _play_calls(5, False)
    )  # fmt: skip
    evaluated = sum(_play_calls(i, i in (0, 2, 3, 4)) for i in range(6))
    assert student_calls == zero_shot + brew + evaluated

    # MLflow: the hint point with its cost rows per model and role.
    client = MlflowClient(tracking)
    experiment = client.get_experiment_by_name("distillery")
    found = client.search_runs([experiment.experiment_id])
    children = {r.data.tags["method"]: r for r in found if "mlflow.parentRunId" in r.data.tags}
    assert sorted(children) == ["hint", "zero_shot"]
    hint = children["hint"].data.metrics
    assert hint["success_rate"] == pytest.approx(4 / 6)
    assert children["zero_shot"].data.metrics["success_rate"] == pytest.approx(3 / 6)
    assert hint["bank_hints"] == 1 and hint["isolation_violations"] == 0
    assert hint["cost.toy_retry.teacher.n_llm_calls"] == 3
    assert hint["cost.toy_retry.student.n_llm_calls"] == brew
    assert hint["cost.evaluate.student.n_llm_calls"] == evaluated

    # `distillery report`: the cost table has the stage's student and teacher rows.
    (sweep_dir,) = re.findall(r"^Report: distillery report (\S+)$", done.stdout, re.M)
    assert route(["report", sweep_dir]) == 0, capsys.readouterr().err[-3000:]
    models = pd.read_csv(Path(sweep_dir) / "report" / "costs_models.csv")
    rows = {(r.kind, r.role, r.model): r.n_llm_calls for r in models.itertuples()}
    assert rows[("toy_retry", "teacher", "toy-teacher")] == 3
    assert rows[("toy_retry", "student", "toy-student")] == brew
    markdown = (Path(sweep_dir) / "report" / "report.md").read_text()
    assert "| toy_retry | teacher | toy-teacher |" in markdown
