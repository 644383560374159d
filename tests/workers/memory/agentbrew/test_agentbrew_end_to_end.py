"""AgentBrew brew -> serve on BFCL offline, through the real `distillery` command: the
shipped `agentbrew` entry under protocol=cross_split (7 memory tasks brewed, 3 held out)
beside zero-shot, AMD (WF+ST+FN) and both memories together (`agentbrew_amd`, whose
banks are the two others'), a scripted student that solves a hard task only with its
group's note in its prompt, a scripted JSON teacher that is also the curator and plays
AMD's collection (distillery/testing/agentbrew_scripts.py).

The sweep is planned, killed with SIGKILL (its whole process group, Ray included) while
the teacher's second request is in flight, planned again, resumed, planned once more;
then the event log, the bank, every model call, the MLflow runs (the brew's own, with its
Table 3, its event log, its notes and a trace per play) and `distillery report` are
checked exactly.
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
from distillery.testing.agentbrew_scripts import EASY, note_key
from distillery.testing.bfcl_scripts import _tasks_by_first_turn
from distillery.testing.scripted_server import run_stub_server, stub_stats

pytestmark = pytest.mark.slow

MEMORY = [1, 2, 3, 4, 5, 7, 8]  # cross_split (seed 0) of the first 10 tasks
HELD_OUT = [0, 6, 9]
EXPECTED_LOG = [
    (1, "played"), (1, "asked"), (1, "drafted"), (1, "staged"), (1, "played"), (1, "validated"),
    (1, "curated"), (1, "committed"), (1, "committed"),  # the first note: no curator call
    (2, "played"), (2, "asked"), (2, "drafted"), (2, "staged"), (2, "played"), (2, "validated"),
    # The curator's candidates by lexical and embedding similarity ("compared"), then its call.
    (2, "compared"), (2, "asked"), (2, "curated"), (2, "committed"), (2, "committed"),
    (3, "played"), (3, "committed"),
    (4, "played"), (4, "committed"),
    (5, "played"), (5, "asked"), (5, "drafted"), (5, "staged"), (5, "played"), (5, "validated"),
    (5, "compared"), (5, "asked"), (5, "curated"), (5, "committed"),
    (7, "played"), (7, "committed"),  # solved on its first play by task 5's note
    (8, "played"), (8, "committed"),
]  # fmt: skip


def _distillery() -> list[str]:
    script = Path(sys.executable).with_name("distillery")
    return (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-m", "distillery.orchestrator.cli.app"]
    )


def _truth(index: int) -> list[list[str]]:
    task = f"multi_turn_base_{index}"
    for candidates in _tasks_by_first_turn().values():
        for found, truth in candidates:
            if found.task_id == task:
                return truth
    raise KeyError(task)


def _play_calls(index: int, solved: bool) -> int:
    """The student's requests in one play: solved, each turn's calls then a closing
    reply; failed, the first call and a closing reply in turn 1, a closing reply after."""
    truth = _truth(index)
    if solved:
        return sum(len(calls) + 1 for calls in truth)
    return len(truth) + (1 if truth[0] else 0)


def _plan(argv: list[str], capsys) -> str:
    assert run_cli([*argv, "--plan"]) == 0, capsys.readouterr().err[-3000:]
    out = capsys.readouterr().out
    (line,) = [x for x in out.splitlines() if x.strip().startswith("brew:")]
    return line


def test_agentbrew_brews_on_bfcl_resumes_after_sigkill_serves_and_reports(
    tmp_path, monkeypatch, capsys
):
    gate = tmp_path / "gate"
    gate.mkdir()
    monkeypatch.setenv("AGENTBREW_GATE", str(gate))
    # `--plan` here shows the stage lines, without the pre-flight's probe of the
    # endpoints: a probe would be one more request to the counting teacher.
    monkeypatch.setattr(
        "distillery.orchestrator.planning.plan_check.world_problems", lambda *args, **kwargs: []
    )
    env = {**os.environ, "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0", "HF_HUB_OFFLINE": "1",
           "MLFLOW_DISABLE_TELEMETRY": "true"}  # fmt: skip
    tracking = f"sqlite:///{tmp_path / 'mlflow.db'}"
    runs = tmp_path / "runs"
    with (
        run_stub_server(script="distillery.testing.agentbrew_scripts:student") as student_url,
        run_stub_server(script="distillery.testing.agentbrew_scripts:teacher") as teacher_url,
    ):
        argv = [
            "methods=[zero_shot,agentbrew,amd_wf_st_fn,agentbrew_amd]",
            "protocol=cross_split",
            "benchmark.limit=10",
            "experiment.name=agentbrew_e2e",
            f"output_dir={runs}",
            f"tracking.uri={tracking}",
            "agent.retry_backoff_s=0",
            "cluster.num_workers=1",
            "student=external",
            "student.name=brew-student",
            f"student.base_url={student_url}",
            "student.model=scripted",
            "student.action_format=prompt",
            "student.max_retries=1",
            "student.retry_backoff_s=0",
            "teacher=external",
            "teacher.name=brew-teacher",
            f"teacher.base_url={teacher_url}",
            "teacher.model=scripted-teacher",
            "teacher.max_retries=1",
            "teacher.retry_backoff_s=0",
        ]
        monkeypatch.chdir(tmp_path)
        assert "run 7 of 7 tasks in order (0 done), build" in _plan(argv, capsys)

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

        # Task 1 is done (its note committed); task 2's first play is in the log.
        assert "run 6 of 7 tasks in order (1 done), build" in _plan(argv, capsys)
        done = subprocess.run([*_distillery(), *argv], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=900)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "cached (7 tasks" in _plan(argv, capsys)
        student_calls = stub_stats(student_url)["requests"]
        teacher_calls = stub_stats(teacher_url)["requests"]

    # The event log: every play, answer, staged and committed note and decision, once.
    (stage_dir,) = (runs / "stages" / "brew").iterdir()
    journal = [json.loads(p.read_text()) for p in sorted((stage_dir / "journal").glob("*.json"))]
    assert [(int(r["task"].rsplit("_", 1)[1]), r["kind"]) for r in journal] == EXPECTED_LOG
    assert [r["decision"] for r in journal if r["kind"] == "curated"] == ["add"] * 3

    # The bank: three certified notes in one scope, each shown to the tasks after it.
    notes = {}
    for record in journal:
        for entry in record.get("entries", []) if record["kind"] == "committed" else []:
            if entry["collection"] == "notes":
                notes[entry["note_key"]] = entry
    groups = {1: "GorillaFileSystem", 2: "GorillaFileSystem+TicketAPI",
              5: "GorillaFileSystem+TwitterAPI"}  # fmt: skip
    assert sorted(notes) == sorted(note_key(g) for g in groups.values())
    assert all(n["certified"] and n["scope"] == "bfcl_multi_turn" for n in notes.values())
    output = json.loads((stage_dir / "output.json").read_text())
    assert output["counts"]["notes"] == 3 and output["counts"]["scopes"] == 1

    # Exact model calls. The student: zero-shot on the held-out tasks, the brew's first
    # plays and its three re-plays (each once: the killed run's were replayed, not
    # redone), the held-out tasks with the notes (all solved). The teacher's server:
    # three drafts and two curator verdicts, plus the draft in flight at the kill.
    zero_shot = sum(_play_calls(i, i in EASY) for i in HELD_OUT)
    brew = sum(_play_calls(i, i in EASY or i == 7) for i in MEMORY)
    brew += sum(_play_calls(i, True) for i in groups)
    evaluated = sum(_play_calls(i, True) for i in HELD_OUT)
    assert zero_shot == 24 and evaluated == 36

    # MLflow: the four points, and the brew's own run with the paper's Table 3.
    client = MlflowClient(tracking)
    experiment = client.get_experiment_by_name("distillery")
    found = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    children = [r for r in found if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    points = {r.data.tags["method"]: r for r in children if "method" in r.data.tags}
    rates = {m: r.data.metrics["success_rate"] for m, r in points.items()}
    assert rates == pytest.approx(
        {"zero_shot": 1 / 3, "agentbrew": 1.0, "amd_wf_st_fn": 1 / 3, "agentbrew_amd": 1.0}
    )
    both = points["agentbrew_amd"].data.metrics
    # Its banks are the ones each method reads alone (one brew, one AMD build), joined.
    assert both["bank_notes"] == 3 and both["bank_wf"] == points["amd_wf_st_fn"].data.metrics[
        "bank_wf"]  # fmt: skip
    assert both["notes_shown"] == 9 and both["isolation_violations"] == 0
    # The teacher's server: its collection and AMD's builder requests (as their stages
    # count them), three drafts and two curator verdicts, and the draft in flight at
    # the kill, sent again.
    amd = points["amd_wf_st_fn"].data.metrics
    # AMD's memory does not help this student, but its hooks ask the student's model
    # (counted in its plays); with the notes beside it, every task is solved.
    amd_calls = amd["cost.evaluate.student.n_llm_calls"]
    assert both["cost.evaluate.student.n_llm_calls"] == evaluated + amd_calls - zero_shot
    assert student_calls == zero_shot + brew + evaluated + amd_calls + (
        evaluated + amd_calls - zero_shot
    )
    assert teacher_calls == (
        amd["cost.collect.teacher.n_llm_calls"] + amd["cost.build.builder.n_llm_calls"] + 3 + 2 + 1
    )
    served = points["agentbrew"].data.metrics
    assert served["vanilla_fallback"] == 0 and served["isolation_violations"] == 0
    assert served["route_explicit"] == 3  # the scope's functions are the task's
    assert served["cost.brew.teacher.n_llm_calls"] == 3
    assert served["cost.brew.curator.n_llm_calls"] == 2
    assert served["cost.brew.student.n_llm_calls"] == brew
    (brewed,) = [r for r in children if r.data.tags.get("distillery.stage_key")]
    metrics = brewed.data.metrics
    assert metrics["brew.failed_tasks"] == 3 and metrics["brew.ralph_committed"] == 3
    assert metrics["brew.training_success_rate"] == pytest.approx(4 / 7)
    assert metrics["brew.identity_holds"] == 1 and metrics["brew.notes"] == 3
    assert metrics["cost.teacher.n_llm_calls"] == 3 and metrics["cost.curator.n_llm_calls"] == 2
    artifacts = {a.path for a in client.list_artifacts(brewed.info.run_id)}
    assert {"events.json", "notes.json", "figures.json", "trajectories"} <= artifacts
    traces = client.search_traces(locations=[experiment.experiment_id], run_id=brewed.info.run_id)
    assert len(traces) == 7 + 3  # one per play
    assert sorted(t.info.tags["distillery.task_id"] for t in traces)[:2] == [
        "multi_turn_base_1#1", "multi_turn_base_1#2"
    ]  # fmt: skip

    # `distillery report`: Table 3 for the brew, its cost beside the serving cost.
    (sweep_dir,) = re.findall(r"^Report: distillery report (\S+)$", done.stdout, re.M)
    assert route(["report", sweep_dir]) == 0, capsys.readouterr().err[-3000:]
    table = pd.read_csv(Path(sweep_dir) / "report" / "stage_brew_figures.csv")
    column = table.columns[1]
    values = dict(zip(table["figure"], table[column], strict=True))
    assert values["Failed tasks"] == "3" and values["Ralph committed tasks"] == "3"
    assert values["Note write rate"] == "100.0%" and values["Notes in knowledge base"] == "3"
    assert values[next(k for k in values if k.startswith("F = "))] == "holds"
    costs = pd.read_csv(Path(sweep_dir) / "report" / "stage_brew_figures_costs.csv")
    assert set(costs["role"]) == {"student", "teacher", "curator"}
    assert any(w.startswith("evaluation: agentbrew") for w in costs["what"])
    markdown = (Path(sweep_dir) / "report" / "report.md").read_text()
    assert "## Table 3: brew statistics" in markdown
