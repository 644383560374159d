"""A normal run prints the plan, the progress and the summary; third-party announcements
come back with -v."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT

pytestmark = pytest.mark.slow
NOISE = (
    "Token authentication is enabled",  # Ray, private local cluster
    "Started a local Ray instance",  # Ray
    "Creating initial MLflow database tables",  # MLflow
    "Flushing the async trace logging queue",  # MLflow, at exit
    "Editable installation",  # setuptools
    "DeprecationWarning",
)


def _distillery(tmp_path, *extra: str) -> str:
    argv = [
        "methods=[teacher]",
        "benchmark.limit=1",
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        *extra,
    ]
    # The variables a quiet run sets for the libraries: left in this process's
    # environment by any in-process run before, they would silence `-v` here too.
    env = {
        k: v for k, v in os.environ.items() if k not in ("RAY_LOGGER_LEVEL", "MLFLOW_LOGGING_LEVEL")
    }
    done = subprocess.run(
        [sys.executable, "-m", "distillery.orchestrator.cli.app", *argv],
        capture_output=True, text=True, cwd=REPO_ROOT, timeout=600, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout + done.stderr


def test_a_run_prints_only_its_own_output_and_v_brings_the_rest_back(tmp_path):
    quiet = _distillery(tmp_path / "a")
    assert "success 100.0%" in quiet
    noisy = [line for line in quiet.splitlines() if any(n in line for n in NOISE)]
    assert noisy == [], quiet[-4000:]
    verbose = _distillery(tmp_path / "b", "-v")
    assert "Started a local Ray instance" in verbose
    assert "Creating initial MLflow database tables" in verbose
