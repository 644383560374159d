"""End to end through the CLI: keys planted in every place a config can carry one never
reach any output (files, MLflow, stdout/stderr, Ray's session logs); a point whose
episodes all failed on infrastructure has no success rate, and the command exits
non-zero saying how to resume."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from distillery.workers.trajectories import read_episodes
from tests.support.openai_stub import REPO_ROOT, run_stub_server

pytestmark = pytest.mark.slow

ENV_CANARY = "sk-envcanary-7f3a9c1e55"
URL_CANARY = "urlcanary-0b8d4e2f77"
ARG_CANARY = "argcanary-91c2d3e4f5"
STORE_CANARY = "storecanary-5a6b7c8d9e"
CANARIES = (ENV_CANARY, URL_CANARY, ARG_CANARY, STORE_CANARY)


def _files_with_canaries(*roots: Path) -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for root in roots:
        for path in root.rglob("*"):
            if not path.is_file() or path.is_symlink():
                continue
            try:
                data = path.read_bytes()
            except OSError:
                continue
            found = [c for c in CANARIES if c.encode() in data]
            if found:
                hits[str(path)] = found
    return hits


def test_canaries_never_leave_and_an_all_infra_point_has_no_rate(tmp_path):
    ray_tmp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO_ROOT),
        "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
        "RAY_TMPDIR": str(ray_tmp),
        "DISTILLERY_CANARY_KEY": ENV_CANARY,
    }
    try:
        with (
            run_stub_server(script="tests.support.bfcl_scripts:replay_native") as teacher_url,
            run_stub_server(script="tests.support.bfcl_scripts:server_error") as student_url,
        ):
            host = student_url.removeprefix("http://")
            argv = [
                f"output_dir={tmp_path / 'runs'}",
                f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                "benchmark.limit=2",
                "methods=[teacher,zero_shot]",
                "agent.retry_backoff_s=0",
                "agent.episode_retries=1",
                "cluster.num_cpus=2",
                # The key named by api_key_env (the teacher's endpoint gets it).
                "teacher=external",
                f"teacher.base_url={teacher_url}",
                "teacher.model=scripted",
                "teacher.api_key_env=DISTILLERY_CANARY_KEY",
                # A key in the URL's userinfo; the endpoint answers 503, so error
                # messages quote the URL; and one in server arguments.
                "student=external",
                f"student.base_url=http://user:{URL_CANARY}@{host}",
                "student.model=scripted",
                "student.max_retries=0",
                f"student.extra_args=[--api-key,{ARG_CANARY}]",
                # A Qdrant server URL with a key (unused by these methods, but logged).
                f"memory.store.url=http://qdrant:{STORE_CANARY}@127.0.0.1:6333",
            ]
            out = subprocess.run(
                [sys.executable, "-m", "distillery.orchestrator.cli", *argv],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        console = out.stdout + out.stderr
        # Item 7: the zero-shot point is all infra errors: no rate, rc 3, how to resume.
        assert out.returncode == 3, console[-4000:]
        assert "success   n/a (no scored episode of 2)" in out.stdout
        assert "INCOMPLETE: 2 episode(s) of 1 point(s) are unscored" in out.stdout
        assert "re-run the same command" in out.stdout and "distillery output_dir=" in out.stdout
        assert f"user:{URL_CANARY}" not in out.stdout

        runs = tmp_path / "runs"
        (zero_shot_dir,) = [
            d
            for d in runs.glob("stages/evaluate/*/episodes")
            if any(r.role == "student" for r in read_episodes(d))
        ]
        records = read_episodes(zero_shot_dir)
        assert {r.termination for r in records} == {"infra_error"}
        # The URL was in the error message, redacted: the test is not vacuous.
        assert all("http://<redacted>@127.0.0.1" in (r.error_message or "") for r in records)
        client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("distillery")
        children = {
            r.data.tags["method"]: r
            for r in client.search_runs([experiment.experiment_id])
            if "mlflow.parentRunId" in r.data.tags
        }
        zero = children["zero_shot"].data
        assert math.isnan(zero.metrics["success_rate"])
        assert math.isnan(zero.metrics["success_rate_ci_low"])
        assert zero.tags["distillery.unscored_episodes"] == "2"
        assert children["teacher"].data.metrics["success_rate"] == 1.0
        assert zero.params["student.base_url"] == f"http://<redacted>@{host}"
        assert zero.params["student.extra_args"] == "['--api-key', '<redacted>']"
        (sweep,) = (runs / "sweeps").iterdir()
        points = pd.read_parquet(sweep / "points.parquet").set_index("method")
        assert points.loc["zero_shot", "n_scored"] == 0
        assert pd.isna(points.loc["zero_shot", "success_rate"])
        assert points.loc["teacher", "success_rate"] == 1.0

        # Item 5: no canary in any file written (ledger, Parquet, tables, MLflow's
        # database and artifacts, server logs), in Ray's session logs, or on the console.
        assert list((ray_tmp).rglob("session_*/logs/*"))  # Ray's logs were written here
        assert _files_with_canaries(tmp_path, ray_tmp) == {}
        assert [c for c in CANARIES if c in console] == []
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
