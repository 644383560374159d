"""`distillery report` and cost accounting on a made-up sweep directory, checked against
numbers computed by hand. Its tables are written by the runner's own writer
(`sweep_tables.write_sweep_table`), so they have every column a real sweep's have."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from distillery.orchestrator.core.stats import mcnemar, wilson_interval
from distillery.orchestrator.report import build_report, cell_label, main
from distillery.orchestrator.report.costs import (
    PriceTable,
    cost_breakdown,
    point_costs,
    stage_costs,
    unpriced_models,
)
from distillery.orchestrator.state import sweep_tables
from distillery.workers.storage import Location

T, F, N = True, False, None
TASKS = [f"t{i}" for i in range(1, 7)]
PRICES = {
    "models": {
        "gpt4o": {"input_per_mtok": 2.5, "output_per_mtok": 10.0},
        "qwen3_4b": {"input_per_mtok": 0.1, "output_per_mtok": 0.4},
    },
    "embedding_per_mtok": 0.02,
    "gpu_hour": 3.6,  # 36 GPU-seconds cost $0.036
}

# point_id -> (method, kind, role, agent, student, params_b, k_wf, seed, upstream, outcomes)
# Outcomes per task t1..t6; None = infrastructure failure (not scored).
MEM = ("C", "B", "R")
POINTS = {
    "pT": (
        "teacher",
        "teacher",
        "teacher",
        "gpt4o",
        "qwen3_4b",
        4.0,
        None,
        0,
        ["C"],
        [T, T, T, T, T, T],
    ),
    "pZ0": (
        "zero_shot",
        "zero_shot",
        "student",
        "qwen3_4b",
        "qwen3_4b",
        4.0,
        None,
        0,
        ["EZ0"],
        [T, F, F, F, F, T],
    ),
    "pZ1": (
        "zero_shot",
        "zero_shot",
        "student",
        "qwen3_4b",
        "qwen3_4b",
        4.0,
        None,
        1,
        ["EZ1"],
        [T, T, F, F, F, F],
    ),
    "pA0": (
        "amd_wf_st_fn",
        "amd",
        "student",
        "qwen3_4b",
        "qwen3_4b",
        4.0,
        1,
        0,
        [*MEM, "EA0"],
        [T, T, T, T, T, F],
    ),
    "pA1": (
        "amd_wf_st_fn",
        "amd",
        "student",
        "qwen3_4b",
        "qwen3_4b",
        4.0,
        1,
        1,
        [*MEM, "EA1"],
        [T, T, T, T, N, N],
    ),
    "pA2": (
        "amd_wf_st_fn",
        "amd",
        "student",
        "qwen3_4b",
        "qwen3_4b",
        4.0,
        2,
        0,
        [*MEM, "EA2"],
        [T, T, T, F, N, N],
    ),
    "pZ8": (
        "zero_shot",
        "zero_shot",
        "student",
        "qwen3_8b",
        "qwen3_8b",
        8.0,
        None,
        0,
        ["EZ8"],
        [T, T, F, F, F, F],
    ),
    "pA8": (
        "amd_wf_st_fn",
        "amd",
        "student",
        "qwen3_8b",
        "qwen3_8b",
        8.0,
        1,
        0,
        [*MEM, "EA8"],
        [T, T, T, T, T, T],
    ),
}
TEACHER_STEPS = [5, 6, 7, 8, 5, 6]


def _stage(h, kind, model, tin, tout, calls, embed, wall, gpu):
    return {"stage_hash": h, "kind": kind, "model": model, "tokens_in": tin,
            "tokens_out": tout, "n_llm_calls": calls, "embed_tokens": embed,
            "wall_s": float(wall), "gpu_s": float(gpu), "ran": True}  # fmt: skip


STAGES = [
    _stage("C", "collect", "gpt4o", 10_000, 2_000, 12, 0, 60, 0),
    _stage("B", "build", "gpt4o", 4_000, 1_000, 6, 8_000, 20, 0),
    _stage("R", "render", "gpt4o", 1_000, 500, 3, 2_000, 5, 0),
    *(
        _stage(h, "evaluate", "qwen3_4b", 3_000, 300, 24, 0, 30, 36)
        for h in ("EZ0", "EZ1", "EA0", "EA1", "EA2")
    ),  # fmt: skip
    *(_stage(h, "evaluate", "qwen3_8b", 3_000, 300, 24, 0, 30, 72) for h in ("EZ8", "EA8")),
]


def write_tables(sweep: Path, points: list[dict], episodes: list[dict], stages=STAGES) -> None:
    """The three tables, written as the runner writes them."""
    for spec, rows in zip(sweep_tables.TABLES, (points, episodes, stages), strict=True):
        sweep_tables.write_sweep_table(Location.of(sweep / spec.file), spec, rows)


def sweep_rows(run_ids: dict[str, str] | None = None) -> tuple[list[dict], list[dict]]:
    """Points and episodes rows of POINTS, as results.py builds them: AMD's points carry
    AMD's report columns (`AmdMethod.report_columns`), the others none."""
    points, episodes = [], []
    for pid, (method, kind, role, agent, student, size, k, seed, up, outcomes) in POINTS.items():
        memory = kind == "amd"
        scored = [o for o in outcomes if o is not None]
        points.append(
            {
                "point_id": pid, "method": method, "method_kind": kind, "role": role,
                "agent": agent, "student": student, "teacher": "gpt4o",
                "student_params_b": size, "benchmark": "bfcl", "protocol": "main",
                "memory_types": "", "seed": seed, "temperature": None, "sampling_seed": None,
                "eval_task_ids_sha": "sha-all", "upstream": up, "stage": up[-1],
                "mlflow_run_id": (run_ids or {}).get(pid),
                # The runner's own counts: the report recounts them from the episodes.
                "success_rate": sum(scored) / len(scored), "n_scored": len(scored),
                "n_unscored": len(outcomes) - len(scored),
            }
        )  # fmt: skip
        if memory:
            points[-1].update(
                {
                    "memory_types": "wf+st+fn",
                    "k_wf": k, "delta_wf": 0.5, "repr_wf": "text",
                    "k_st": 1, "delta_st": 0.5, "repr_st": "code",
                    "k_fn": 1, "delta_fn": 0.5, "repr_fn": "code",
                }
            )  # fmt: skip
        for i, (task, success) in enumerate(zip(TASKS, outcomes, strict=True)):
            steps = TEACHER_STEPS[i] if role == "teacher" else (4 if memory else 10)
            episodes.append(
                {
                    "point_id": pid, "task_id": task, "success": success,
                    "termination": "infra_error" if success is None else "done",
                    "error_type": "infra_error" if success is None else None,
                    "total_steps": steps, "n_llm_calls": steps, "tokens_in": 100,
                    "tokens_out": 10, "wall_s": 1.5,
                }
            )  # fmt: skip
    return points, episodes


