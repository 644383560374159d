"""The ToolSandbox venv, built once per test session by the documented install command
from the vendored checkout (skipped with the reason when the checkout or the package
index is not there), or once for good under $DISTILLERY_TEST_ENVS_DIR when it is set. `DISTILLERY_TEST_TOOLSANDBOX_ENVS=DIR` reuses the venv a previous
session built under DIR instead, once `check` finds it ready (local iterations)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.workers.envs.isolated.venv import EnvNotReady, check
from distillery.workers.envs.toolsandbox.benchmark import checkout, checkout_digest, env_spec

REUSE = "DISTILLERY_TEST_TOOLSANDBOX_ENVS"
UNREACHABLE = ("Could not find a version", "No matching distribution", "onnection")


@pytest.fixture(scope="session")
def toolsandbox_envs(tmp_path_factory) -> Path:
    """DISTILLERY_ENVS_DIR holding the toolsandbox venv (slow: pip installs its pins)."""
    source = checkout()
    if not (source / "pyproject.toml").is_file():
        pytest.skip(f"no ToolSandbox checkout at {source} (set TOOLSANDBOX_CHECKOUT)")
    reused = os.environ.get(REUSE)
    if reused:
        spec = env_spec(source)
        try:
            check(spec, Path(reused) / spec.default_path().name)
            return Path(reused)
        except EnvNotReady:
            pass  # built below, as in CI
    cached = os.environ.get("DISTILLERY_TEST_ENVS_DIR")
    # A cache kept between runs (scripts/test.sh sets it): one folder per content of the
    # checkout (the venv installs a copy of it; its own name keys the pins and the
    # checkout's path), and the install command rebuilds what its marker does not match.
    root = (
        Path(cached) / f"toolsandbox-checkout-{checkout_digest(source)}"
        if cached
        else tmp_path_factory.mktemp("toolsandbox_envs")
    )
    done = subprocess.run(
        [sys.executable, "-m", "distillery.workers.envs.isolated", "install", "toolsandbox"],
        env={**os.environ, "DISTILLERY_ENVS_DIR": str(root)},
        capture_output=True,
        text=True,
        timeout=1200,
    )
    if done.returncode != 0 and any(sign in done.stderr for sign in UNREACHABLE):
        pytest.skip("the package index cannot serve ToolSandbox's pins")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@pytest.fixture
def toolsandbox_ready(toolsandbox_envs, monkeypatch) -> Path:
    monkeypatch.setenv("DISTILLERY_ENVS_DIR", str(toolsandbox_envs))
    return toolsandbox_envs
