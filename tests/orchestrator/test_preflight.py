"""Bad input fails before Ray starts, with one message naming the key; a valid but
unusual combination (a Qdrant server with a local output root) is accepted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.core.errors import UserError
from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.preflight import PreflightError, check_output_dir, check_run
from tests.support import REPO_ROOT


def _configs(tmp_path: Path, *extra: str):
    argv = [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "benchmark.limit=1",
        *extra,
    ]
    return [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), False)]


def _refused(tmp_path: Path, *extra: str) -> str:
    """run_sweep refuses the config before Ray or MLflow start; the message."""
    import ray

    with pytest.raises(PreflightError) as caught:
        run_sweep(_configs(tmp_path, *extra), progress=False)
    assert not ray.is_initialized()
    assert not (tmp_path / "mlflow.db").exists()  # no MLflow run was created
    assert isinstance(caught.value, UserError)
    return str(caught.value)


def test_output_dir_that_is_a_file_unwritable_or_empty(tmp_path):
    (tmp_path / "afile").write_text("x")
    assert _refused(tmp_path, f"output_dir={tmp_path / 'afile'}").startswith(
        f"output_dir: {tmp_path / 'afile'} is a file"
    )
    assert "is inside" in _refused(tmp_path, f"output_dir={tmp_path / 'afile' / 'sub'}")
    with pytest.raises(PreflightError, match="^output_dir: is empty"):
        check_output_dir("")
    if os.geteuid() != 0:  # root writes anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        try:
            assert _refused(tmp_path, f"output_dir={locked / 'runs'}").startswith(
                f"output_dir: cannot write to {locked / 'runs'}"
            )
        finally:
            locked.chmod(0o700)


def test_output_dir_on_an_object_store_needs_an_existing_bucket(tmp_path):
    import fsspec

    fsspec.filesystem("memory").mkdir("/present")
    check_output_dir("memory://present/runs")  # an existing bucket is fine
    with pytest.raises(PreflightError, match="the bucket 'absent' of memory://absent/runs"):
        check_output_dir("memory://absent/runs")


def test_tracking_uri_with_an_unknown_scheme(tmp_path):
    message = _refused(tmp_path, "tracking.uri=mlfow://host:5000")
    assert message.startswith("tracking.uri: unknown scheme 'mlfow'")
    (tmp_path / "f").write_text("a file where the database's folder should be")
    message = _refused(tmp_path, f"tracking.uri=sqlite:///{tmp_path / 'f' / 'x.db'}")
    assert message.startswith(f"tracking.uri: {tmp_path / 'f'} is a file")


def test_base_url_must_be_http_and_api_key_env_set(tmp_path, monkeypatch):
    external = ["student=external", "student.model=m", "methods=[zero_shot]"]
    message = _refused(tmp_path, *external, "student.base_url=localhost:8000/v1")
    assert message.startswith("student.base_url: 'localhost:8000/v1' is not an http(s) URL")
    monkeypatch.delenv("DISTILLERY_TEST_UNSET_KEY", raising=False)
    message = _refused(
        tmp_path,
        *external,
        "student.base_url=http://127.0.0.1:9/v1",
        "student.api_key_env=DISTILLERY_TEST_UNSET_KEY",
    )
    assert message.startswith(
        "student.api_key_env: environment variable DISTILLERY_TEST_UNSET_KEY is not set"
    )


def test_a_key_in_the_url_and_an_api_key_env_do_not_replace_each_other(tmp_path, monkeypatch):
    monkeypatch.setenv("DISTILLERY_TEST_KEY", "sk-set-0123456")
    message = _refused(
        tmp_path,
        "student=external",
        "student.model=m",
        "methods=[zero_shot]",
        "student.base_url=http://user:sk-in-url-0123@127.0.0.1:9/v1",
        "student.api_key_env=DISTILLERY_TEST_KEY",
    )
    assert "student.base_url" in message and "student.api_key_env" in message
    assert "sk-in-url-0123" not in message and "sk-set-0123456" not in message


def test_an_unused_models_key_is_not_required(tmp_path, monkeypatch):
    """Only what the planned stages call is checked: zero-shot never calls the teacher."""
    monkeypatch.delenv("DISTILLERY_TEST_UNSET_KEY", raising=False)
    configs = _configs(
        tmp_path,
        "teacher=external",
        "teacher.model=t",
        "teacher.base_url=http://127.0.0.1:9/v1",
        "teacher.api_key_env=DISTILLERY_TEST_UNSET_KEY",
        "methods=[zero_shot]",
    )
    check_run(plan_sweep(configs))


def test_a_qdrant_server_with_a_local_output_root_is_accepted(tmp_path):
    configs = _configs(tmp_path, "memory.store.url=http://127.0.0.1:6333", "methods=[amd_wf]")
    check_run(plan_sweep(configs))
    with pytest.raises(PreflightError, match="^memory.store: give path"):
        check_run(
            plan_sweep(
                _configs(
                    tmp_path,
                    "memory.store.url=http://127.0.0.1:6333",
                    f"memory.store.path={tmp_path / 'q'}",
                    "methods=[amd_wf]",
                )
            )
        )


def test_the_cli_prints_one_message_and_no_traceback(tmp_path):
    (tmp_path / "afile").write_text("x")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "distillery.orchestrator.cli.app",
            f"output_dir={tmp_path / 'afile'}",
            f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2
    said = [line for line in out.stderr.splitlines() if line.startswith("distillery:")]
    assert said == [f"distillery: output_dir: {tmp_path / 'afile'} is a file, not a folder"]
    assert "Traceback" not in out.stdout + out.stderr


def test_the_memory_service_uses_the_server_not_the_default_folder(tmp_path):
    """The service no longer passes the local root's default Qdrant folder along with
    a server URL (which MemoryStore refuses)."""
    from distillery.workers.memory.config import EmbedderConfig, StoreConfig
    from distillery.workers.memory_service import MemoryServiceImpl

    service = MemoryServiceImpl(
        StoreConfig(url="http://127.0.0.1:9"), EmbedderConfig(), str(tmp_path / "qdrant")
    )
    assert service.store.mode == "server" and service.store.location == "http://127.0.0.1:9"
    assert not (tmp_path / "qdrant").exists()


def test_cluster_ray_never_guesses_which_ray_to_join(tmp_path, monkeypatch):
    """cluster=ray joins the address given (cluster.ray_address or RAY_ADDRESS); with
    neither, or with Ray's `auto` (whatever Ray runs on this host), the run refuses
    with one line naming both and cluster=local, before Ray or MLflow start."""
    from distillery.orchestrator.planning.preflight import check_cluster

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    said = _refused(tmp_path, "cluster=ray")
    assert said.startswith("cluster.ray_address: cluster=ray joins an existing Ray cluster")
    assert "RAY_ADDRESS" in said and "cluster=local" in said and "\n" not in said
    assert "auto would join" in _refused(tmp_path, "cluster=ray", "cluster.ray_address=auto")
    monkeypatch.setenv("RAY_ADDRESS", "auto")
    assert "RAY_ADDRESS=auto" in _refused(tmp_path, "cluster=ray")

    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.7:6379")
    (cfg,) = _configs(tmp_path, "cluster=ray")
    assert cfg.cluster.address() == "10.0.0.7:6379"
    check_cluster(cfg)  # accepted
    (cfg,) = _configs(tmp_path, "cluster=ray", "cluster.ray_address=ray://head:10001")
    assert cfg.cluster.address() == "ray://head:10001"  # the config's address wins
    (cfg,) = _configs(tmp_path)  # cluster=local starts a private Ray, whatever is set
    assert not cfg.cluster.joins and cfg.cluster.address() is None