def write_sweep(
    root: Path,
    sweep_id: str = "sweep-a",
    created_at: float = 1_700_000_000.0,
    parent_run_id: str | None = None,
    tracking_uri: str = "",
    run_ids: dict[str, str] | None = None,
) -> Path:
    sweep = root / "sweeps" / sweep_id
    sweep.mkdir(parents=True)
    (sweep / "sweep.json").write_text(
        json.dumps(
            {
                "sweep_id": sweep_id,
                "tracking_uri": tracking_uri,
                "parent_run_id": parent_run_id,
                "experiment": "hand_made",
                "created_at": created_at,
                "prices": PRICES,
                "git_sha": "abc1234",
            }
        )
    )
    write_tables(sweep, *sweep_rows(run_ids))
    return sweep


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("runs")
    sweep = write_sweep(root)
    return build_report(sweep, log_to_mlflow=False)


def _cell(report, **keys) -> pd.Series:
    cells = report.tables["cells"]
    mask = pd.Series(True, index=cells.index)
    for key, value in keys.items():
        mask &= cells[key] == value
    assert mask.sum() == 1, keys
    return cells[mask].iloc[0]


# -- statistics -----------------------------------------------------------------------------


def test_wilson_three_of_four_by_hand():
    # p = 0.75, n = 4, z = 1.96: centre = (0.75 + 3.8416/8) / (1 + 3.8416/4) = 0.6279,
    # half = 1.96 * sqrt(0.75*0.25/4 + 3.8416/64) / 1.9604 = 0.3265.
    low, high = wilson_interval(3, 4)
    assert low == pytest.approx(0.3006, abs=1e-4)
    assert high == pytest.approx(0.9544, abs=1e-4)
    assert cell_label(3, 4, 0.75, math.nan, 1) == "75.0% [30.1–95.4] n=4"


