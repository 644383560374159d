"""Paper table 1 and figure 3 in `distillery report`: every student method against the
sweep's reference methods (zero-shot and AMD by the project's config; any method by
`--against`), pooled over seeds into a method x student x benchmark table, and the
steps per episode of every method. The sweep is written with the runner's own writer
(`sweep_tables.write_sweep_table`); every number is checked against one by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from distillery.orchestrator.core.stats import mcnemar
from distillery.orchestrator.report import build_report, main
from distillery.orchestrator.state import sweep_tables
from distillery.workers.storage import Location

T, F = True, False
TASKS = [f"t{i}" for i in range(1, 7)]
AMD_COLUMNS = {
    "memory_types": "wf+st+fn",
    "k_wf": 1, "delta_wf": 0.5, "repr_wf": "text",
    "k_st": 1, "delta_st": 0.5, "repr_st": "code",
    "k_fn": 1, "delta_fn": 0.5, "repr_fn": "code",
}  # fmt: skip
# method -> (kind, role, steps per episode, its own report columns, outcomes per seed)
METHODS = {
    "teacher": ("teacher", "teacher", 5, {}, {0: [T, T, T, T, T, T]}),
    "zero_shot": ("zero_shot", "student", 10, {}, {0: [T, F, F, F, F, F], 1: [T, F, F, F, F, F]}),
    "trajectory_rag": (
        "trajectory_rag", "student", 7, {"k_traj": 1},
        {0: [T, T, F, F, F, F], 1: [T, F, T, F, F, F]},
    ),
    "amd_wf_st_fn": (
        "amd", "student", 4, AMD_COLUMNS, {0: [T, T, T, T, F, F], 1: [T, T, T, F, T, F]}
    ),
}  # fmt: skip


def write_sweep(root: Path, references: list[str] | None) -> Path:
    sweep = root / "sweeps" / "table1"
    sweep.mkdir(parents=True)
    meta = {"sweep_id": "table1", "experiment": "bfcl_table1", "created_at": 1.7e9}
    if references is not None:
        meta["report"] = {"references": references}
    (sweep / "sweep.json").write_text(json.dumps(meta))
    points, episodes = [], []
    for method, (kind, role, steps, columns, runs) in METHODS.items():
        for seed, outcomes in runs.items():
            pid = f"{method}-{seed}"
            points.append(
                {
                    "point_id": pid, "method": method, "method_kind": kind, "role": role,
                    "agent": "gpt4o" if role == "teacher" else "qwen3_4b",
                    "student": "qwen3_4b", "teacher": "gpt4o", "student_params_b": 4.0,
                    "benchmark": "bfcl", "protocol": "main", "memory_types": "",
                    "seed": seed, "temperature": None, "sampling_seed": None,
                    "eval_task_ids_sha": "sha-all", "upstream": ["C"], "stage": f"E{pid}",
                    "mlflow_run_id": None, **columns,
                }
            )  # fmt: skip
            for task, success in zip(TASKS, outcomes, strict=True):
                episodes.append(
                    {
                        "point_id": pid, "task_id": task, "success": success,
                        "termination": "done", "error_type": None, "total_steps": steps,
                        "n_llm_calls": steps, "tokens_in": 100, "tokens_out": 10,
                        "wall_s": 1.0,
                    }
                )  # fmt: skip
    stages = [
        {"stage_hash": h, "kind": "evaluate", "model": "m", "tokens_in": 1, "tokens_out": 1,
         "n_llm_calls": 1, "embed_tokens": 0, "wall_s": 1.0, "gpu_s": 0.0, "ran": True}
        for h in ["C", *(p["stage"] for p in points)]
    ]  # fmt: skip
    for spec, rows in zip(sweep_tables.TABLES, (points, episodes, stages), strict=True):
        sweep_tables.write_sweep_table(Location.of(sweep / spec.file), spec, rows)
    return sweep


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    sweep = write_sweep(tmp_path_factory.mktemp("runs"), ["zero_shot", "amd"])
    return build_report(sweep, log_to_mlflow=False)


def _tests(report):
    tests = report.tables["mcnemar_references"]
    return {(r["method"], r["reference"], r["seed"]): r for r in tests.to_dict("records")}


def test_every_method_is_tested_against_zero_shot_and_amd_per_seed(report):
    tests = _tests(report)
    # zero-shot and AMD are references: AMD is tested against zero-shot only, zero-shot
    # against nothing (zero-shot vs AMD is AMD vs zero-shot), and nothing against itself.
    assert set(tests) == {
        ("trajectory_rag", "zero_shot", 0), ("trajectory_rag", "zero_shot", 1),
        ("trajectory_rag", "amd", 0), ("trajectory_rag", "amd", 1),
        ("amd_wf_st_fn", "zero_shot", 0), ("amd_wf_st_fn", "zero_shot", 1),
    }  # fmt: skip
    rag0 = tests[("trajectory_rag", "zero_shot", 0)]
    assert (rag0["reference_point_id"], rag0["n_pairs"], rag0["b"], rag0["c"]) == (
        "zero_shot-0", 6, 1, 0,
    )  # fmt: skip
    vs_amd1 = tests[("trajectory_rag", "amd", 1)]
    assert vs_amd1["reference_method"] == "amd_wf_st_fn" and vs_amd1["reference_point_id"] == (
        "amd_wf_st_fn-1"
    )
    # trajectory_rag seed 1 [T F T F F F] vs AMD [T T T F T F]: only AMD solved t2, t5.
    assert (vs_amd1["b"], vs_amd1["c"], vs_amd1["both"], vs_amd1["neither"]) == (0, 2, 2, 2)
    assert vs_amd1["p"] == pytest.approx(mcnemar(0, 2).p) == pytest.approx(0.5)
    # The zero-shot table is as before: every memory method against zero-shot.
    assert set(report.tables["mcnemar"]["method"]) == {"trajectory_rag", "amd_wf_st_fn"}


def test_table1_pools_the_seeds_and_shows_gain_and_p_per_reference(report):
    pooled = report.tables["table1_tests"]
    row = pooled[(pooled["method"] == "trajectory_rag") & (pooled["reference"] == "amd")].iloc[0]
    # Seeds pooled: 12 task pairs; b = 0, c = 2 + 2; the method solved 4, AMD 8.
    assert (row["n_pairs"], row["b"], row["c"]) == (12, 0, 4)
    assert row["gain_pp"] == pytest.approx(100 * (4 - 8) / 12)
    assert row["p"] == pytest.approx(0.125)  # exact: 2 * 0.5**4
    vs_zero = pooled[(pooled["method"] == "trajectory_rag") & (pooled["reference"] == "zero_shot")]
    assert vs_zero.iloc[0]["gain_pp"] == pytest.approx(100 * (4 - 2) / 12)

    table = report.views["table1"].set_index("method")
    cell = table.loc["trajectory_rag", "bfcl"]
    assert cell.startswith("33.3% [") and "n=12" in cell  # rate, 95 % CI, n
    assert "vs zero_shot: +16.7 pp (p=0.500)" in cell
    assert "vs amd_wf_st_fn: -33.3 pp (p=0.125)" in cell
    assert "vs zero_shot: +50.0 pp" in table.loc["amd_wf_st_fn", "bfcl"]
    assert " vs " not in table.loc["zero_shot", "bfcl"]  # a reference row: its own numbers
    assert list(table.index)[:2] == ["teacher", "zero_shot"]  # then the memory methods
    assert set(table.index) == set(METHODS)
    md = (report.out_dir / "report.md").read_text()
    assert "## Table 1: method × student × benchmark against the references" in md
    assert "## Paired tests against the reference methods (McNemar)" in md


def test_steps_per_episode_for_every_method(report):
    steps = report.tables["steps_by_method"].set_index("method")
    assert steps["mean_steps"].to_dict() == {
        "teacher": 5.0, "zero_shot": 10.0, "trajectory_rag": 7.0, "amd_wf_st_fn": 4.0,
    }  # fmt: skip
    assert steps.loc["zero_shot", "n"] == 12 and steps.loc["teacher", "n"] == 6
    path = report.plots["steps_by_method"]
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert (
        "![Steps per episode by method](steps_by_method.png)"
        in (report.out_dir / "report.md").read_text()
    )


def test_references_come_from_the_sweep_or_the_command_line(tmp_path, capsys):
    # A sweep recorded before `report.references` existed: zero-shot only, as before.
    old = write_sweep(tmp_path / "old", None)
    refs = set(build_report(old, log_to_mlflow=False).tables["mcnemar_references"]["reference"])
    assert refs == {"zero_shot"}
    # Any method, by catalog name or kind, from the command line.
    assert main([str(old), "--no-mlflow", "--against", "trajectory_rag"]) == 0
    capsys.readouterr()
    tests = pd.read_csv(old / "report" / "mcnemar_references.csv")
    assert set(tests["reference"]) == {"trajectory_rag"}
    assert set(tests["method"]) == {"zero_shot", "amd_wf_st_fn"}
    again = build_report(old, log_to_mlflow=False, references=["amd_wf_st_fn"])
    by_name = again.tables["mcnemar_references"]
    assert set(by_name["method"]) == {"zero_shot", "trajectory_rag"}
    assert set(by_name["reference_method"]) == {"amd_wf_st_fn"}
    # A reference the sweep does not have is no test (and no error).
    none = build_report(old, log_to_mlflow=False, references=["sasm"])
    assert none.tables["mcnemar_references"].empty
