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
sweep it starts, a fixture cannot say): the table is tests/support/parallel_groups.py, and
`tests/test_parallel_groups.py` checks it against the code.
"""

from __future__ import annotations

import pytest

from tests.support.parallel_groups import FIXTURE_GROUPS, MODULE_GROUPS


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