def test_mcnemar_exact_and_chi_square_by_hand():
    # b=1, c=5: two-sided exact = 2 * (C(6,0) + C(6,1)) / 2^6 = 14/64.
    exact = mcnemar(1, 5)
    assert (exact.b, exact.c, exact.method) == (1, 5, "exact")
    assert exact.p == pytest.approx(14 / 64)
    assert mcnemar(3, 0).p == pytest.approx(0.25)  # 2 * 1/8
    assert mcnemar(0, 0).p == 1.0
    # b=30, c=10 (40 >= 25 discordant): chi2 = (|30-10|-1)^2/40 = 9.025, P(chi2_1 > 9.025).
    chi = mcnemar(30, 10)
    assert chi.method == "chi2"
    assert chi.statistic == pytest.approx(9.025)
    assert chi.p == pytest.approx(0.0026631, rel=1e-4)
    assert mcnemar(12, 12).method == "exact"  # 24 discordant pairs: still exact


# -- tables -----------------------------------------------------------------------------------


def test_cells_pool_seeds_and_report_mean_std(report):
    # AMD k_wf=1 on qwen3_4b: seed 0 solves 5/6, seed 1 4/4 (two infra failures unscored).
    amd = _cell(report, method="amd_wf_st_fn", student="qwen3_4b", k_wf="1")
    assert (amd["n"], amd["successes"], amd["n_infra"], amd["n_seeds"]) == (10, 9, 2, 2)
    assert amd["rate"] == pytest.approx(0.9)
    assert amd["seed_mean"] == pytest.approx((5 / 6 + 1) / 2)
    assert amd["seed_std"] == pytest.approx((1 / 6) / math.sqrt(2))  # sample std, ddof=1
    low, high = wilson_interval(9, 10)
    assert (amd["ci_low"], amd["ci_high"]) == pytest.approx((low, high))
    assert "label" not in amd  # the CSVs hold numbers; report.md the formatted cells
    assert f"90.0% [{100 * low:.1f}–{100 * high:.1f}] n=10 · 91.7 ± 11.8 (2 seeds)" in (
        report.markdown
    )
    zero = _cell(report, method="zero_shot", student="qwen3_4b")
    assert (zero["n"], zero["successes"]) == (12, 4)
    assert zero["seed_std"] == pytest.approx(0.0)
    assert amd["gain_pp"] == pytest.approx(100 * (0.9 - 4 / 12))
    # k_wf=2: one seed, 3/4 scored: the Wilson case above, no "±".
    k2 = _cell(report, method="amd_wf_st_fn", student="qwen3_4b", k_wf="2")
    assert k2["n"] == 4 and "| 75.0% [30.1–95.4] n=4 ·" in report.markdown
    teacher = _cell(report, method="teacher")
    assert teacher["student"] == "gpt4o" and teacher["rate"] == 1.0


def test_paper_tables(report):
    # One method x student x benchmark table: Table 1, with its tests.
    assert "table_main" not in report.tables
    main_table = report.views["table1"]
    # k varies within (student, method): it is added to the rows so cells do not merge.
    assert list(main_table.columns) == ["student", "method", "k_wf", "bfcl"]
    row = main_table[(main_table["method"] == "amd_wf_st_fn") & (main_table["k_wf"] == "2")]
    assert row.iloc[0]["bfcl"] == "75.0% [30.1–95.4] n=4 · vs zero_shot: +50.0 pp (p=0.500)"
    assert set(main_table["student"]) == {"gpt4o", "qwen3_4b", "qwen3_8b"}
    # Its CSV: one row per cell, numbers only.
    numbers = report.tables["table1"]
    k2 = numbers[(numbers["method"] == "amd_wf_st_fn") & (numbers["k_wf"] == "2")].iloc[0]
    assert (k2["n"], k2["successes"], k2["rate"]) == (4, 3, 0.75)
    assert k2["gain_pp_vs_zero_shot"] == pytest.approx(50.0)
    assert k2["p_vs_zero_shot"] == pytest.approx(0.5)
    for column in numbers.columns:
        assert not numbers[column].astype(str).str.contains("%").any(), column
    memory = report.views["table_memory"]
    assert {"none", "wf+st+fn"} <= set(memory["memory_types"])
    # One representation and one protocol: those tables are skipped with a note.
    assert "table_representation" not in report.tables
    assert "table_protocol" not in report.tables
    assert any("representation" in n for n in report.notes)


