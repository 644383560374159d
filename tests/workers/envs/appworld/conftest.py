"""A synthetic AppWorld data folder, built once per test session by `build_data.py` with
AppWorld's own library, run by the interpreter of AppWorld's venv (`appworld_envs`, in
tests/workers/envs/conftest.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from distillery.workers.envs.appworld.adapter import AppWorld

BUILD_DATA = Path(__file__).resolve().parent / "build_data.py"


@pytest.fixture(scope="session")
def appworld_data(appworld_envs, tmp_path_factory) -> Path:
    """The AppWorld root (holding `data`) of three synthetic tasks in two scenarios."""
    root = tmp_path_factory.mktemp("appworld_root")
    python = venv_python(appworld_envs)
    done = subprocess.run(
        [str(python), "-I", str(BUILD_DATA), str(root)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root


def venv_python(envs: Path) -> Path:
    """The interpreter of AppWorld's venv under `envs`."""
    from distillery.workers.envs.isolated import venv

    return venv.venv_python(envs / AppWorld.env_spec.default_path().name)


@pytest.fixture
def appworld_ready(appworld_envs, appworld_data, monkeypatch) -> Path:
    monkeypatch.setenv("DISTILLERY_ENVS_DIR", str(appworld_envs))
    monkeypatch.setenv("APPWORLD_ROOT", str(appworld_data))
    return appworld_data
