"""Trajectory RAG end to end through the sweep runner: the oracle teacher collects
once, the bank is built once (deterministically), and a scripted student (real HTTP,
local Ray) is evaluated zero-shot and with the nearest other task's trajectory in its
system prompt under `self_excluded`, its MLflow child run tagged with the method."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.driver.run import run_sweep
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.memory.trajectory_rag.prompts import MARKER
from distillery.workers.trajectories import read_episodes
from tests.orchestrator.conftest import ray_local  # noqa: F401  (the fixture)
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

pytestmark = pytest.mark.slow


def test_one_collection_one_build_and_the_trajectory_in_the_prompt(tmp_path, ray_local):  # noqa: F811
    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_text") as url:
        cfg = _config(
            tmp_path,
            "benchmark.limit=4",
            "methods=[teacher,zero_shot,trajectory_rag]",
            "protocol=self_excluded",
            *_student(url),
        )
        sweep = run_sweep([cfg], progress=False)
    result = sweep.points[0]

    stages = pd.read_parquet(Path(sweep.sweep_dir) / "stages.parquet")
    assert sorted(stages["kind"]) == ["build", "collect", "evaluate", "evaluate"]
    assert stages["ran"].all() and sweep.stages_run == 4

    rag = result.method("trajectory_rag")
    records = read_episodes(rag.episodes_dir)
    assert sorted(r.task_id for r in records) == sorted(result.task_ids)
    for record in records:
        log = json.loads(record.extra_json)
        (hit,) = log["retrievals"]
        assert hit["allowed"] and hit["source_task_id"] != record.task_id
        assert log["isolation_violations"] == 0
        system = json.loads(record.messages_json)[0]["content"]
        assert system.startswith(MARKER)
    assert rag.metrics["isolation_violations"] == 0
    assert rag.metrics["isolation_checked"] == 4 and rag.metrics["injected"] == 4

    run = MlflowClient(cfg.tracking_uri).get_run(rag.mlflow_run_id)
    assert run.data.tags["method"] == "trajectory_rag"
    assert run.data.metrics["isolation_violations"] == 0
    assert run.data.metrics["bank_traj"] == 4  # one entry per successful oracle episode
    assert run.data.metrics["build.traj.deterministic"] == 4  # no builder model asked
    points = pd.read_parquet(Path(sweep.sweep_dir) / "points.parquet")
    assert set(points.loc[points["method"] == "trajectory_rag", "k_traj"]) == {1}
