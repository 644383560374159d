"""Servers where users have them: a sweep whose output root is on an S3-compatible
object store (moto's server, through pyarrow's S3 filesystem configured from the
environment) and whose tracking is an MLflow server on PostgreSQL with its artifacts
on the same store, run as k8s/base/mlflow.yaml runs it: behind basic auth, reaching
PostgreSQL through psycopg 3 with libpq's variables and a password full of `@:/%`.
Killed with SIGKILL mid-sweep and resumed, it ends with every (point, task) once, one
MLflow parent run, results readable back through pyarrow and MLflow's client, and
docs/cluster.md's `distillery report s3://...` line reporting it from the store."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

import httpx
import pandas as pd
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pytest

from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.storage import Location, s3_options
from tests.support import REPO_ROOT
from tests.support.servers import mlflow_server, postgres_bin, postgres_server, s3_server

TASKS = 6


def test_s3_options_come_from_the_environment():
    env = {"AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_DEFAULT_REGION": "eu-west-1"}
    assert s3_options(env) == {
        "endpoint_override": "127.0.0.1:9000",
        "scheme": "http",
        "region": "eu-west-1",
    }
    # The S3-specific variable wins; a private endpoint without a region needs none.
    env = {"AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_S3": "https://minio:9000/"}
    assert s3_options(env) == {
        "endpoint_override": "minio:9000",
        "scheme": "https",
        "region": "us-east-1",
    }
    assert s3_options({"AWS_REGION": "us-west-2"}) == {"region": "us-west-2"}
    with pytest.raises(ValueError, match="AWS_ENDPOINT_URL"):
        s3_options({"AWS_ENDPOINT_URL": "ftp://x"})


@pytest.fixture(scope="module")
def store():
    with s3_server() as started:
        yield started


def test_a_location_on_the_object_store(store, monkeypatch):
    for key, value in store.env.items():
        monkeypatch.setenv(key, value)
    from distillery.workers import storage

    storage._filesystem.cache_clear()  # built from the environment on first use
    try:
        root = Location.of("s3://distillery/unit")
        assert not root.is_local and not (root / "a.json").exists()
        digest = (root / "d" / "a.json").write_json({"x": 1})
        assert (root / "d" / "a.json").read_json() == {"x": 1}
        assert len(digest) == 64
        assert [p.name for p in (root / "d").listdir(".json")] == ["a.json"]
        assert [p.name for p in root.subdirs()] == ["d"]
        (root / "d" / "a.json").delete()
        assert not (root / "d" / "a.json").exists()
        # The object really is in the bucket, as an S3 client sees it.
        (root / "b.txt").write_bytes(b"hello")
        body = store.client().get_object(Bucket="distillery", Key="unit/b.txt")["Body"].read()
        assert body == b"hello"
    finally:
        storage._filesystem.cache_clear()


def _done(fs: pafs.FileSystem, kind: str) -> int:
    selector = pafs.FileSelector("distillery/runs/stages", recursive=True, allow_not_found=True)
    return sum(
        1
        for info in fs.get_file_info(selector)
        if info.type == pafs.FileType.File
        and f"/{kind}/" in info.path
        and "/done/" in info.path
        and info.path.endswith(".json")
    )


@pytest.mark.slow
@pytest.mark.skipif(postgres_bin() is None, reason="PostgreSQL is not installed")
def test_a_sweep_on_servers_survives_sigkill_and_reads_back(store, tmp_path, monkeypatch):
    s3 = pafs.S3FileSystem(**s3_options(store.env))
    login = ("admin", "mlflow-admin:p@ss/w%rd")
    with (
        postgres_server(password="pg:p@ss/w%rd#1") as postgres,
        # No password in any URI: libpq's variables, as the k8s Secret gives them.
        mlflow_server(
            "postgresql+psycopg://",
            "s3://distillery/mlflow",
            {**store.env, **postgres.libpq_env()},
            basic_auth=login,
        ) as tracking,
        run_stub_server(script="distillery.testing.bfcl_scripts:replay_native", delay_s=0.3) as url,
    ):
        argv = [
            sys.executable,
            "-m",
            "distillery.orchestrator.cli.app",
            "output_dir=s3://distillery/runs",
            f"tracking.uri={tracking}",
            f"benchmark.limit={TASKS}",
            "methods=[teacher,zero_shot]",
            "agent.retry_backoff_s=0",
            "student=external",
            f"student.base_url={url}",
            "student.model=scripted",
            "student.action_format=native",
            "student.max_retries=1",
            "cluster.num_workers=1",
            "cluster.episodes_per_worker=1",
            "cluster.num_cpus=2",
        ]
        # The sweep finds the store, its credentials and the tracking server through
        # the environment and its config only; nothing of the test's own state.
        env = {
            **os.environ,
            **store.env,
            "PYTHONPATH": str(REPO_ROOT),
            "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
            # MLflow's client logs in with these (the Ray pods get them from a Secret).
            "MLFLOW_TRACKING_USERNAME": login[0],
            "MLFLOW_TRACKING_PASSWORD": login[1],
        }
        process = subprocess.Popen(
            argv,
            cwd=tmp_path,
            env=env,
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "killed.log", "wb"),  # noqa: SIM115 - read on failure
        )
        deadline = time.time() + 300
        while _done(s3, "evaluate") < 2 and time.time() < deadline:
            assert process.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            time.sleep(0.3)
        os.killpg(process.pid, signal.SIGKILL)  # the driver and its local Ray
        process.wait()
        finished_before = _done(s3, "evaluate")
        assert 2 <= finished_before < TASKS
        before = int(stub_stats(url)["requests"])

        resumed = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        resumed_calls = int(stub_stats(url)["requests"]) - before

        # -- read back through pyarrow -------------------------------------------------
        (sweep_info,) = s3.get_file_info(pafs.FileSelector("distillery/runs/sweeps"))
        sweep = sweep_info.path
        episodes = ds.dataset(f"{sweep}/episodes.parquet", filesystem=s3).to_table().to_pandas()
        points = ds.dataset(f"{sweep}/points.parquet", filesystem=s3).to_table().to_pandas()
        assert len(episodes) == 2 * TASKS
        assert not episodes.duplicated(["point_id", "task_id"]).any()
        assert sorted(points["method"]) == ["teacher", "zero_shot"]
        student_calls = int(episodes["n_llm_calls"].sum())  # the oracle teacher makes none
        assert 0 < resumed_calls < student_calls  # finished episodes were not replayed
        for kind in ("collect", "evaluate"):
            assert _done(s3, kind) == TASKS
            (stage,) = s3.get_file_info(pafs.FileSelector(f"distillery/runs/stages/{kind}"))
            trajectories = ds.dataset(f"{stage.path}/episodes", filesystem=s3, format="parquet")
            table = trajectories.to_table(columns=["task_id"]).to_pandas()
            assert sorted(table["task_id"]) == sorted(episodes["task_id"].unique())

        # -- read back through MLflow's client (runs in PostgreSQL, artifacts on S3) ----
        from mlflow.tracking import MlflowClient

        anonymous = httpx.get(f"{tracking}/api/2.0/mlflow/experiments/search?max_results=1")
        assert anonymous.status_code == 401  # basic auth guards the tracking server
        monkeypatch.setenv("MLFLOW_TRACKING_USERNAME", login[0])
        monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", login[1])
        client = MlflowClient(tracking)
        experiment = client.get_experiment_by_name("distillery")
        assert experiment.artifact_location.startswith("mlflow-artifacts:")  # served
        runs = client.search_runs([experiment.experiment_id])
        parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
        assert len(parents) == 1 and len(runs) == 1 + 2  # the resumed sweep reopened it
        children = {r.data.tags["method"]: r for r in runs if r not in parents}
        zero_shot = children["zero_shot"]
        assert zero_shot.info.status == "FINISHED"
        assert zero_shot.data.metrics["n_tasks"] == TASKS
        expected = episodes.merge(points[["point_id", "method"]], on="point_id")
        expected = expected[expected["method"] == "zero_shot"]
        assert zero_shot.data.metrics["success_rate"] == pytest.approx(expected["success"].mean())
        # The child names its episodes on the object store; they read back as scored.
        episodes_uri = zero_shot.data.tags["distillery.episodes_uri"]
        assert episodes_uri.startswith("s3://distillery/runs/stages/evaluate/")
        played = ds.dataset(episodes_uri.removeprefix("s3://"), filesystem=s3, format="parquet")
        assert sorted(played.to_table(columns=["task_id"]).column(0).to_pylist()) == sorted(
            expected["task_id"]
        )
        local = client.download_artifacts(zero_shot.info.run_id, "results.csv", str(tmp_path))
        results = pd.read_csv(local)
        assert sorted(results["task_id"]) == sorted(expected["task_id"])

        # And they are where the servers keep them: objects under mlflow/, rows in SQL.
        keys = [
            o["Key"]
            for o in store.client()
            .list_objects_v2(Bucket="distillery", Prefix="mlflow/")
            .get("Contents", [])
        ]
        assert any(k.endswith(f"{zero_shot.info.run_id}/artifacts/results.csv") for k in keys)
        import psycopg

        with psycopg.connect(postgres.uri) as db, db.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runs WHERE lifecycle_stage = 'active'")
            assert cursor.fetchone()[0] == 3

        # -- docs/cluster.md: the report from the object store, on a "laptop" --------
        argv = shlex.split(runbook_report_line())
        report = subprocess.run(
            [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv[1:]],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert report.returncode == 0, report.stderr[-3000:]
        assert "zero_shot" in report.stdout
        out = tmp_path / argv[argv.index("--out") + 1]
        assert any(out.rglob("*.md")) and any(out.rglob("*.png"))


def runbook_report_line() -> str:
    """docs/cluster.md's `distillery report s3://...` line, as written."""
    from tests.k8s.test_runbook import runbook_commands

    (line,) = [c for c in runbook_commands() if c.startswith("distillery report s3://")]
    return line
