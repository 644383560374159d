"""The AgentBrew paper's Table 1 layout in `distillery report` (`report.groups`): groups
from what each point recorded (never its name), teacher and test-time columns, two
splits of one benchmark as two columns, cells with n, the 95 % interval and paired
tests against zero-shot and AgentBrew, and the test-time cost per task (plays and
every model's tokens of the scoring stage). Every number is checked by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distillery.orchestrator.report import build_report
from distillery.orchestrator.report.groups import group_of, rollouts_label
from distillery.orchestrator.state import sweep_tables
from distillery.workers.storage import Location

T, F = True, False
TASKS = ["t1", "t2", "t3", "t4"]
# method -> (kind, uses_teacher, rollouts, feedback, outcomes per split, plays per task)
METHODS = {
    "zero_shot": ("zero_shot", F, 1, F, {"test_normal": [T, F, F, F], "test_challenge": [F, F, F, F]}, 1),
    "reflexion_k3": ("reflexion", F, 3, T, {"test_normal": [T, T, T, F], "test_challenge": [T, F, F, F]}, 2),
    "expel": ("expel", T, 1, F, {"test_normal": [T, T, F, F], "test_challenge": [F, T, F, F]}, 1),
    "agentbrew": ("agentbrew", T, 1, F, {"test_normal": [T, T, T, T], "test_challenge": [T, T, F, F]}, 1),
}  # fmt: skip
VARIANT = {"test_normal": "", "test_challenge": "split=test_challenge"}


def write_sweep(root: Path, groups: bool | None) -> Path:
    sweep = root / "sweeps" / "t1"
    sweep.mkdir(parents=True)
    report = {"references": ["zero_shot", "agentbrew"]}
    if groups is not None:
        report["groups"] = groups
    meta = {"sweep_id": "t1", "experiment": "agentbrew_table1_appworld", "created_at": 1.7e9,
            "report": report}  # fmt: skip
    (sweep / "sweep.json").write_text(json.dumps(meta))
    points, episodes, stages = [], [], []
    for method, (kind, teacher, rollouts, feedback, runs, plays) in METHODS.items():
        for split, outcomes in runs.items():
            pid = f"{method}-{split}"
            points.append(
                {
                    "point_id": pid, "method": method, "method_kind": kind, "role": "student",
                    "agent": "qwen3-14b", "student": "qwen3-14b", "teacher": "deepseek",
                    "benchmark": "appworld", "benchmark_variant": VARIANT[split],
                    "protocol": "split", "memory_types": "", "seed": 0,
                    "eval_task_ids_sha": split, "upstream": [f"S{pid}"], "stage": f"S{pid}",
                    "uses_teacher": teacher, "test_time_rollouts": rollouts,
                    "test_time_feedback": feedback,
                    **({"learning_feedback": "binary"} if kind != "zero_shot" else {}),
                }
            )  # fmt: skip
            for task, success in zip(TASKS, outcomes, strict=True):
                episodes.append(
                    {
                        "point_id": pid, "task_id": task, "success": success,
                        "termination": "done", "total_steps": 1, "n_llm_calls": plays,
                        "tokens_in": 100 * plays, "tokens_out": 10, "wall_s": 1.0,
                        "attempt": plays if not success or plays == 1 else 1,
                    }
                )  # fmt: skip
            # The scoring stage: the student's plays, and a Reflexion stage's reflector.
            stages.append({"stage_hash": f"S{pid}", "kind": kind, "role": "student",
                           "model": "qwen3-14b", "tokens_in": 400, "tokens_out": 40,
                           "n_llm_calls": 4, "ran": True})  # fmt: skip
            if kind == "reflexion":
                stages.append({"stage_hash": f"S{pid}", "kind": kind, "role": "reflector",
                               "model": "qwen3-14b", "tokens_in": 200, "tokens_out": 60,
                               "n_llm_calls": 2, "ran": True})  # fmt: skip
    for spec, rows in zip(sweep_tables.TABLES, (points, episodes, stages), strict=True):
        sweep_tables.write_sweep_table(Location.of(sweep / spec.file), spec, rows)
    return sweep


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(write_sweep(tmp_path_factory.mktemp("runs"), True), log_to_mlflow=False)


def test_groups_follow_what_each_point_recorded():
    assert [group_of(F, 1), group_of(F, 2), group_of(T, 1), group_of(T, 3)] == [
        "I", "II", "III", "IV"
    ]  # fmt: skip
    assert rollouts_label(1, F) == "1 rollout" and rollouts_label(3, T) == "3 rollouts + fb"


def test_the_grouped_table_has_the_papers_columns_and_tests(report):
    table = report.tables["table1_groups"].set_index("Method")
    assert list(table.columns) == ["Group", "Student", "Teacher", "Test-time", "Learns from",
                                   "appworld", "appworld (split=test_challenge)"]  # fmt: skip
    # Every learning method's feedback (one setting); zero-shot learns nothing.
    assert table.loc["agentbrew", "Learns from"] == table.loc["expel", "Learns from"] == "binary"
    assert table.loc["zero_shot", "Learns from"] == "–"
    assert list(table.index) == ["zero_shot", "reflexion_k3", "agentbrew", "expel"]
    assert table.loc["zero_shot", "Group"] == "I: student-only, single rollout"
    assert table.loc["reflexion_k3", "Group"].startswith("II: student-only, multi-rollout")
    assert table.loc["expel", "Group"] == "III: teacher-augmented, single rollout"
    assert table.loc["reflexion_k3", "Test-time"] == "3 rollouts + fb"
    assert (table.loc["zero_shot", "Teacher"], table.loc["agentbrew", "Teacher"]) == ("✗", "✓")
    cell = table.loc["expel", "appworld"]
    assert cell.startswith("50.0% [") and "n=4" in cell
    # Paired on the same tasks: expel [T T F F] vs zero-shot [T F F F]: b 1, c 0;
    # vs AgentBrew [T T T T]: b 0, c 2 (McNemar exact p = 0.5).
    assert "vs zero_shot: +25.0 pp (p=1.000)" in cell and "vs agentbrew: -50.0 pp (p=0.500)" in cell
    challenge = table.loc["reflexion_k3", "appworld (split=test_challenge)"]
    assert challenge.startswith("25.0% [") and "vs agentbrew: -25.0 pp" in challenge
    md = (report.out_dir / "report.md").read_text()
    assert "## Table 1 by test-time group (protocol: split)" in md


def test_test_time_cost_is_plays_and_every_models_tokens_per_task(report):
    cost = report.tables["table1_test_time"].set_index("Method")
    # Reflexion on test_normal: plays 1, 1, 1 (solved on... see `attempt`) and 2 for the
    # unsolved task -> mean 1.25; tokens (440 student + 260 reflector) / 4 tasks = 175.
    assert cost.loc["reflexion_k3", "appworld"] == "1.25 plays · 175 tok"
    assert cost.loc["zero_shot", "appworld"] == "1.00 plays · 110 tok"


def test_off_unless_the_sweep_asks_and_an_old_sweep_says_why(tmp_path):
    plain = build_report(write_sweep(tmp_path / "plain", None), log_to_mlflow=False)
    assert "table1_groups" not in plain.tables and "table1" in plain.tables
    old = write_sweep(tmp_path / "old", True)
    points = sweep_tables.read_sweep_table(
        sweep_tables.POINTS, (old / "points.parquet").read_bytes(), "points"
    ).drop_columns(["uses_teacher", "test_time_rollouts", "test_time_feedback"])
    import pyarrow.parquet as pq

    pq.write_table(points, old / "points.parquet")
    report = build_report(old, log_to_mlflow=False)
    assert "table1_groups" not in report.tables
    assert any(n.startswith("grouped table 1: no student point records") for n in report.notes)
