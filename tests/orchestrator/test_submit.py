"""`distillery submit` against a real two-node Ray cluster started with `ray start` (a
head with its dashboard and Jobs API on loopback, a second node joined to it, token
authentication on): the sweep runs as a Ray job from the
packaged checkout, a second submission of a running sweep is refused, a stopped job's
sweep resumes when it is submitted again (only the missing episodes are played, into
the same output root and MLflow parent run), `--follow` streams the job's logs, and a
bad config or a missing token never creates a job."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.cluster.submit import (
    SWEEP_ID_KEY,
    AlreadyRunning,
    merge_overrides,
    override_key,
    prepare,
    runtime_env,
    submit_job,
)
from distillery.testing.scripted_server import run_stub_server, stub_stats
from tests.support import REPO_ROOT
from tests.support.ray_auth import ray_auth_env
from tests.support.ray_head import ray_head

TASKS = 8


@pytest.fixture(scope="module")
def head():
    with ray_head(num_cpus=3, second_node_cpus=2) as started, ray_auth_env(_auth(started)):
        yield started


def _auth(head) -> dict[str, str]:
    return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": head.token}


def _submit(head, *argv: str, env: dict[str, str] | None = None, timeout: float = 600):
    return subprocess.run(
        [sys.executable, "-m", "distillery.orchestrator.cli.app", "submit", *argv],
        cwd=REPO_ROOT,
        env=env or head.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _client(head):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(head.dashboard)


def _sweep_args(root: Path, url: str) -> list[str]:
    return [
        f"output_dir={root / 'runs'}",
        f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
        f"benchmark.limit={TASKS}",
        "methods=[teacher,zero_shot]",
        "agent.retry_backoff_s=0",
        "student=external",
        f"student.base_url={url}",
        "student.model=scripted",
        "student.action_format=native",
        "student.max_retries=1",
        "cluster.num_workers=2",  # one per node
        "cluster.worker_num_cpus=1",
        "cluster.episodes_per_worker=1",
        # One stage at a time: the evaluation gets both workers (one per node), which its
        # log line shows; run at once, the teacher's and the student's stage get one each.
        "cluster.max_stages_in_flight=1",
    ]


def _done(root: Path, kind: str) -> int:
    return len(list((root / "runs").glob(f"stages/{kind}/*/done/*.json")))


def _job_id(stdout: str) -> str:
    (job,) = re.findall(r"submitted as job (\S+)", stdout)
    return job


def _wait_status(client, job_id: str, wanted: set[str], timeout_s: float = 120) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = str(client.get_job_status(job_id).value)
        if status in wanted:
            return status
        time.sleep(1)
    raise TimeoutError(f"{job_id} still {status}")


def test_merge_keeps_the_users_overrides_over_defaults():
    defaults = ["cluster=ray", "output_dir=s3://b/runs", "tracking.uri=http://m:5000"]
    user = ["output_dir=s3://mine/runs", "student=qwen3_4b", "+x.y=1"]
    assert merge_overrides(defaults, user) == [
        "cluster=ray",
        "tracking.uri=http://m:5000",
        *user,
    ]
    assert override_key("model@student=a") == "student" == override_key("student=b")
    assert override_key("++a.b=1") == "a.b"


def test_prepare_pins_local_paths_and_joins_the_cluster(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sweep = prepare(["benchmark.limit=2", "output_dir=rel"], multirun=False)
    assert f"output_dir={tmp_path / 'rel'}" in sweep.overrides
    assert f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}" in sweep.overrides
    assert sweep.overrides[0] == "cluster=ray"
    assert len(sweep.notes) == 2  # both are local to the head node: said so
    words = shlex.split(sweep.entrypoint)
    assert words[:3] == ["python", "-m", "distillery.orchestrator.cli.app"]
    assert words[3:] == sweep.overrides
    # The sweep id is the one `distillery` computes for the same points: runtime knobs
    # (cluster, output root, tracking) are not part of it.
    again = prepare(["benchmark.limit=2", "output_dir=/elsewhere", "cluster=local"], False)
    assert again.sweep_id == sweep.sweep_id and "cluster=ray" not in again.overrides


def test_runtime_env_packages_the_checkout_and_named_variables(monkeypatch):
    monkeypatch.setenv("MY_KEY_FOR_TEST", "s3cr3t")
    runtime = runtime_env(REPO_ROOT, ["MY_KEY_FOR_TEST"])
    assert runtime["working_dir"] == str(REPO_ROOT)
    assert {".venv", ".git", "distillery_runs"} <= set(runtime["excludes"])
    assert runtime["env_vars"]["MY_KEY_FOR_TEST"] == "s3cr3t"
    assert runtime["env_vars"]["HF_HUB_OFFLINE"] == "1"
    monkeypatch.delenv("MY_KEY_FOR_TEST")
    with pytest.raises(ValueError, match="MY_KEY_FOR_TEST"):
        runtime_env(REPO_ROOT, ["MY_KEY_FOR_TEST"])


@pytest.mark.slow
def test_bad_config_or_missing_token_creates_no_job(head, tmp_path):
    bad = _submit(head, "--address", head.dashboard, "student.temperature=9")
    assert bad.returncode == 2
    assert "student.temperature" in bad.stderr
    no_token = {k: v for k, v in head.env.items() if k != "RAY_AUTH_TOKEN"}
    no_token["RAY_AUTH_TOKEN_PATH"] = str(tmp_path / "no-token-here")
    refused = _submit(head, "--address", head.dashboard, f"output_dir={tmp_path}/r", env=no_token)
    assert refused.returncode == 1
    assert "token" in refused.stderr.lower() and "Traceback" not in refused.stderr
    assert _client(head).list_jobs() == []


@pytest.mark.slow
def test_a_submitted_sweep_runs_and_resubmitting_it_resumes(head, tmp_path):
    client = _client(head)
    with run_stub_server(
        script="distillery.testing.bfcl_scripts:replay_native", delay_s=0.5
    ) as url:
        argv = ["--address", head.dashboard, *_sweep_args(tmp_path, url)]
        same = prepare(_sweep_args(tmp_path, url), multirun=False)  # before: it takes time
        first = _submit(head, *argv)
        assert first.returncode == 0, first.stderr[-3000:]
        job = _job_id(first.stdout)
        assert f"dashboard: {head.dashboard}/#/jobs/{job}" in first.stdout
        info = client.get_job_info(job)
        assert info.runtime_env["working_dir"].startswith("gcs://_ray_pkg_")  # uploaded
        sweep_id = info.metadata[SWEEP_ID_KEY]
        assert same.sweep_id == sweep_id

        # Running: the same sweep is not submitted twice.
        deadline = time.monotonic() + 300
        while _done(tmp_path, "evaluate") < 2:
            assert time.monotonic() < deadline, client.get_job_logs(job)[-3000:]
            assert str(client.get_job_status(job).value) in ("PENDING", "RUNNING"), (
                client.get_job_logs(job)[-3000:]
            )
            time.sleep(0.5)
        with pytest.raises(AlreadyRunning, match=f"already running .* as job {job}"):
            submit_job(client, same, runtime_env(None, []), head.dashboard)

        # Stopped mid-sweep, then submitted again: the sweep resumes.
        client.stop_job(job)
        assert _wait_status(client, job, {"STOPPED", "FAILED"}) == "STOPPED"
        assert "2 episode workers on 2 nodes" in client.get_job_logs(job)  # both nodes
        before = _done(tmp_path, "evaluate")
        assert 2 <= before < TASKS
        requests_before = int(stub_stats(url)["requests"])
        again = _submit(head, "--follow", *argv)
        assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
        resumed_job = _job_id(again.stdout)
        assert resumed_job != job and "resumes it" in again.stdout
        assert client.get_job_info(resumed_job).metadata[SWEEP_ID_KEY] == sweep_id
        # --follow streamed the job's own log to its end: its plan and summary.
        assert f"sweep {sweep_id}:" in again.stdout
        assert re.search(r"evaluate:\w+ running \d+ episodes \([1-9]\d* cached\)", again.stdout)
        assert f"job {resumed_job}: SUCCEEDED" in again.stdout
        resumed_requests = int(stub_stats(url)["requests"]) - requests_before

    sweep_dir = tmp_path / "runs" / "sweeps" / sweep_id
    episodes = pd.read_parquet(sweep_dir / "episodes.parquet")
    assert len(episodes) == 2 * TASKS and not episodes.duplicated(["point_id", "task_id"]).any()
    assert _done(tmp_path, "evaluate") == TASKS == _done(tmp_path, "collect")
    student_calls = int(episodes["n_llm_calls"].sum())  # the oracle teacher makes none
    assert 0 < resumed_requests < student_calls  # finished episodes were not replayed

    mlflow = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.get_experiment_by_name("distillery")
    runs = mlflow.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1 and len(runs) == 1 + 2  # the resumed job reopened the parent
    assert parents[0].data.tags["distillery.sweep_id"] == sweep_id
