"""The groups of tests/conftest.py (tests/support/parallel_groups.py) against the code:
every test module that starts a multi-node Ray cluster, builds a venv or grades code in
jails is in the group that keeps it on one worker when the suite runs in parallel, every
fixture the table names exists (a renamed fixture would silently leave its tests
ungrouped), and xdist really keeps a group on one worker."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.support import REPO_ROOT
from tests.support import parallel_groups as groups

TESTS = REPO_ROOT / "tests"
# What a module does that puts it in a group, read from its source.
SIGNS = {
    "ray-cluster": re.compile(r"from tests\.support\.(ray_cluster|ray_head|cluster_twin) import"),
    "sandbox": re.compile(r"from distillery\.workers\.sandbox|benchmark=(mbpp|humaneval)"),
}


def _modules() -> list[str]:
    return sorted(str(p.relative_to(REPO_ROOT)) for p in TESTS.rglob("test_*.py"))


def _fixture_groups(module: str) -> set[str]:
    """The groups of the fixtures a module's tests or fixtures name as parameters."""
    source = (REPO_ROOT / module).read_text()
    return {
        group
        for fixture, group in groups.FIXTURE_GROUPS.items()
        if re.search(rf"def \w+\([^)]*\b{fixture}\b", source)
    }


@pytest.mark.parametrize("group", sorted(SIGNS))
def test_every_module_that_uses_a_shared_resource_is_in_its_group(group):
    missing = []
    for module in _modules():
        if module == "tests/test_parallel_groups.py":
            continue
        if SIGNS[group].search((REPO_ROOT / module).read_text()) is None:
            continue
        if groups.MODULE_GROUPS.get(module) != group and group not in _fixture_groups(module):
            missing.append(module)
    assert not missing, f"add to tests/support/parallel_groups.py's {group!r} group: {missing}"


def test_every_grouping_fixture_exists():
    sources = "\n".join(p.read_text() for p in TESTS.rglob("*.py"))
    for fixture in groups.FIXTURE_GROUPS:
        assert re.search(rf"^def {fixture}\(", sources, re.MULTILINE), fixture
    for module in groups.MODULE_GROUPS:
        assert (REPO_ROOT / module).is_file(), module


GROUPED = """
import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.name.startswith("test_grouped"):
            item.add_marker(pytest.mark.xdist_group("one"))
"""

CASES = """
import os
import time
from pathlib import Path


def _where(name):
    time.sleep(0.2)  # long enough that both workers take tests
    with (Path(os.environ["GROUP_PROBE"]) / name).open("w") as out:
        out.write(os.environ.get("PYTEST_XDIST_WORKER", "-"))


def test_grouped_a():
    _where("a")


def test_grouped_b():
    _where("b")


def test_grouped_c():
    _where("c")


def test_free_d():
    _where("d")


def test_free_e():
    _where("e")


def test_free_f():
    _where("f")
"""


def test_marks_given_at_collection_keep_a_group_on_one_worker(tmp_path):
    """The mechanism itself, run for real: marks added in a conftest's
    pytest_collection_modifyitems (as tests/conftest.py does) under `-n 2 --dist
    loadgroup` put the group's tests on one worker (pytest 9.2 with xdist 3.8 did not,
    silently: pyproject.toml pins pytest below it)."""
    (tmp_path / "conftest.py").write_text(GROUPED)
    (tmp_path / "test_cases.py").write_text(CASES)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "-c", "/dev/null", "--rootdir", str(tmp_path),
         str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"GROUP_PROBE": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    workers = {name: (tmp_path / name).read_text() for name in "abcdef"}
    assert len({workers[n] for n in "abc"}) == 1, workers  # the group: one worker
    assert len(set(workers.values())) == 2, workers  # and both workers were used
