"""What a researcher sees in MLflow, checked as a user would: a sweep running, `mlflow
server` started on its store, the runs read through MLflow's REST API and rendered in
headless Chromium, and `distillery compare` reading the same runs from the server.

One sweep (zero-shot and AMD of a scripted student on four tasks), one test: while the
student's first stage is held mid-stage (its server answers nothing until the test
releases it), its run is visible and RUNNING; afterwards each run's duration is its
stage's wall time, the runs disagree task by task, and a failing student's trace shows
its model calls."""

from __future__ import annotations

import json
import re
import threading
import time

import httpx
import pandas as pd
import pytest

from distillery.orchestrator.cli.compare import main as compare_main
from distillery.testing.mlflow_ui import (
    COMPARISON_TASKS,
    Chromium,
    comparison_sweep,
    evaluation_runs,
    find_chromium,
    mlflow_server,
    rest,
    run_traces,
    verdicts,
)

pytestmark = pytest.mark.slow
SOLVED_WITH_MEMORY = {"multi_turn_base_124", "multi_turn_base_127"}
WAIT_S = 600  # generous: nothing here may depend on the machine's speed
PAGE_S = 180  # a page of MLflow's UI showing what is waited for


@pytest.fixture(scope="module")
def live(tmp_path_factory, ray_local):
    """The MLflow server first (it creates the store), then the sweep in a thread, its
    student's server held until the test touches the gate file."""
    root = tmp_path_factory.mktemp("ui")
    gate = root / "release-the-student"
    outcome: dict[str, object] = {}

    def sweep() -> None:
        try:
            outcome["result"] = comparison_sweep(root, gate=gate)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            outcome["error"] = exc

    with mlflow_server(root / "mlflow.db", root / "mlartifacts") as url:
        thread = threading.Thread(target=sweep, name="sweep", daemon=True)
        thread.start()
        try:
            yield root, url, gate, thread, outcome
        finally:
            gate.touch()
            thread.join(timeout=WAIT_S)


def _running_child(url: str) -> tuple[str, dict]:
    """The experiment id and the zero-shot child run, once it is there (polled)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        try:
            found = rest(
                url, "GET", "2.0/mlflow/experiments/get-by-name?experiment_name=distillery"
            )
        except httpx.HTTPStatusError:  # the sweep has not created its experiment yet
            time.sleep(1.0)
            continue
        experiment_id = found["experiment"]["experiment_id"]
        runs = rest(
            url,
            "POST",
            "2.0/mlflow/runs/search",
            {"experiment_ids": [experiment_id], "filter": "tags.method = 'zero_shot'"},
        ).get("runs", [])
        if runs:
            return experiment_id, runs[0]
        time.sleep(1.0)
    raise TimeoutError("the zero-shot run never appeared in MLflow")


def _seconds(shown: str) -> float:
    """MLflow's duration text (`850ms`, `5.9s`, `1.2min`, `1.5h`) in seconds."""
    number, unit = re.fullmatch(r"([\d.]+)\s*(ms|s|min|h)", shown.strip()).groups()
    return float(number) * {"ms": 0.001, "s": 1, "min": 60, "h": 3600}[unit]


@pytest.fixture(scope="module")
def browser():
    """Headless Chromium; where it is not installed the test skips before the sweep
    starts (scripts/test.sh installs it where it can)."""
    if find_chromium() is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the UI is not rendered")
    with Chromium() as chromium:
        yield chromium


# `browser` first: the fixtures are set up in this order, and a missing Chromium skips
# before `live` starts the MLflow server and the sweep.
def test_a_sweep_in_the_mlflow_ui_while_it_runs_and_after(browser, live, capsys):
    root, url, gate, thread, outcome = live

    # -- during the run: the zero-shot child is there, RUNNING, with its params -------
    experiment_id, child = _running_child(url)
    child_id = child["info"]["run_id"]
    assert child["info"]["status"] == "RUNNING"
    assert child["info"]["run_name"] == "zero_shot · external"
    params = {p["key"]: p["value"] for p in child["data"]["params"]}
    assert params["method"] == "zero_shot" and params["eval_n_tasks"] == "4"
    assert not any(k.startswith("method_catalog.amd") for k in params)  # not the catalog
    metrics = {m["key"]: m["value"] for m in child["data"].get("metrics", [])}
    assert metrics["progress.episodes_total"] == 4
    run_page = f"{url}/#/experiments/{experiment_id}/runs/{child_id}"
    page = browser.text(run_page, ["zero_shot · external", "Status"], PAGE_S)
    assert re.search(r"Status\s+Running", page), page[-800:]
    gate.touch()  # let the student answer
    thread.join(timeout=WAIT_S)
    assert not thread.is_alive(), "the sweep did not finish"
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    result = outcome["result"]
    point = result.points[0]  # type: ignore[attr-defined]
    zero_shot, amd = point.method("zero_shot"), point.method("amd_wf_st_fn")
    assert zero_shot.mlflow_run_id == child_id  # the run opened at the start, closed
    sweep_dir = root / "runs" / "sweeps" / result.sweep_id  # type: ignore[attr-defined]
    meta = json.loads((sweep_dir / "sweep.json").read_text())
    assert meta["mlflow_experiment_id"] == experiment_id

    # -- after the run: the REST API, the UI, `distillery compare` --------------------
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
    episodes = pd.read_parquet(sweep_dir / "episodes.parquet")
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

    # Each run lasted its stage's wall time (the stage's run record), not the
    # logging after it: the UI shows that duration.
    for method in (zero_shot, amd):
        info = rest(url, "GET", f"2.0/mlflow/runs/get?run_id={method.mlflow_run_id}")
        info = info["run"]["info"]
        assert info["status"] == "FINISHED"
        kind, digest = method.stage.split(":")
        (record,) = (root / "runs" / "stages" / kind / digest[:16] / "runs").glob("*.json")
        wall_s = json.loads(record.read_text())["wall_s"]
        duration_s = (int(info["end_time"]) - int(info["start_time"])) / 1000
        assert abs(duration_s - wall_s) < 2.0, (method.name, duration_s, wall_s)
    page = browser.text(run_page, ["Duration", "Finished"], PAGE_S)
    shown = re.search(r"Duration\s+(\S+)", page).group(1)
    finished = rest(url, "GET", f"2.0/mlflow/runs/get?run_id={child_id}")["run"]
    real_s = int(finished["info"]["end_time"]) - int(finished["info"]["start_time"])
    assert abs(_seconds(shown) - real_s / 1000) <= max(1.0, 0.1 * real_s / 1000)

    # A failing student's trace shows its model calls (replies in prose:
    # no action), and says the task failed.
    failing = next(
        i["trace_id"]
        for i in run_traces(url, experiment_id, zero_shot.mlflow_run_id)
        if i["trace_metadata"]["mlflow.trace.session"] == "multi_turn_base_124"
    )
    trace_page = (
        f"{url}/#/experiments/{experiment_id}/traces"
        f"?selectedEvaluationId={failing}&traceId={failing}"
    )
    page = browser.text(trace_page, ["llm 0.0 (no action)", "turn 0"], PAGE_S)
    assert "episode multi_turn_base_124" in page
    assert re.search(r"Trace\s+\S+\s+Error", page), page[:1500]

    # `distillery compare` on the two MLflow run ids, with no sweep to read: the
    # runs' results tables come from the server.
    code = compare_main(
        [
            amd.mlflow_run_id[:8],  # a prefix of an MLflow run id will do
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
