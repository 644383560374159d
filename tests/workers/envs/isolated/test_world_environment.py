"""A world runs model-influenced code, so it starts from the allow-listed environment
(no secret of the driver's, a private HOME) and, unless its benchmark says it needs
the network, without any (issue 21, item 3)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from distillery.workers.envs.base import ParsedAction, ToolCall
from distillery.workers.envs.isolated.counter import IsolatedCounter

CANARIES = {
    "OPENAI_API_KEY": "sk-canary-openai-4f1e",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-9b2c",
    "QDRANT_API_KEY": "canary-qdrant-77aa",
    "MLFLOW_TRACKING_PASSWORD": "canary-mlflow-0d0d",
    "SOME_OTHER_VARIABLE": "canary-other-5e5e",
}


class ProbeWorld(IsolatedCounter):
    name = "probe_world"
    world = Path(__file__).resolve().parent / "environment_world.py"

    def worker_environment(self) -> dict[str, str]:
        return {"DECLARED_BY_ADAPTER": "yes"}


class NetworkedProbe(ProbeWorld):
    def needs_network(self) -> bool:
        return True


def _report(bench: ProbeWorld, port: int) -> dict:
    task = bench.load_tasks()[0]
    env = bench.make_env(task, "probe")
    try:
        (result,) = env.step(ParsedAction(calls=(ToolCall("probe", (), {"port": port}),)))
        return json.loads(result.content)
    finally:
        env.close()
        bench.close()


@pytest.fixture
def host_port():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    yield server.getsockname()[1]
    server.close()


def test_a_world_sees_no_secret_and_no_network(venv_ready, monkeypatch, host_port):
    for name, value in CANARIES.items():
        monkeypatch.setenv(name, value)
    report = _report(ProbeWorld(), host_port)
    text = json.dumps(report)
    assert not [value for value in CANARIES.values() if value in text]
    env = report["env"]
    assert env["DECLARED_BY_ADAPTER"] == "yes"
    assert set(env) <= {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_COLLATE",
                        "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "TZ", "HOME", "TMPDIR",
                        "DECLARED_BY_ADAPTER"}  # fmt: skip
    home = Path(report["home"])
    assert home.name.startswith("distillery-world-") and env["TMPDIR"] == str(home / "tmp")
    assert report["cwd"] == str(home) and not home.exists()  # removed with the worker
    assert report["interfaces"] == ["lo"] and report["reached"] is False


def test_a_world_that_needs_the_network_has_it_and_still_no_secret(
    venv_ready, monkeypatch, host_port
):
    monkeypatch.setenv("OPENAI_API_KEY", CANARIES["OPENAI_API_KEY"])
    report = _report(NetworkedProbe(), host_port)
    assert report["reached"] is True
    assert CANARIES["OPENAI_API_KEY"] not in json.dumps(report)


def test_tasks_are_listed_where_no_network_namespace_can_be_made(venv_ready, monkeypatch):
    """The planning head on Kubernetes runs with RuntimeDefault seccomp, which refuses
    the `unshare` a network namespace needs. Listing tasks runs no model code (the
    benchmark's library over its data folder), so it needs none: the listing works
    there; an episode (which runs model code) is still refused in one line."""
    from distillery.workers.envs.base import BenchmarkUnavailable
    from distillery.workers.envs.isolated import adapter, process

    refused = "unshare(CLONE_NEWUSER|CLONE_NEWNET): Operation not permitted"
    monkeypatch.setattr(adapter, "network_isolation_unavailable", lambda python: refused)

    def no_namespace(argv: list[str], python: str) -> list[str]:
        raise AssertionError("a network namespace was asked for")

    monkeypatch.setattr(process, "without_network", no_namespace)
    bench = ProbeWorld()
    try:
        tasks = bench.load_tasks()
        assert tasks and bench.load_tasks(task_ids=[tasks[0].task_id]) == [tasks[0]]
        with pytest.raises(BenchmarkUnavailable, match="no network namespace can be made"):
            bench.make_env(tasks[0], "episode")
    finally:
        bench.close()
