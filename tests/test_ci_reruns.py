"""CI re-runs a failed test only for the start-up flukes `.ci/rerun-flukes` names: a
test failing with one of them is run again (and may pass), a test failing any other way
fails at once, run once. Checked by running pytest as `.ci/run` does on two tests."""

from __future__ import annotations

import subprocess
import sys

from tests.support import REPO_ROOT

FLUKES = REPO_ROOT / ".ci" / "rerun-flukes"

CASES = '''
import os
from pathlib import Path

RUNS = Path(os.environ["RERUN_PROBE_DIR"])


def _run(name):
    runs = RUNS / name
    runs.write_text(runs.read_text() + "x" if runs.exists() else "x")
    return len(runs.read_text())


def test_a_ray_node_that_dies_starting():
    if _run("fluke") == 1:
        raise RuntimeError("ray node cpu-0 did not start:\\n(the node's log)")


def test_a_wrong_result():
    _run("wrong")
    assert 1 + 1 == 3, "a wrong sum"
'''


def rerun_arguments() -> list[str]:
    """What `.ci/run` passes pytest for the flukes file."""
    patterns = [
        line
        for line in FLUKES.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return [arg for pattern in patterns for arg in ("--only-rerun", pattern)]


def test_only_the_named_flukes_are_rerun(tmp_path):
    assert "--only-rerun" in (REPO_ROOT / ".ci" / "run").read_text()
    (tmp_path / "test_cases.py").write_text(CASES)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--rootdir", str(tmp_path), "-c", "/dev/null", "--reruns", "2",
         "--reruns-delay", "0", *rerun_arguments(), str(tmp_path / "test_cases.py")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={"RERUN_PROBE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:]
    assert (tmp_path / "fluke").read_text() == "xx"  # failed, re-run, passed
    assert (tmp_path / "wrong").read_text() == "x"  # failed once, not re-run
    assert "1 failed, 1 passed, 1 rerun" in done.stdout, done.stdout[-3000:]
