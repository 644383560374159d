"""Task-by-task comparison of two evaluation runs, checked as a user would: a finished
sweep, `mlflow server` started on its store, the comparison read through MLflow's REST
API, and `distillery compare` reading the same runs from the server."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from distillery.orchestrator.compare import main as compare_main
from distillery.testing.mlflow_ui import (
    COMPARISON_TASKS,
    comparison_sweep,
    evaluation_runs,
    mlflow_server,
    rest,
    run_traces,
    verdicts,
)

pytestmark = pytest.mark.slow
SOLVED_WITH_MEMORY = {"multi_turn_base_124", "multi_turn_base_127"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory, ray_local):
    root = tmp_path_factory.mktemp("ui")
    result = comparison_sweep(root)
    return root, result


def test_rest_api_shows_which_run_solved_each_task(sweep, capsys):
    root, result = sweep
    point = result.points[0]
    zero_shot, amd = point.method("zero_shot"), point.method("amd_wf_st_fn")
    meta = json.loads((root / "runs" / "sweeps" / result.sweep_id / "sweep.json").read_text())
    experiment_id = meta["mlflow_experiment_id"]
    with mlflow_server(root / "mlflow.db", root / "mlartifacts") as url:
        # The runs table: both children are GenAI evaluation runs, with the success rate,
        # its interval and what distinguishes them as metrics and tags.
        runs = {r["info"]["run_id"]: r for r in evaluation_runs(url, experiment_id)}
        assert set(runs) == {zero_shot.mlflow_run_id, amd.mlflow_run_id}
        amd_run = runs[amd.mlflow_run_id]["data"]
        metrics = {m["key"]: m["value"] for m in amd_run["metrics"]}
        tags = {t["key"]: t["value"] for t in amd_run["tags"]}
        assert metrics["success_rate"] == 0.5
        assert 0 < metrics["success_rate_ci_low"] < 0.5 < metrics["success_rate_ci_high"] < 1
        assert tags["method"] == "amd_wf_st_fn" and tags["protocol"] == "self_excluded"
        assert tags["student"] == "external" and tags["k_st"] == "1"
        assert tags["success"].startswith("50.0% [")
        inputs = runs[amd.mlflow_run_id]["inputs"]["dataset_inputs"]
        assert inputs[0]["dataset"]["name"].startswith("bfcl_multi_turn_base:")

        # Per task: one trace per evaluated task in each run, the verdict as feedback.
        alone = verdicts(run_traces(url, experiment_id, zero_shot.mlflow_run_id))
        with_memory = verdicts(run_traces(url, experiment_id, amd.mlflow_run_id))
        assert sorted(alone) == sorted(with_memory) == COMPARISON_TASKS
        solved_alone = {t for t, v in alone.items() if v["success"]}
        solved_with_memory = {t for t, v in with_memory.items() if v["success"]}
        assert solved_alone == set()
        assert solved_with_memory == SOLVED_WITH_MEMORY
        # The feedback agrees with the sweep's own per-task table.
        episodes = pd.read_parquet(root / "runs" / "sweeps" / result.sweep_id / "episodes.parquet")
        truth = episodes[episodes["point_id"] == amd.point_id].set_index("task_id")
        for task, values in with_memory.items():
            assert values["success"] == bool(truth.loc[task, "success"])
            assert values["steps"] == truth.loc[task, "total_steps"]
            assert values["tokens"] == truth.loc[task, "tokens_in"] + truth.loc[task, "tokens_out"]
            error = truth.loc[task, "error_type"]
            assert values["error_type"] == ("none" if pd.isna(error) else error)

        # A trace holds the episode: its turns, LLM calls and tool calls as spans.
        trace_id = next(
            i["trace_id"]
            for i in run_traces(url, experiment_id, amd.mlflow_run_id)
            if i["trace_metadata"]["mlflow.trace.session"] == "multi_turn_base_124"
        )
        spans = rest(url, "GET", f"3.0/mlflow/traces/get?trace_id={trace_id}")
        names = [s["name"] for s in spans["trace"]["spans"]]
        assert "episode multi_turn_base_124" in names
        assert any(n.startswith("turn ") for n in names)
        assert any(n.startswith("llm ") for n in names)
        assert any(n.startswith("tool ") for n in names)

        # `distillery compare` on the two MLflow run ids, with no sweep to read: the
        # runs' results tables come from the server.
        code = compare_main(
            [
                amd.mlflow_run_id,
                zero_shot.mlflow_run_id,
                "--root",
                str(root / "nowhere"),
                "--tracking-uri",
                url,
            ]
        )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "McNemar: b = 2 (A only), c = 0 (B only), exact binomial p = 0.5" in out
    for task in SOLVED_WITH_MEMORY:
        assert task in out
    assert f"A in MLflow: {url}/#/experiments/{experiment_id}/runs/{amd.mlflow_run_id}" in out
