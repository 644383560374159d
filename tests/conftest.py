"""How the suite shares one machine when it runs in parallel (CI: `pytest -n 2 --dist
loadgroup`, scripts/test.sh).

pytest-xdist hands tests to its workers one by one, but some tests hold a resource of the
whole machine, and two of them at once would see each other. Such tests carry an
`xdist_group`, given here at collection, so that every test of a group runs on one worker,
one after another (with `--dist loadgroup`; without xdist the marks do nothing):

- `sandbox`: tests that grade model-written code in jails, and the sandbox's own tests:
  `leaves_nothing` scans every process of the machine for a jail uid and the temp dir for
  sandbox folders, so a jail of a test on the other worker would fail it.
- `ray-cluster`: the multi-node Ray clusters on loopback (a head and a node per pod,
  each `ray start`): a few of them at once on two cores starve each other's start-up.
  A single-node `ray.init` is private (free ports, a session dir of its own) and runs
  anywhere.
- one group per venv builder (`appworld`, `toolsandbox`, `isolated-counter`,
  `qwen-math`): each builds its venv once per worker session; one worker builds it once.

A group is chosen by the fixtures a test uses or by its module (what it does inside a
sweep it starts, a fixture cannot say). `tests/test_parallel_groups.py` checks the table
against the code: every test that uses one of the resources is in its group.
"""

from __future__ import annotations

import pytest

# Fixture -> group: a test that uses the fixture (directly or through another) is in it.
FIXTURE_GROUPS: dict[str, str] = {
    "sandbox": "sandbox",
    "leaves_nothing": "sandbox",
    "evalplus_packages": "sandbox",
    "appworld_envs": "appworld",
    "toolsandbox_envs": "toolsandbox",
    "envs_dir": "isolated-counter",
    "qwen_reference_libs": "qwen-math",
}

# Module (path from the repository root, as pytest names it) -> group.
MODULE_GROUPS: dict[str, str] = {
    # grades MBPP/HumanEval code in jails (the benchmarks' own tests and their sweeps)
    "tests/workers/envs/answers/test_code.py": "sandbox",
    "tests/orchestrator/test_answer_sweeps.py": "sandbox",
    # multi-node Ray clusters: tests/support/ray_cluster.py, ray_head.py, cluster_twin.py
    "tests/k8s/test_cluster_twin.py": "ray-cluster",
    "tests/orchestrator/test_multinode.py": "ray-cluster",
    "tests/orchestrator/test_submit.py": "ray-cluster",
}


def group_of(item: pytest.Item) -> str | None:
    module = item.nodeid.split("::", 1)[0]
    if module in MODULE_GROUPS:
        return MODULE_GROUPS[module]
    for fixture in getattr(item, "fixturenames", ()):
        if fixture in FIXTURE_GROUPS:
            return FIXTURE_GROUPS[fixture]
    return None


# tryfirst: xdist's worker reads the marks in its own pytest_collection_modifyitems (to
# rename each grouped test `NODEID@GROUP`), which otherwise runs before this one.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = group_of(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
