"""Fixtures shared by the orchestrator's end-to-end tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def ray_local():
    """A private local Ray on loopback for one test module."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


@pytest.fixture
def plan_offline(monkeypatch):
    """`--plan` without its pre-flight of the world (keys set, servers answering, vLLM
    and GPUs here): for tests of what a plan shows of a paper experiment on a machine
    that has none of those (the pre-flight itself: test_plan_preflight.py)."""
    monkeypatch.setattr(
        "distillery.orchestrator.planning.plan_check.world_problems", lambda *args, **kwargs: []
    )
