"""AgentBrew's baselines end to end through the real `distillery` command, one sweep
for all of them (they share its Ray start, its collection and its zero-shot point):
GSM8K with protocol=split (memory from the first 4 training problems, evaluation on
the first 4 test problems), a scripted student and a scripted teacher
(players.py), zero-shot, Reflexion k = 2, Simple RAG, ExpeL and ACE; then
`distillery report` with the AgentBrew paper's Table 1 layout.

Checked: each method's success, Reflexion's plays and reflections task by task (the
student's first play is the zero-shot prompt, a re-play reads its own reflection only),
the banks ExpeL and ACE wrote on the memory split (nothing of the evaluated split), the
isolation audit, every model call counted exactly, the cost rows per model and role in
MLflow and the report, and the grouped Table 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.cli.app import route
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.trajectories import read_episode_file
from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow

METHODS = ["zero_shot", "reflexion_k2", "simple_rag", "expel", "ace"]


def _distillery() -> list[str]:
    script = Path(sys.executable).with_name("distillery")
    return (
        [str(script)]
        if script.is_file()
        else [sys.executable, "-m", "distillery.orchestrator.cli.app"]
    )


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, gsm8k):
    """The sweep, run once; (its output root, its stdout, the servers' request counts)."""
    root = tmp_path_factory.mktemp("baselines")
    env = {
        **os.environ,
        "BASELINES_GSM8K": str(gsm8k),
        "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]),
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "HF_HUB_OFFLINE": "1",
        "MLFLOW_DISABLE_TELEMETRY": "true",
    }
    previous = os.environ.get("BASELINES_GSM8K")
    os.environ["BASELINES_GSM8K"] = str(gsm8k)  # the servers read it
    try:
        with (
            run_stub_server("tests.workers.memory.baselines.players:student") as student_url,
            run_stub_server("tests.workers.memory.baselines.players:teacher") as teacher_url,
        ):
            argv = [
                "benchmark=gsm8k", f"+benchmark.options.data_path={gsm8k}", "benchmark.limit=4",
                "protocol=split", "protocol.memory_split=train", "protocol.memory_limit=4",
                f"methods=[{','.join(METHODS)}]", "report.groups=true",
                "report.references=[zero_shot,expel]",
                "student=external", "student.name=stu", f"student.base_url={student_url}",
                "student.model=scripted", "student.max_retries=1", "student.retry_backoff_s=0",
                "teacher=external", "teacher.name=tea", f"teacher.base_url={teacher_url}",
                "teacher.model=scripted", "teacher.max_retries=1", "teacher.retry_backoff_s=0",
                f"output_dir={root / 'runs'}", f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
                "cluster.num_workers=1", "agent.retry_backoff_s=0",
            ]  # fmt: skip
            done = subprocess.run(
                [*_distillery(), *argv], cwd=root, env=env, capture_output=True, text=True,
                timeout=900,
            )  # fmt: skip
            assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
            calls = (stub_stats(student_url)["requests"], stub_stats(teacher_url)["requests"])
    finally:
        if previous is None:
            os.environ.pop("BASELINES_GSM8K", None)
        else:
            os.environ["BASELINES_GSM8K"] = previous
    return root, done.stdout, calls


def _stage_dir(root: Path, kind: str) -> Path:
    (found,) = (root / "runs" / "stages" / kind).iterdir()
    return found


def _journal(root: Path, kind: str) -> list[dict]:
    folder = _stage_dir(root, kind) / "journal"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_each_baseline_runs_and_is_scored(sweep):
    root, out, _ = sweep
    rates = dict(re.findall(r"^    (\w+)\s+stu\s+success\s+([\d.]+)%", out, re.M))
    # The student alone solves problem 0; any baseline's memory (or its own reflection)
    # adds problems 1 and 2.
    assert rates == {"zero_shot": "25.0", "reflexion_k2": "75.0", "simple_rag": "75.0",
                     "expel": "75.0", "ace": "75.0"}  # fmt: skip


def test_reflexion_replays_each_failed_task_once_with_its_own_reflection(sweep):
    root, _, _ = sweep
    journal = _journal(root, "reflexion")
    plays = [(r["task"], r["attempt"]) for r in journal if r["kind"] == "played"]
    assert sorted(plays) == [("test_0", 1), ("test_1", 1), ("test_1", 2), ("test_2", 1),
                             ("test_2", 2), ("test_3", 1), ("test_3", 2)]  # fmt: skip
    assert sum(r["kind"] == "asked" and r["role"] == "reflector" for r in journal) == 3
    for record in (r for r in journal if r["kind"] == "played"):
        (row,) = read_episode_file(record["summary"]["file"]).to_pylist()
        log = json.loads(row["extra_json"])
        assert row["attempt"] == record["attempt"] == log["attempt"]
        # A first play is the zero-shot prompt; a re-play reads its task's reflection.
        assert log["reflections_shown"] == record["attempt"] - 1
        assert log["reflection_task_mismatch"] == 0
        system = json.loads(row["messages_json"])[0]["content"]
        assert ("[Reflexion memory]" in system) == (record["attempt"] > 1)
    assert not any(r["kind"] == "committed" for r in journal)  # nothing crosses tasks


def test_the_banks_are_written_on_the_memory_split(sweep):
    root, _, _ = sweep
    expel = json.loads((_stage_dir(root, "expel") / "output.json").read_text())
    # Examples: the 3 training problems the teacher solved; insights: 2 rules.
    assert expel["counts"]["examples"] == 3 and expel["counts"]["insights"] == 2
    ace = json.loads((_stage_dir(root, "ace") / "output.json").read_text())
    assert ace["counts"]["bullets"] == 4 and ace["stats"]["events.curated"] == 4
    for kind in ("expel", "ace"):
        tasks = {r["task"] for r in _journal(root, kind)}
        assert tasks == {"train_0", "train_1", "train_2", "train_3"}


def test_every_model_call_is_counted_and_reported(sweep):
    root, out, (student_calls, teacher_calls) = sweep
    # The student: 4 zero-shot, 7 Reflexion plays and 3 reflections, 4 per memory method.
    assert student_calls == 4 + 7 + 3 + 3 * 4
    # The teacher: the collection's 4 plays; ExpeL's 8 plays (train_1 twice, train_3 four
    # times), 4 reflections, 1 compare and 1 all-success critique; ACE's 8 plays, 6
    # reflections (one per play but the last of train_3) and 4 curations.
    assert teacher_calls == 4 + (8 + 4 + 2) + (8 + 6 + 4)
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("distillery").experiment_id])
    children = {r.data.tags["method"]: r.data.metrics for r in runs
                if "mlflow.parentRunId" in r.data.tags}  # fmt: skip
    assert sorted(children) == sorted(METHODS)
    reflexion = children["reflexion_k2"]
    assert reflexion["cost.reflexion.student.n_llm_calls"] == 7
    assert reflexion["cost.reflexion.reflector.n_llm_calls"] == 3
    assert reflexion["plays"] == 7 and reflexion["reflections"] == 3
    assert reflexion["solved_on_replay"] == 2
    expel = children["expel"]
    assert expel["cost.expel.teacher.n_llm_calls"] == 8
    assert expel["cost.expel.insights.n_llm_calls"] == 2 and expel["insights_shown"] == 8
    ace = children["ace"]
    assert ace["cost.ace.curator.n_llm_calls"] == 4 and ace["bullets_shown"] == 16
    for method in ("simple_rag", "expel", "ace"):
        assert children[method]["isolation_violations"] == 0
        assert children[method]["isolation_checked"] > 0

    (sweep_dir,) = re.findall(r"^Report: distillery report (\S+)$", out, re.M)
    assert route(["report", sweep_dir, "--no-mlflow"]) == 0
    report = Path(sweep_dir) / "report"
    models = pd.read_csv(report / "costs_models.csv")
    rows = {(r.kind, r.role): r.n_llm_calls for r in models.itertuples()}
    assert rows[("reflexion", "reflector")] == 3 and rows[("ace", "curator")] == 4
    groups = pd.read_csv(report / "table1_groups.csv").set_index("Method")
    assert groups.loc["reflexion_k2", "Test-time"] == "2 rollouts + fb"
    assert groups.loc["reflexion_k2", "Group"].startswith("II:")
    assert {groups.loc[m, "Group"][:4] for m in ("simple_rag", "expel", "ace")} == {"III:"}
    assert groups.loc["zero_shot", "Teacher"] == "✗" and groups.loc["ace", "Teacher"] == "✓"
    assert groups.loc["ace", "gsm8k"].startswith("75.0% [") and "n=4" in groups.loc["ace", "gsm8k"]
    assert "vs zero_shot: +50.0 pp" in groups.loc["ace", "gsm8k"]
    cost = pd.read_csv(report / "table1_test_time.csv").set_index("Method")
    assert cost.loc["reflexion_k2", "gsm8k"].startswith("1.75 plays")
