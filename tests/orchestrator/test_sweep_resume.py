"""Sweeps on local Ray against a scripted server that counts requests: shared stages run
once, a re-run reuses everything, and a sweep killed with SIGKILL finishes on re-run
with the same results as an uninterrupted one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.driver.run import run_sweep
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.trajectories import read_episodes
from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow


def _args(tmp_path: Path, url: str, *extra: str) -> list[str]:
    return [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "agent.retry_backoff_s=0",
        "student=external",
        f"student.base_url={url}",
        "student.model=scripted",
        "student.action_format=native",
        "student.max_retries=1",
        *extra,
    ]


def _configs(argv: list[str], multirun: bool = True):
    return [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), multirun)]


def _requests(url: str) -> int:
    return int(stub_stats(url)["requests"])


def test_sweep_runs_each_distinct_stage_once_and_reuses_it(tmp_path, ray_local):
    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as url:
        argv = _args(
            tmp_path,
            url,
            "benchmark.limit=3",
            "methods=[teacher,zero_shot,amd_wf]",
            "memory.retrieval.k_wf=1,2,3",
        )
        result = run_sweep(_configs(argv), progress=False)
        made = _requests(url)

        # 3 sweep points share the collect, build and zero-shot stages: 5 stages, and
        # the LLM calls of exactly its distinct student stages.
        assert len(result.points) == 3
        assert result.stages_run == 1 + 1 + 1 + 3
        stage_dirs = {m.episodes_dir for p in result.points for m in p.methods}
        assert len(stage_dirs) == 1 + 1 + 3  # collect, zero-shot, three memory stages
        student_calls = sum(
            r.n_llm_calls for d in stage_dirs for r in read_episodes(d) if r.role == "student"
        )
        assert made == student_calls
        # A naive per-point pipeline runs zero-shot once per point.
        zero_shot = result.points[0].method("zero_shot")
        naive = student_calls + 2 * sum(s.n_llm_calls for s in zero_shot.summaries)
        assert naive > made

        # Same command again: every stage is reused, no request is made, the same
        # MLflow parent and children are updated rather than duplicated.
        again = run_sweep(_configs(argv), progress=False)
        assert _requests(url) == made
        assert again.stages_run == 0 and again.stages_cached == 6
        assert again.parent_run_id == result.parent_run_id
        assert [m.metrics["success_rate"] for p in again.points for m in p.methods] == [
            m.metrics["success_rate"] for p in result.points for m in p.methods
        ]
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        children = client.search_runs(
            [client.get_run(result.parent_run_id).info.experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'",
        )
        assert len(children) == 2 + 3  # teacher and zero-shot once, one per k
        # each child's name starts with what tells its point from the others (a name
        # cut short in the runs table still tells them apart)
        names = sorted(c.info.run_name for c in children)
        assert names == [
            "k_wf=1 · amd_wf · external",
            "k_wf=2 · amd_wf · external",
            "k_wf=3 · amd_wf · external",
            "teacher · oracle",
            "zero_shot · external",
        ]
        # Each run lasted as long as its stage (not the logging after the sweep).
        for child in children:
            assert child.info.status == "FINISHED"
            assert child.info.end_time - child.info.start_time < 600_000
        assert {c.data.tags["distillery.descriptor"] for c in children} == {
            "",
            "k_wf=1",
            "k_wf=2",
            "k_wf=3",
        }
        assert {m.descriptor for p in result.points for m in p.methods} == {
            "",
            "k_wf=1",
            "k_wf=2",
            "k_wf=3",
        }

        # A new point (k=4) on more tasks runs only its own stage and the new tasks.
        wider = run_sweep(
            _configs(
                [*argv[:-2], "benchmark.limit=4", "methods=[amd_wf]", "memory.retrieval.k_wf=4"]
            ),
            progress=False,
        )
        new_calls = _requests(url) - made
        amd4 = wider.points[0].methods[0]
        assert new_calls == sum(s.n_llm_calls for s in amd4.summaries)

    sweep_dir = Path(result.sweep_dir)
    points = pd.read_parquet(sweep_dir / "points.parquet")
    episodes = pd.read_parquet(sweep_dir / "episodes.parquet")
    stages = pd.read_parquet(sweep_dir / "stages.parquet")
    assert len(points) == 5 and set(points["k_wf"].dropna()) == {1, 2, 3}
    assert len(episodes) == 5 * 3 and not episodes.duplicated(["point_id", "task_id"]).any()
    assert sorted(stages["kind"]) == [
        "build",
        "collect",
        "evaluate",
        "evaluate",
        "evaluate",
        "evaluate",
    ]


def _cli(argv: list[str]) -> list[str]:
    return [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv]


def _done_records(root: Path, kind: str = "evaluate") -> int:
    return len(list(root.glob(f"stages/{kind}/*/done/*.json")))


def test_a_sweep_killed_mid_run_finishes_on_rerun_like_an_uninterrupted_one(tmp_path):
    """Killed while the teacher's and the student's stages are both in flight (they
    read nothing of each other: they run at once, one episode slot each)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}
    common = [
        "benchmark.limit=6",
        "methods=[teacher,zero_shot]",
        "cluster.num_workers=2",
        "cluster.episodes_per_worker=1",
        "cluster.num_cpus=2",
    ]
    with run_stub_server(
        script="distillery.testing.bfcl_scripts:replay_native", delay_s=0.3
    ) as url:
        # The teacher is the scripted server too: its episodes take as long as the
        # student's, so both stages are still playing when the sweep is killed.
        common += [
            "teacher=external",
            f"teacher.base_url={url}",
            "teacher.model=scripted-teacher",
            "teacher.action_format=native",
        ]
        killed_dir = tmp_path / "killed"
        argv = _args(killed_dir, url, *common)
        process = subprocess.Popen(
            _cli(argv),
            cwd=REPO_ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.time() + 240
        runs = killed_dir / "runs"
        while time.time() < deadline and not (
            _done_records(runs) >= 1 and _done_records(runs, "collect") >= 1
        ):
            assert process.poll() is None, "the sweep ended before it could be killed"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its local Ray
        process.wait()
        finished_before = _done_records(runs), _done_records(runs, "collect")
        assert all(1 <= n < 6 for n in finished_before), finished_before  # both in flight
        before = _requests(url)

        resumed = subprocess.run(_cli(argv), cwd=REPO_ROOT, env=env, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        resumed_calls = _requests(url) - before

        fresh_dir = tmp_path / "fresh"
        fresh = subprocess.run(
            _cli(_args(fresh_dir, url, *common)),
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        assert fresh.returncode == 0, fresh.stderr[-3000:]
        fresh_calls = _requests(url) - before - resumed_calls

    assert resumed_calls < fresh_calls  # finished episodes were not played again

    def outcome(root: Path) -> pd.DataFrame:
        (sweep,) = (root / "runs" / "sweeps").iterdir()
        table = pd.read_parquet(sweep / "episodes.parquet")
        points = pd.read_parquet(sweep / "points.parquet")[["point_id", "method"]]
        table = table.merge(points, on="point_id")
        return table[["method", "task_id", "success", "total_steps"]].sort_values(
            ["method", "task_id"], ignore_index=True
        )

    killed, uninterrupted = outcome(killed_dir), outcome(fresh_dir)
    assert len(killed) == 12 and not killed.duplicated(["method", "task_id"]).any()
    pd.testing.assert_frame_equal(killed, uninterrupted)

    def stage_keys(root: Path) -> set[str]:
        return {f"{d.parent.name}:{d.name}" for d in (root / "runs" / "stages").glob("*/*")}

    assert stage_keys(killed_dir) == stage_keys(fresh_dir)  # the same stages, same keys
    # One episode file per task and stage, whatever was in flight when it died.
    for stage in (killed_dir / "runs" / "stages").glob("*/*"):
        files = list((stage / "episodes").glob("*.parquet"))
        assert len(files) == len(list((stage / "done").glob("*.json"))) == 6

    client = MlflowClient(f"sqlite:///{killed_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("distillery")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1  # the resumed sweep reopened its parent run
    assert len(runs) == 1 + 2


def test_a_bank_in_a_shared_store_is_reused_by_another_output_root(tmp_path, ray_local):
    """A new ledger (another output_dir) but the same Qdrant store: the build stage
    finds its content-addressed bank there instead of building it again."""
    store = f"memory.store.path={tmp_path / 'qdrant'}"
    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as url:
        first, second = (
            run_sweep(
                _configs(
                    _args(tmp_path / name, url, "benchmark.limit=2", "methods=[amd_wf]", store),
                    multirun=False,
                ),
                progress=False,
            )
            for name in ("a", "b")
        )
    built, reused = (r.points[0].methods[0].metrics for r in (first, second))
    assert built["bank_wf"] == reused["bank_wf"] == 2
    assert "build.wf.deterministic" in built and "build.wf.deterministic" not in reused
