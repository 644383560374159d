"""A key the driver has but a node of the joined Ray cluster lacks: the pre-flight asks
every live node (a task pinned to each) before any stage runs, and says it in one line
naming the variable, the key that names it and the node; it was a traceback from an
episode worker's constructor. The node here is a local Ray started before the driver
set the variable: its workers do not have it, exactly as a node started without it."""

from __future__ import annotations

import pytest

from distillery.orchestrator.core.errors import UserError
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.preflight import (
    PreflightError,
    check_node_variables,
    variables_read_on_nodes,
)
from tests.support.sweep_config import sweep_config


@pytest.fixture
def ray_node(monkeypatch):
    import ray

    monkeypatch.delenv("DISTILLERY_TEST_NODE_KEY", raising=False)
    ray.init(num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


@pytest.mark.slow
def test_a_key_missing_on_a_node_is_one_line(ray_node, monkeypatch):
    import ray

    monkeypatch.setenv("DISTILLERY_TEST_NODE_KEY", "sk-driver-only")  # the driver has it
    with pytest.raises(PreflightError) as missing:
        check_node_variables({"DISTILLERY_TEST_NODE_KEY": "student=gpt: api_key_env", "PATH": "x"})
    line = str(missing.value)
    assert isinstance(missing.value, UserError)  # the CLI prints it alone, exit 2
    assert "\n" not in line
    assert line.startswith(
        "student=gpt: api_key_env: environment variable DISTILLERY_TEST_NODE_KEY is not set "
        "on node(s) "
    )
    node = ray.nodes()[0]
    assert node["NodeManagerHostname"] in line
    assert "PATH" not in line  # set on the node: not named
    assert "distillery submit --env DISTILLERY_TEST_NODE_KEY" in line


def test_the_variables_of_every_role_are_asked_for(tmp_path):
    """Student, builder model, AgentBrew's curator and the embedder: each key's variable
    is asked of every node, named by the key that names it."""
    url = "http://127.0.0.1:9/v1"
    cfg = sweep_config(
        tmp_path,
        "benchmark.limit=2",
        "protocol=cross_split",
        "methods=[zero_shot,amd_wf,agentbrew]",
        "teacher=external",
        "teacher.model=t",
        f"teacher.base_url={url}",
        "teacher.api_key_env=TEACHER_KEY",
        "student=external",
        "student.model=m",
        f"student.base_url={url}",
        "student.api_key_env=STUDENT_KEY",
        f"+builder_models.writer={{name: writer, backend: external, model: m, base_url: '{url}',"
        " api_key_env: WRITER_KEY}",
        f"+builder_models.cur={{name: cur, backend: external, model: m, base_url: '{url}', "
        "api_key_env: CURATOR_KEY}",
        "memory.builder.model=writer",
        "+method_catalog.agentbrew.retrieval={brew: {curator: cur}}",
        "memory/embedder=text_embedding_3_small",
    )
    names = variables_read_on_nodes(plan_sweep([cfg]))
    assert names["STUDENT_KEY"].startswith("student")
    assert names["TEACHER_KEY"].startswith("teacher")
    assert "writer" in names["WRITER_KEY"]
    assert "cur" in names["CURATOR_KEY"]
    assert names["OPENAI_API_KEY"] == "memory.embedder.api_key_env"
