"""What stage reuse and resume save on an M-point sweep, measured side by side.

1. LLM calls: an M-point sweep over the Workflow k (teacher, zero-shot and AMD per
   point; LLM teacher, builder and student all answered by a latency-injecting scripted
   server) run by distillery, against a naive per-point pipeline (every point run on
   its own, with nothing shared). Prints both request counts and their ratio.
2. Resume: the time to finish a sweep that is 90 % done (10 % of its episodes dropped
   from the ledger, as after a crash) against the time of the fresh run.

    python bench/sweep_reuse.py --points 4 --tasks 5 --delay 0.05
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points  # noqa: E402
from distillery.orchestrator.core.config import to_config  # noqa: E402
from distillery.orchestrator.driver.run import ray_session, run_sweep  # noqa: E402
from distillery.testing.scripted_server import run_stub_server, stub_stats  # noqa: E402


def argv_for(root: Path, url: str, tasks: int, ks: list[int]) -> list[str]:
    llm = ["backend=external", f"base_url={url}", "model=scripted", "action_format=native"]
    return [
        f"output_dir={root / 'runs'}",
        f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
        f"benchmark.limit={tasks}",
        "methods=[teacher,zero_shot,amd_wf_st_fn]",
        "protocol=self_excluded",
        "agent.retry_backoff_s=0",
        "teacher=external",
        "student=external",
        *[f"teacher.{x}" for x in llm],
        *[f"student.{x}" for x in llm],
        "teacher.name=scripted-teacher",
        "memory.retrieval.k_wf=" + ",".join(str(k) for k in ks),
    ]


def configs(argv: list[str]):
    return [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), multirun=True)]


def requests(url: str) -> int:
    return int(stub_stats(url).get("requests", 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=4, help="sweep points (k values)")
    parser.add_argument("--tasks", type=int, default=5)
    parser.add_argument("--delay", type=float, default=0.05, help="seconds per LLM call")
    args = parser.parse_args()
    ks = list(range(1, args.points + 1))

    from distillery.orchestrator.core.config import ClusterConfig

    with (
        tempfile.TemporaryDirectory() as tmp,
        ray_session(ClusterConfig()),
        run_stub_server("distillery.testing.scripts:agent_or_builder", delay_s=args.delay) as url,
    ):
        root = Path(tmp)
        start = requests(url)
        started = time.perf_counter()
        run_sweep(configs(argv_for(root / "sweep", url, args.tasks, ks)), progress=False)
        sweep_s = time.perf_counter() - started
        sweep_calls = requests(url) - start

        start = requests(url)
        started = time.perf_counter()
        for k in ks:  # the naive pipeline: each point alone, from scratch
            run_sweep(configs(argv_for(root / f"naive{k}", url, args.tasks, [k])), progress=False)
        naive_s = time.perf_counter() - started
        naive_calls = requests(url) - start

        print(f"{args.points}-point sweep on {args.tasks} tasks ({args.delay * 1000:.0f} ms/call)")
        print(f"  LLM calls: distillery {sweep_calls}, naive per-point {naive_calls}")
        print(f"  ratio naive/distillery: {naive_calls / max(sweep_calls, 1):.2f}x")
        print(f"  wall: distillery {sweep_s:.1f} s, naive {naive_s:.1f} s")

        # Resume: drop 10 % of the finished episodes of the student stages.
        done = sorted((root / "sweep" / "runs" / "stages").glob("evaluate/*/done/*.json"))
        dropped = random.Random(0).sample(done, max(1, len(done) // 10))
        for record in dropped:
            record.unlink()
        start = requests(url)
        started = time.perf_counter()
        run_sweep(configs(argv_for(root / "sweep", url, args.tasks, ks)), progress=False)
        resume_s = time.perf_counter() - started
        print(
            f"  finish a 90%-done sweep: {resume_s:.1f} s ({requests(url) - start} calls for "
            f"{len(dropped)} of {len(done)} student episodes) vs fresh {sweep_s:.1f} s: "
            f"{sweep_s / resume_s:.1f}x faster"
        )


if __name__ == "__main__":
    main()