def test_mcnemar_pairs_same_tasks_and_seed(report):
    tests = report.tables["mcnemar"].set_index("point_id")
    # pA0 vs pZ0 (seed 0, all 6 tasks): only AMD solved t2..t5 (b=4), only zero-shot t6
    # (c=1): exact p = 2 * (C(5,0) + C(5,1)) / 2^5 = 12/32.
    a0 = tests.loc["pA0"]
    assert (a0["zero_shot_point_id"], a0["n_pairs"], a0["b"], a0["c"]) == ("pZ0", 6, 4, 1)
    assert a0["p"] == pytest.approx(12 / 32)
    # pA1 vs pZ1 (seed 1): t5, t6 unscored for AMD -> 4 pairs, b=2 (t3, t4), c=0.
    a1 = tests.loc["pA1"]
    assert (a1["zero_shot_point_id"], a1["n_pairs"], a1["b"], a1["c"]) == ("pZ1", 4, 2, 0)
    assert a1["p"] == pytest.approx(0.5)
    a8 = tests.loc["pA8"]  # the 8B student is paired with its own zero-shot
    assert (a8["zero_shot_point_id"], a8["b"], a8["c"], a8["p"]) == ("pZ8", 4, 0, 0.125)
    assert "pT" not in tests.index and "pZ0" not in tests.index


def test_costs_per_stage_point_and_total():
    prices = PriceTable.from_dict(PRICES)
    costs = stage_costs(pd.DataFrame(STAGES), prices)
    by_hash = costs.set_index("stage_hash")
    # collect: 10k in at $2.5/M + 2k out at $10/M.
    assert by_hash.loc["C", "usd"] == pytest.approx(0.025 + 0.02)
    # build: 4k in + 1k out of gpt4o, 8k embedding tokens at $0.02/M.
    assert by_hash.loc["B", "llm_usd"] == pytest.approx(0.01 + 0.01)
    assert by_hash.loc["B", "embed_usd"] == pytest.approx(0.00016)
    # evaluate on qwen3_4b: 3k in, 300 out, 36 GPU-s at $3.6/h.
    assert by_hash.loc["EA0", "usd"] == pytest.approx(0.0003 + 0.00012 + 0.036)
    # qwen3_8b has no price: tokens count, money is only its GPU time.
    assert by_hash.loc["EZ8", "llm_usd"] == 0.0
    assert by_hash.loc["EZ8", "usd"] == pytest.approx(0.072)
    assert unpriced_models(costs) == ["qwen3_8b"]

    points = pd.DataFrame(
        {"point_id": ["pA0", "pZ0"], "upstream": [["C", "B", "R", "EA0"], ["EZ0"]]}
    )
    per_point = point_costs(points, costs).set_index("point_id")
    a0 = 0.045 + (0.02 + 0.00016) + (0.0075 + 0.00004) + 0.03642
    assert per_point.loc["pA0", "usd"] == pytest.approx(a0)
    assert per_point.loc["pA0", "usd_collection"] == pytest.approx(0.045)
    assert per_point.loc["pA0", "usd_embeddings"] == pytest.approx(0.0002)
    assert per_point.loc["pA0", "tokens"] == 10_000 + 2_000 + 5_000 + 1_500 + 10_000 + 3_300
    assert per_point.loc["pZ0", "usd"] == pytest.approx(0.03642)
    assert per_point.loc["pZ0", "missing_stages"] == 0

    total = cost_breakdown(costs).set_index("category")
    # Each distinct stage once: C + B + R + five qwen3_4b evals + two qwen3_8b evals.
    assert total.loc["collection", "usd"] == pytest.approx(0.045)
    assert total.loc["memory building", "usd"] == pytest.approx(0.0275)
    assert total.loc["embeddings", "usd"] == pytest.approx(0.0002)
    assert total.loc["embeddings", "embed_tokens"] == 10_000
    assert total.loc["evaluation", "usd"] == pytest.approx(5 * 0.03642 + 2 * 0.072)
    assert total.loc["total", "usd"] == pytest.approx(0.045 + 0.0275 + 0.0002 + 0.3261)
    assert total.loc["total", "gpu_s"] == pytest.approx(5 * 36 + 2 * 72)
    assert total.loc["evaluation", "tokens_in"] == 7 * 3_000


