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
