"""Scenario goal completion (AppWorld's second official metric) in `distillery report`.

The episodes table is written as a sweep writes it: each row from an `EpisodeRecord`
through `EpisodeSummary.of` (what the ledger keeps) and the runner's own row builder and
table writer, so the scenario id travels the way it does in a real run. Every number is
checked against one counted by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from distillery.orchestrator.report import build_report
from distillery.orchestrator.report.scenarios import scenario_benchmarks
from distillery.orchestrator.stages.stage import StageKey
from distillery.orchestrator.state import sweep_tables
from distillery.orchestrator.state.ledger import Ledger
from distillery.orchestrator.tracking.results import _episode_columns
from distillery.workers.storage import Location
from distillery.workers.trajectories import EpisodeSummary, write_episode
from tests.support.records import episode_record

T, F, N = True, False, None
# AppWorld-style task ids: the scenario is the id before `_`. None: an infrastructure
# failure (not scored).
ZERO_SEED0 = {
    "s1_1": T, "s1_2": T, "s1_3": F,  # 2 of 3 succeed: the scenario is not completed
    "s2_1": T, "s2_2": T,  # completed
    "s3_1": T, "s3_2": N,  # one task unscored: the scenario is unscored
    "s4_1": F,  # not completed
}  # fmt: skip
ZERO_SEED1 = {**ZERO_SEED0, "s1_3": T, "s4_1": T}  # s1, s2, s4 completed
AMD_SEED0 = {task: T for task in ZERO_SEED0}  # s3_2 scored too: four of four
# point_id -> (benchmark, method, kind, seed, outcomes)
POINTS = {
    "aw-zero-0": ("appworld", "zero_shot", "zero_shot", 0, ZERO_SEED0),
    "aw-zero-1": ("appworld", "zero_shot", "zero_shot", 1, ZERO_SEED1),
    "aw-amd-0": ("appworld", "amd_appworld", "amd", 0, AMD_SEED0),
    # BFCL's tasks have groups (their API classes) but they are no scenarios.
    "bfcl-zero-0": ("bfcl_multi_turn_base", "zero_shot", "zero_shot", 0, ZERO_SEED0),
}


def _row(point_id: str, benchmark: str, task_id: str, success: bool | None) -> dict:
    record = episode_record(task_id, success, benchmark=benchmark, group_id=task_id.split("_")[0])
    return {"point_id": point_id, **_episode_columns(EpisodeSummary.of(record))}


def write_sweep(root: Path, with_groups: bool = True, benchmarks: tuple[str, ...] = ()) -> Path:
    sweep = root / "sweeps" / "aw"
    sweep.mkdir(parents=True)
    meta = {"sweep_id": "aw", "experiment": "appworld_table1", "created_at": 1.7e9}
    (sweep / "sweep.json").write_text(json.dumps(meta))
    points, episodes = [], []
    for pid, (benchmark, method, kind, seed, outcomes) in POINTS.items():
        if benchmarks and benchmark not in benchmarks:
            continue
        points.append(
            {
                "point_id": pid, "method": method, "method_kind": kind, "role": "student",
                "agent": "qwen3_4b", "student": "qwen3_4b", "teacher": "gpt5_mini",
                "student_params_b": 4.0, "benchmark": benchmark, "protocol": "cross_split",
                "memory_types": "", "seed": seed, "temperature": None,
                "sampling_seed": None, "eval_task_ids_sha": "sha", "upstream": [f"E{pid}"],
                "stage": f"E{pid}", "mlflow_run_id": None,
            }
        )  # fmt: skip
        for task, success in outcomes.items():
            row = _row(pid, benchmark, task, success)
            if not with_groups:  # an episodes table written before it kept the scenario
                del row["group_id"]
            episodes.append(row)
    stages = [
        {"stage_hash": p["stage"], "kind": "evaluate", "model": "m", "tokens_in": 1,
         "tokens_out": 1, "n_llm_calls": 1, "embed_tokens": 0, "wall_s": 1.0, "gpu_s": 0.0,
         "ran": True}
        for p in points
    ]  # fmt: skip
    for spec, rows in zip(sweep_tables.TABLES, (points, episodes, stages), strict=True):
        sweep_tables.write_sweep_table(Location.of(sweep / spec.file), spec, rows)
    return sweep


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(write_sweep(tmp_path_factory.mktemp("runs")), log_to_mlflow=False)


def test_the_scenario_id_travels_from_the_record_to_the_episodes_table(tmp_path):
    record = episode_record("abc_2", True, group_id="abc")
    summary = EpisodeSummary.of(record)
    assert summary.group_id == "abc"
    assert _episode_columns(summary)["group_id"] == "abc"
    # The ledger keeps it, for a recorded episode and for one adopted from its file.
    ledger = Ledger(tmp_path / "ledger")
    key = StageKey("evaluate", "ab" * 32)
    written = write_episode(ledger.episodes_dir(key), record)
    ledger.record_episode(key, EpisodeSummary.of(record, written))
    write_episode(ledger.episodes_dir(key), episode_record("abc_3", False, group_id="abc"))
    kept = ledger.all_records(key)
    assert {task: s.group_id for task, s in kept.items()} == {"abc_2": "abc", "abc_3": "abc"}
    sweep = write_sweep(tmp_path)
    table = pd.read_parquet(sweep / "episodes.parquet")
    assert dict(zip(table["task_id"], table["group_id"], strict=True))["s1_3"] == "s1"


def test_only_benchmarks_whose_groups_are_scenarios_get_the_metric():
    assert scenario_benchmarks(["appworld", "bfcl_multi_turn_base", "gone"]) == {"appworld"}


def test_scenario_goal_completion_per_method_student_and_seed(report):
    table = report.tables["scenario_goal_completion"].set_index("point_id")
    assert set(table.index) == {"aw-zero-0", "aw-zero-1", "aw-amd-0"}  # no BFCL row
    zero0 = table.loc["aw-zero-0"]
    # Tasks: 7 scored (s3_2 is not), 5 succeed. Scenarios: s1 (2 of 3: not completed),
    # s2 (completed), s4 (not completed) scored; s3 unscored.
    assert (zero0["n_tasks"], zero0["task_successes"]) == (7, 5)
    assert zero0["task_rate"] == pytest.approx(5 / 7)
    assert (zero0["n_scenarios"], zero0["scenarios_completed"]) == (3, 1)
    assert zero0["scenario_rate"] == pytest.approx(1 / 3)
    assert zero0["n_scenarios_unscored"] == 1
    zero1 = table.loc["aw-zero-1"]
    assert (zero1["seed"], zero1["n_scenarios"], zero1["scenarios_completed"]) == (1, 3, 3)
    assert zero1["task_rate"] == pytest.approx(1.0)
    amd = table.loc["aw-amd-0"]
    assert (amd["method"], amd["n_scenarios"], amd["scenarios_completed"]) == ("amd_appworld", 4, 4)
    assert (amd["n_tasks"], amd["n_scenarios_unscored"]) == (8, 0)
    # The task rate is the report's own success rate of the point.
    cells = report.tables["cells"].set_index("method")
    assert cells.loc["amd_appworld", "rate"] == pytest.approx(amd["task_rate"])


def test_report_md_shows_both_metrics_and_the_csv(report):
    md = (report.out_dir / "report.md").read_text()
    assert "## Task and scenario goal completion" in md
    section = md.split("## Task and scenario goal completion", 1)[1].split("\n## ", 1)[0]
    assert "scenario goal completion" in section and "task goal completion" in section
    assert "33.3% [" in section and "n=3" in section  # zero-shot seed 0's 1 of 3
    assert "71.4% [" in section and "n=7" in section  # its 5 of 7 tasks
    assert "bfcl" not in section
    csv = pd.read_csv(report.out_dir / "scenario_goal_completion.csv")
    assert len(csv) == 3


def test_bfcl_alone_gets_no_scenario_metric(tmp_path):
    sweep = write_sweep(tmp_path, benchmarks=("bfcl_multi_turn_base",))
    report = build_report(sweep, log_to_mlflow=False)
    assert "scenario_goal_completion" not in report.tables
    assert not (report.out_dir / "scenario_goal_completion.csv").exists()
    assert "scenario goal completion" not in (report.out_dir / "report.md").read_text().lower()


def test_episodes_without_scenario_ids_get_no_number_and_a_note(tmp_path):
    report = build_report(write_sweep(tmp_path, with_groups=False), log_to_mlflow=False)
    assert "scenario_goal_completion" not in report.tables
    assert any("without a scenario id" in note for note in report.notes)