def test_prices_missing_fall_back_to_tokens():
    empty = PriceTable.from_dict(None)
    assert not empty.has_prices
    costs = stage_costs(pd.DataFrame(STAGES), empty)
    assert costs["usd"].sum() == 0
    assert cost_breakdown(costs).set_index("category").loc["total", "tokens"] > 0


def test_files_plots_and_markdown(report):
    out = report.out_dir
    assert out == Path(report.sweep_dir) / "report"
    assert set(report.plots) == {"success_vs_k", "student_size", "steps_vs_teacher",
                                 "success_vs_cost", "steps_by_method"}  # fmt: skip
    for path in report.plots.values():
        assert path.exists() and path.read_bytes()[:4] == b"\x89PNG"
    md = (out / "report.md").read_text()
    assert "90.0% [" in md and "91.7 ± 11.8 (2 seeds)" in md
    # zero-shot is a reference method: its tests are not repeated in a section of their own
    assert "## Paired tests against the reference methods (McNemar)" in md
    assert "## Paired test against zero-shot (McNemar)" not in md
    assert "No price for: qwen3_8b" in md
    assert "![Success vs k](success_vs_k.png)" in md
    for name in ("cells", "table1", "mcnemar", "costs_points", "costs_breakdown"):
        assert (out / f"{name}.csv").exists()
    steps = report.tables["steps_vs_teacher"].set_index("method")
    # Teacher: (5+6+7+8+5+6)/6 steps; AMD seed 0: 4 steps on every task.
    assert steps.loc["zero_shot"].iloc[0]["teacher_steps"] == pytest.approx(37 / 6)


def test_protocol_representation_and_student_memory_tables(tmp_path):
    sweep = write_sweep(tmp_path)
    points, episodes = sweep_rows()
    (a0,) = [p for p in points if p["point_id"] == "pA0"]
    a0_episodes = [e for e in episodes if e["point_id"] == "pA0"]
    more_points = [
        *({**p, "protocol": "cross_split", "point_id": p["point_id"] + "x"} for p in points),
        {**a0, "repr_wf": "code", "point_id": "pR"},
        {**a0, "method": "student_memory", "method_kind": "student_memory", "point_id": "pS"},
    ]
    more_episodes = [
        *({**e, "point_id": e["point_id"] + "x"} for e in episodes),
        *({**e, "point_id": "pR"} for e in a0_episodes),
        *({**e, "point_id": "pS"} for e in a0_episodes),
    ]
    write_tables(sweep, [*points, *more_points], [*episodes, *more_episodes])
    report = build_report(sweep, log_to_mlflow=False)

    protocols = report.views["table_protocol"]
    assert {"main", "cross_split"} <= set(protocols.columns)
    zero = protocols[(protocols["student"] == "qwen3_4b") & (protocols["method"] == "zero_shot")]
    assert zero.iloc[0]["cross_split"] == zero.iloc[0]["main"]  # same episodes, same cell
    # The main table keeps to protocol "main" when there are several.
    assert "## Table 1: method × student × benchmark against the references (protocol: main)" in (
        report.markdown
    )
    assert "protocol" not in report.views["table1"].columns
    representation = report.views["table_representation"]
    assert {"wf=text st=code fn=code", "wf=code st=code fn=code"} <= set(
        representation["representation"]
    )
    memory = report.tables["table_memory"]
    # Student memory and AMD share memory types: the method column tells them apart.
    assert {"student_memory", "amd_wf_st_fn", "zero_shot"} <= set(memory["method"])
    # Student memory is paired with zero-shot too; the teacher is not.
    assert "pS" in set(report.tables["mcnemar"]["point_id"])


