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

from distillery.testing.scripted_server import run_stub_server
from distillery.workers.trajectories import read_episodes
from tests.support import REPO_ROOT

ENV_CANARY = "sk-envcanary-7f3a9c1e55"
URL_CANARY = "urlcanary-0b8d4e2f77"
ARG_CANARY = "argcanary-91c2d3e4f5"
FLAG_CANARY = "flagcanary-3e4f5a6b7c"  # --hf-token=KEY: a secret-named flag, inline
BODY_CANARY = "bodycanary-8d9e0f1a2b"  # extra_body.api_token: a secret-named value
STORE_CANARY = "storecanary-5a6b7c8d9e"
EMBED_CANARY = "embedcanary-c3d4e5f6a7"  # a bare token as the embedder URL's userinfo
CANARIES = (
    ENV_CANARY,
    URL_CANARY,
    ARG_CANARY,
    FLAG_CANARY,
    BODY_CANARY,
    STORE_CANARY,
    EMBED_CANARY,
)
# Not planted end to end: a key in `tracking.uri`. Only a tracking server takes one
# (http://user:KEY@host; a sqlite:/// or file: URI has no userinfo), and this test runs
# against a local SQLite store that it reads directly: a key there would need an MLflow
# server started by the test (not done here). The composed-config test below covers the
# tracking URI up to the MLflow params, and tests/test_redaction.py its collection.
TRACKING_CANARY = "trackingcanary-1b2c3d4e5f"


def _canary_overrides(student_host: str) -> list[str]:
    return [
        # A key in the URL's userinfo; the endpoint answers 503, so error messages
        # quote the URL; and keys in server arguments, as a pair and inline.
        "student=external",
        f"student.base_url=http://user:{URL_CANARY}@{student_host}",
        "student.model=scripted",
        "student.max_retries=0",
        f"student.extra_args=[--api-key,{ARG_CANARY},'--hf-token={FLAG_CANARY}']",
        # A secret-named value (sent in every request, and logged with the config).
        f"+student.extra_body.api_token={BODY_CANARY}",
        # A Qdrant server URL with a key (unused by these methods, but logged).
        f"memory.store.url=http://qdrant:{STORE_CANARY}@127.0.0.1:6333",
        # An embeddings endpoint with a bare token as its userinfo (logged likewise).
        f"memory.embedder.base_url=http://{EMBED_CANARY}@127.0.0.1:9/v1",
    ]


def test_every_planted_key_is_collected_from_the_composed_config(tmp_path, monkeypatch):
    """The places planted below, and `tracking.uri`, as the CLI composes them: every
    key is found by value, and none reaches the MLflow params."""
    from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
    from distillery.orchestrator.core.config import to_config
    from distillery.orchestrator.tracking.tracker import safe_params
    from distillery.redaction import secrets_in

    monkeypatch.setenv("DISTILLERY_CANARY_KEY", ENV_CANARY)
    argv = [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=http://mlflow:{TRACKING_CANARY}@127.0.0.1:5000",
        "methods=[teacher,zero_shot]",
        "teacher=external",
        "teacher.base_url=http://127.0.0.1:9/v1",
        "teacher.model=scripted",
        "teacher.api_key_env=DISTILLERY_CANARY_KEY",
        *_canary_overrides("127.0.0.1:9/v1"),
    ]
    ((_, composed),) = sweep_points(rewrite_role_overrides(argv), False)
    config = to_config(composed)
    assert secrets_in(config) >= {*CANARIES, TRACKING_CANARY}
    params = safe_params(config.model_dump(mode="json"))
    assert [k for k, v in params.items() if any(c in v for c in (*CANARIES, TRACKING_CANARY))] == []
    assert params["tracking.uri"] == "http://<redacted>@127.0.0.1:5000"
    assert params["memory.embedder.base_url"] == "http://<redacted>@127.0.0.1:9/v1"
    assert params["student.extra_body.api_token"] == "<redacted>"


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


@pytest.mark.slow
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
            run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as teacher_url,
            run_stub_server(script="distillery.testing.bfcl_scripts:server_error") as student_url,
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
                *_canary_overrides(host),
            ]
            out = subprocess.run(
                [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
        console = out.stdout + out.stderr
        # Item 7: the zero-shot point is all infra errors: no rate, rc 3, how to resume.
        assert out.returncode == 3, console[-4000:]
        assert "success   no scored episodes (0 of 2)" in out.stdout
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
        assert zero.params["student.extra_args"] == (
            "['--api-key', '<redacted>', '--hf-token=<redacted>']"
        )
        assert zero.params["student.extra_body.api_token"] == "<redacted>"
        # A zero-shot point's params hold only what its result depends on; the memory
        # settings are the sweep's, on the parent run.
        (parent,) = [
            r
            for r in client.search_runs([experiment.experiment_id])
            if "mlflow.parentRunId" not in r.data.tags
        ]
        assert "memory.embedder.base_url" not in zero.params
        assert parent.data.params["memory.embedder.base_url"] == "http://<redacted>@127.0.0.1:9/v1"
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
