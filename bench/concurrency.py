"""Episode concurrency: a plain sequential loop vs distillery at concurrency C.

Both play BFCL multi-turn episodes against the same latency-injecting
OpenAI-compatible server (a fixed delay per call, unlimited concurrency). The
sequential loop is measured on a sample and reported per LLM call; distillery runs
all N episodes on local Ray workers. Prints both wall times, the speed-up, its ratio to
the ideal C x (and to the best schedule the episodes' lengths allow), and the
orchestrator's CPU time per step.

    python bench/concurrency.py --episodes 200 --concurrency 64 --delay 0.2
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from distillery.orchestrator.config import ClusterConfig  # noqa: E402
from distillery.orchestrator.run import ray_session, run_agent  # noqa: E402
from distillery.workers.envs.registry import make_benchmark  # noqa: E402
from distillery.workers.episodes import AgentJob, EpisodeRunner  # noqa: E402
from distillery.workers.llm.config import ModelConfig  # noqa: E402
from distillery.workers.trajectories import read_episodes  # noqa: E402
from tests.support.openai_stub import run_stub_server  # noqa: E402

SCRIPT = "tests.support.bfcl_scripts:replay_text"


def best_schedule_wall(calls_per_episode: list[int], slots: int, delay: float) -> float:
    """Wall time of greedy list scheduling with zero overhead: the ideal for this set."""
    heap = [0.0] * min(slots, len(calls_per_episode))
    for calls in calls_per_episode:
        start = heapq.heappop(heap)
        heapq.heappush(heap, start + calls * delay)
    return max(heap) if heap else 0.0


def make_job(url: str, concurrency: int, out: Path, name: str) -> AgentJob:
    model = ModelConfig(
        name="stub",
        backend="external",
        model="stub",
        base_url=url,
        action_format="prompt",
        max_concurrency_per_server=concurrency,
        max_retries=0,
    )
    return AgentJob(
        run_id="bench",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(out / name),
    )


async def sequential(job: AgentJob, url: str, task_ids: list[str]) -> float:
    runner = EpisodeRunner(job, endpoints=[url])
    started = time.perf_counter()
    for task_id in task_ids:
        await runner.run_task(task_id)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--delay", type=float, default=0.2, help="seconds per LLM call")
    parser.add_argument("--sequential-sample", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="play each task this many times (more episodes than tasks lets a schedule "
        "approach C x despite unequal episode lengths)",
    )
    args = parser.parse_args()

    task_ids = [t.task_id for t in make_benchmark("bfcl_multi_turn_base").load_tasks()]
    sample = task_ids[: args.sequential_sample]
    task_ids = task_ids[: args.episodes] * args.repeats
    with (
        tempfile.TemporaryDirectory() as tmp,
        run_stub_server(script=SCRIPT, delay_s=args.delay) as url,
    ):
        out = Path(tmp)
        seq_job = make_job(url, 1, out, "sequential")
        seq_wall = asyncio.run(sequential(seq_job, url, sample))
        seq_calls = sum(r.n_llm_calls for r in read_episodes(seq_job.episodes_dir))

        job = make_job(url, args.concurrency, out, "concurrent")
        cluster = ClusterConfig(
            num_workers=args.workers,
            episodes_per_worker=-(-args.concurrency // args.workers),
            num_cpus=2,
        )
        cpu_before = time.process_time()
        with ray_session(cluster):
            run = run_agent(job, [url], task_ids, cluster, progress=False)
        driver_cpu = time.process_time() - cpu_before
        records = run.summaries  # repeats of a task share its episode file on disk

    calls = [r.n_llm_calls for r in records]
    total_calls = sum(calls)
    per_call_seq = seq_wall / seq_calls
    seq_estimate = per_call_seq * total_calls
    speedup = seq_estimate / run.wall_s
    ideal = min(args.concurrency, len(task_ids))
    schedule_wall = best_schedule_wall(calls, args.concurrency, per_call_seq)
    schedule_speedup = seq_estimate / schedule_wall
    failed = sum(1 for r in records if r.success is not True)

    print(f"episodes                 {len(records)} ({total_calls} LLM calls, {failed} not solved)")
    print(f"delay per call           {args.delay * 1000:.0f} ms")
    print(
        f"sequential loop          {seq_wall:.2f} s for {len(sample)} episodes "
        f"({per_call_seq * 1000:.1f} ms/call) -> {seq_estimate:.1f} s for all {len(records)}"
    )
    print(f"distillery C={args.concurrency:<4d}        {run.wall_s:.2f} s")
    print(f"speed-up                 {speedup:.1f}x")
    print(f"ideal C x                {ideal}x  -> ratio {speedup / ideal:.2f}")
    print(
        f"best schedule possible   {schedule_speedup:.1f}x (episode lengths) -> ratio "
        f"{speedup / schedule_speedup:.2f}"
    )
    print(
        f"orchestrator CPU/step    {1000 * (run.worker_cpu_s + driver_cpu) / total_calls:.2f} ms "
        f"(workers {run.worker_cpu_s:.2f} s + driver {driver_cpu:.2f} s)"
    )


if __name__ == "__main__":
    main()
