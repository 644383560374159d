"""`distillery compare` and the report's MLflow links, on the hand-made sweep of
test_report (outcomes per task known by construction)."""

from __future__ import annotations

import json
import os

import pandas as pd
import pytest

from distillery.orchestrator.cli.compare import CompareError, compare, find_side, main
from distillery.orchestrator.cli.compare import _sweeps_under as sweeps_under
from distillery.orchestrator.report import build_report
from distillery.orchestrator.tracking.links import markdown_link, run_url
from tests.orchestrator.test_report import sweep_rows, write_sweep, write_tables

RUN_IDS = {"pZ0": "a" * 32, "pA0": "b" * 32, "pA1": "c" * 32, "pZ1": "d" * 32, "pA2": "e" * 32}


def _with_runs(sweep, experiment_id="7"):
    write_tables(sweep, *sweep_rows(RUN_IDS))
    meta = json.loads((sweep / "sweep.json").read_text())
    meta["mlflow_experiment_id"] = experiment_id
    (sweep / "sweep.json").write_text(json.dumps(meta))
    return sweep


@pytest.fixture
def root(tmp_path):
    _with_runs(write_sweep(tmp_path, tracking_uri="http://mlflow.lab:5000"))
    return tmp_path


def test_disagreement_and_mcnemar_counts_by_hand(root):
    sweeps = sweeps_under(str(root))
    # pA0 solves t1-t5, pZ0 solves t1 and t6 (test_report.POINTS).
    result = compare(find_side("pA0", sweeps, None), find_side("pZ0", sweeps, None))
    assert sorted(result.only_a["task_id"]) == ["t2", "t3", "t4", "t5"]
    assert list(result.only_b["task_id"]) == ["t6"]
    assert (result.test.b, result.test.c, result.test.method) == (4, 1, "exact")
    assert result.test.p == pytest.approx(2 * (1 + 5) / 32)
    assert result.count("both") == 1 and result.count("neither") == 0
    assert "method" in result.differing_keys() and "seed" not in result.differing_keys()


def test_infra_failures_pair_with_nothing(root):
    sweeps = sweeps_under(str(root))
    # pA1 has infrastructure failures on t5 and t6: those are not paired.
    result = compare(find_side("pA1", sweeps, None), find_side("pZ1", sweeps, None))
    assert result.unpaired == ("t5", "t6")
    assert len(result.paired) == 4
    assert (result.test.b, result.test.c) == (2, 0)


def test_mlflow_run_ids_and_prefixes_resolve_to_points(root):
    sweeps = sweeps_under(str(root))
    assert find_side("b" * 32, sweeps, None).point_id == "pA0"
    assert find_side("aaaaaaa", sweeps, None).point_id == "pZ0"
    with pytest.raises(CompareError, match="at least 6"):
        find_side("aaa", sweeps, None)
    with pytest.raises(CompareError, match="neither a point id nor an MLflow run id"):
        find_side("ffffffff", sweeps, None)


def test_cli_prints_table_links_and_csv(root, capsys, tmp_path):
    out_csv = tmp_path / "cmp.csv"
    code = main(["b" * 32, "pZ0", "--root", str(root), "--csv", str(out_csv)])
    text = capsys.readouterr().out
    assert code == 0
    assert "McNemar: b = 4 (A only), c = 1 (B only), exact binomial p = 0.375" in text
    assert "Solved by A only (4):" in text and "Solved by B only (1):" in text
    assert "A in MLflow: http://mlflow.lab:5000/#/experiments/7/runs/" + "b" * 32 in text
    frame = pd.read_csv(out_csv)
    assert frame.set_index("task_id").loc["t6", "solved_by"] == "B only"


def test_cli_unknown_run_is_one_line(root, capsys):
    assert main(["zzzzzzzz", "pZ0", "--root", str(root)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("distillery compare: 'zzzzzzzz' is neither") and err.count("\n") == 1


def test_report_cells_link_to_their_child_runs(root):
    report = build_report(root, log_to_mlflow=False)
    md = (report.out_dir / "report.md").read_text()
    base = "http://mlflow.lab:5000/#/experiments/7/runs/"
    # A one-point cell is a link (pA2: 3 of 4 scored); a 2-seed cell links each seed's
    # run; pA8 has no run, so its cell (6 of 6) stays plain text.
    assert f"[75.0% \\[30.1–95.4\\] n=4]({base}{'e' * 32})" in md
    assert f"· runs [s0]({base}{'a' * 32}) [s1]({base}{'d' * 32})" in md
    assert "| 100.0% [61.0–100.0] n=6 |" in md
    # The CSV tables stay plain text.
    main_csv = pd.read_csv(report.out_dir / "table1.csv")
    assert not main_csv.astype(str).apply(lambda c: c.str.contains("http")).any().any()


def test_run_urls_for_each_kind_of_store():
    assert run_url("sqlite:////x/mlflow.db", "r1") == "http://127.0.0.1:5000/#/runs/r1"
    assert run_url("https://host/", "r1", "3") == "https://host/#/experiments/3/runs/r1"
    assert run_url("databricks", "r1") is None
    assert run_url("sqlite:///m.db", None) is None
    assert run_url("sqlite:///m.db", "r", ui_url="http://h:8080/") == "http://h:8080/#/runs/r"
    assert markdown_link("50.0% [1–2] n=2", "u") == "[50.0% \\[1–2\\] n=2](u)"
    assert markdown_link("x", None) == "x"


def test_a_methods_own_columns_describe_and_tell_points_apart(root):
    sweeps = sweeps_under(str(root))
    k1, k2 = find_side("pA0", sweeps, None), find_side("pA2", sweeps, None)
    result = compare(k1, k2)
    # pA0 and pA2 differ only by AMD's k_wf, one of AMD's report columns.
    assert result.differing_keys() == ["k_wf"]
    assert "k_wf=1" in k1.label() and k1.label().endswith("seed=0")
    zero = find_side("pZ0", sweeps, None)  # no memory: AMD's columns are empty, not shown
    assert zero.descriptors["k_wf"] == "" and "k_wf" not in zero.label()


def test_a_run_read_from_mlflow_lists_its_methods_columns(tmp_path):
    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.cli.compare import side_from_mlflow
    from distillery.orchestrator.state.sweep_tables import METHOD_COLUMNS_TAG

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("x", artifact_location=(tmp_path / "art").as_uri())
    tags = {"method": "toy", "student": "s", "seed": "0", "recall_k": "2", "other": "x"}
    run = client.create_run(experiment, tags={**tags, METHOD_COLUMNS_TAG: "recall_k"})
    results = tmp_path / "results.json"
    pd.DataFrame({"task_id": ["t1"], "success": [True]}).to_json(results, orient="split")
    client.log_artifact(run.info.run_id, str(results))
    bounds = ("MLFLOW_HTTP_REQUEST_TIMEOUT", "MLFLOW_HTTP_REQUEST_MAX_RETRIES")
    before = {k: os.environ.get(k) for k in bounds}
    side = side_from_mlflow(run.info.run_id, uri)
    assert side is not None
    assert side.descriptors["recall_k"] == "2" and "other" not in side.descriptors
    assert side.label() == "toy student=s recall_k=2 seed=0"
    # The lookup's tight MLflow bound is its own: nothing of it stays in the process's
    # environment (a sweep run after it, or a subprocess, would inherit a 10 s limit).
    assert {k: os.environ.get(k) for k in bounds} == before