def test_cli_picks_most_recent_sweep_and_explains_errors(tmp_path, capsys):
    write_sweep(tmp_path, "old", created_at=1_000.0)
    write_sweep(tmp_path, "new", created_at=2_000.0)
    running = tmp_path / "sweeps" / "running"  # newest, but its tables are not written yet
    running.mkdir()
    (running / "sweep.json").write_text(json.dumps({"sweep_id": "running", "created_at": 3e3}))
    assert main([str(tmp_path), "--no-mlflow", "--out", str(tmp_path / "rep")]) == 0
    printed = capsys.readouterr().out
    assert "3 sweeps under" in printed
    assert "reporting the most recent finished one, new" in printed
    assert "not finished yet (no tables): running" in printed
    assert (
        "| qwen3_4b | amd_wf_st_fn | 2 | 75.0% [30.1–95.4] n=4 · vs zero_shot: +50.0 pp (p=0.500) |"
        in printed
    )
    assert "not logged to MLflow (--no-mlflow)" in printed
    assert (tmp_path / "rep" / "report.md").exists()

    assert main([str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "sweeps" / "new" / "points.parquet").unlink()
    assert main([str(tmp_path / "sweeps" / "new"), "--no-mlflow"]) == 2
    err = capsys.readouterr().err
    assert "points.parquet is missing" in err and "run the sweep first: distillery" in err


def test_logs_to_the_parent_mlflow_run(tmp_path, capsys):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sweeps", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(experiment).info.run_id
    sweep = write_sweep(tmp_path / "runs", parent_run_id=parent, tracking_uri=uri)
    assert main([str(sweep)]) == 0
    assert f"logged to MLflow run {parent} under report/" in capsys.readouterr().out
    logged = {f.path for f in client.list_artifacts(parent, "report")}
    assert {"report/report.md", "report/success_vs_k.png", "report/cells.csv"} <= logged
    assert client.get_run(parent).data.tags["distillery.report"] == "report/report.md"


def test_a_tracking_uri_that_held_a_key_is_read_from_the_environment(tmp_path, capsys, monkeypatch):
    """sweep.json stores the URI redacted; the report asks for the real one instead of
    trying to log to `http://<redacted>@...`."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("sweeps", artifact_location=(tmp_path / "art").as_uri())
    parent = client.create_run(experiment).info.run_id
    sweep = write_sweep(
        tmp_path / "runs", parent_run_id=parent, tracking_uri="https://<redacted>@mlflow:5000"
    )
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main([str(sweep)]) == 1
    assert "set MLFLOW_TRACKING_URI" in capsys.readouterr().err
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main([str(sweep)]) == 0
    assert f"logged to MLflow run {parent}" in capsys.readouterr().out


def test_point_counts_come_from_episodes_even_when_the_points_table_has_them():
    """The runner's points.parquet records n_scored too (results.py); the report recounts
    from the episodes and must not collide with it (it once failed on every real sweep)."""
    from distillery.orchestrator.report.stats import point_stats

    points = pd.DataFrame({"point_id": ["p"], "method": ["zero_shot"], "n_scored": [99]})
    episodes = pd.DataFrame(
        {
            "point_id": ["p", "p", "p"],
            "task_id": ["t1", "t2", "t3"],
            "success": [True, False, None],
            "total_steps": [3, 5, 0],
        }
    )
    row = point_stats(points, episodes).iloc[0]
    assert (row["n_tasks"], row["n_scored"], row["n_success"], row["n_infra"]) == (3, 2, 1, 1)
    assert row["rate"] == 0.5 and row["mean_steps"] == 4.0


def test_plots_draw_what_they_claim(report):
    """Every steps bar is labelled with its value, so a method that took no step shows
    as 0.0 instead of nothing, and cells a setting tells apart (k) are bars of their own;
    the cost axis starts at zero and success rates span 0 to 100 %."""
    from distillery.orchestrator.report.plots import (
        steps_by_method_figure,
        success_vs_cost_figure,
    )

    steps = report.tables["steps_by_method"]
    zero_steps = steps.assign(
        mean_steps=steps["mean_steps"].where(steps["method"] != "zero_shot", 0.0)
    )
    from distillery.orchestrator.report.load import load_sweep

    columns = load_sweep(report.sweep_dir)[0].columns
    fig = steps_by_method_figure(zero_steps, columns)
    (ax,) = fig.axes
    labels = {t.get_text() for t in ax.texts}
    assert "0.0" in labels and "10.0" not in labels
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "amd_wf_st_fn, k_wf=1" in legend and "amd_wf_st_fn, k_wf=2" in legend
    assert ax.get_ylim()[0] == 0

    cost = success_vs_cost_figure(report.tables["cells"], use_usd=True)
    (ax,) = cost.axes
    assert ax.get_xlim()[0] == 0 and ax.get_ylim() == (0, 105)


def test_a_reference_that_pairs_with_nothing_is_explained(tmp_path):
    sweep = write_sweep(tmp_path)
    report = build_report(sweep, log_to_mlflow=False, references=["memp"])
    (note,) = [n for n in report.notes if n.startswith("reference 'memp'")]
    assert "no student method of this sweep is 'memp'" in note
    assert "amd_wf_st_fn, zero_shot" in note


def test_gpu_time_held_and_serving_summed_over_the_sweeps_runs(tmp_path):
    sweep = write_sweep(tmp_path)
    records = sweep / "gpu_time"
    records.mkdir()
    for name, held, serving in (("first", 2.0, 1.5), ("resumed", 1.0, 0.5)):
        model = {"model": "qwen3-4b", "gpus": 2.0, "held_s": 0.0, "serving_s": 0.0}
        model |= {"held_gpu_h": held, "serving_gpu_h": serving}
        (records / f"{name}.json").write_text(json.dumps({"at": 1.0, "models": [model]}))
    (records / "damaged.json").write_text("{not json")
    md = (Path(build_report(sweep, log_to_mlflow=False).out_dir) / "report.md").read_text()
    assert "| qwen3-4b | 2 | 3.000 | 2.000 | 1.000 | 67% |" in md


def test_a_models_idle_gpu_time_is_charged_to_its_stages_and_so_to_the_cells():
    """Held 3 GPU-h, serving 2: the idle hour goes to the model's stages in proportion
    to their serving time, is priced like it, and reaches the points that read them."""
    import pandas as pd

    from distillery.orchestrator.report.costs import (
        PriceTable,
        cost_breakdown,
        point_costs,
        stage_costs,
    )

    stages = pd.DataFrame(
        {
            "stage_hash": ["a", "b", "t"],
            "kind": ["evaluate", "evaluate", "collect"],
            "role": ["student", "student", "teacher"],
            "model": ["qwen3-4b", "qwen3-4b", "gpt-5-mini"],
            "wall_s": [100.0, 100.0, 50.0],
            "gpu_s": [5400.0, 1800.0, 0.0],  # 1.5 and 0.5 GPU-h serving
        }
    )
    held = pd.DataFrame(
        {"model": ["qwen3-4b"], "gpus": [2.0], "held_gpu_h": [3.0], "serving_gpu_h": [2.0],
         "idle_gpu_h": [1.0], "busy": [2 / 3]}
    )  # fmt: skip
    prices = PriceTable.from_dict({"gpu_hour": 2.0})
    costs = stage_costs(stages, prices, held).set_index("stage_hash")
    assert costs.loc["a", "gpu_idle_s"] == pytest.approx(2700.0)  # 3/4 of the idle hour
    assert costs.loc["b", "gpu_idle_s"] == pytest.approx(900.0)
    assert costs.loc["t", "gpu_idle_s"] == 0.0  # an API model holds no GPU
    assert costs.loc["a", "gpu_usd"] == pytest.approx((5400 + 2700) / 3600 * 2.0)
    total = cost_breakdown(costs.reset_index()).set_index("category").loc["total"]
    assert total["gpu_idle_s"] == pytest.approx(3600.0)
    points = pd.DataFrame({"point_id": ["p1", "p2"], "upstream": [["t", "a"], ["t", "b"]]})
    per_point = point_costs(points, costs.reset_index()).set_index("point_id")
    assert per_point.loc["p1", "gpu_idle_s"] == pytest.approx(2700.0)
    assert per_point.loc["p1", "usd"] == pytest.approx((5400 + 2700) / 3600 * 2.0)
    # Without a GPU-time record nothing is charged beyond serving.
    assert stage_costs(stages, prices)["gpu_idle_s"].sum() == 0.0
