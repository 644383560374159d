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
import threading
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from distillery.orchestrator.core.config import ClusterConfig  # noqa: E402
from distillery.orchestrator.driver.run import ray_session  # noqa: E402
from distillery.orchestrator.execution.dispatch import run_agent  # noqa: E402
from distillery.orchestrator.execution.sweep import longest_first  # noqa: E402
from distillery.testing.scripted_server import run_stub_server  # noqa: E402
from distillery.workers.envs.registry import make_benchmark  # noqa: E402
from distillery.workers.episodes import AgentJob, EpisodeRunner  # noqa: E402
from distillery.workers.llm.config import ModelConfig  # noqa: E402
from distillery.workers.trajectories import read_episodes  # noqa: E402

SCRIPT = "distillery.testing.bfcl_scripts:replay_text"


def best_schedule_wall(calls_per_episode: list[int], slots: int, delay: float) -> float:
    """Wall time of greedy list scheduling with zero overhead: the ideal for this set."""
    heap = [0.0] * min(slots, len(calls_per_episode))
    for calls in calls_per_episode:
        start = heapq.heappop(heap)
        heapq.heappush(heap, start + calls * delay)
    return max(heap) if heap else 0.0


class CpuSampler:
    """CPU seconds of every process on this (Linux) machine, sampled a few times a
    second, so the CPU spent during a run can be split by who spent it: this
    benchmark's processes (driver, episode workers, the rest of its Ray cluster, the
    stub server) and everything else running on the machine."""

    def __init__(self, interval_s: float = 0.2) -> None:
        self.interval_s = interval_s
        # (time, machine busy CPU s, {pid: CPU s})
        self.samples: list[tuple[float, float, dict[int, float]]] = []
        self._parent: dict[int, int] = {}
        self._command: dict[int, str] = {}
        self._tick = os.sysconf("SC_CLK_TCK")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    @staticmethod
    def available() -> bool:
        return os.path.exists("/proc/stat")

    def start(self) -> CpuSampler:
        self.sample()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> float:
        now = time.perf_counter()
        with open("/proc/stat") as handle:
            fields = [int(x) for x in handle.readline().split()[1:]]
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / self._tick  # minus idle, iowait
        cpu: dict[int, float] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            pid = int(name)
            try:
                with open(f"/proc/{pid}/stat") as handle:
                    rest = handle.read().rsplit(")", 1)[1].split()
                # Named while alive (workers get killed), and again while a Ray worker
                # is idle: it takes its actor's name when it becomes one.
                command = self._command.get(pid)
                if command is None or command.startswith("ray::IDLE") or "_worker" in command:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        command = handle.read().replace(b"\0", b" ").decode(errors="replace")
                    self._command[pid], self._parent[pid] = command, int(rest[1])
            except OSError:
                continue  # exited meanwhile
            cpu[pid] = (int(rest[11]) + int(rest[12])) / self._tick
        with self._lock:
            self.samples.append((now, busy, cpu))
        return now

    def _label(self, pid: int, ours: set[int]) -> str:
        command = self._command.get(pid, "")
        if pid == os.getpid():
            return "driver"
        if pid not in ours:
            return "other processes"
        if "scripted_server" in command:
            return "stub server"
        if command.startswith("ray::EpisodeWorkerImpl"):
            return "episode workers"
        return "ray system"

    def split(self, started: float, ended: float) -> tuple[float, float, dict[str, float]]:
        """(seconds covered, machine busy CPU s, CPU s by label) between two times."""
        with self._lock:
            samples = list(self.samples)
        first = max((s for s in samples if s[0] <= started), key=lambda s: s[0], default=None)
        first = first or samples[0]
        window = [s for s in samples if first[0] <= s[0] <= ended]
        last = window[-1]
        children: dict[int, list[int]] = defaultdict(list)
        for pid, parent in self._parent.items():
            children[parent].append(pid)
        ours, stack = set(), [os.getpid()]
        while stack:  # descendants of this process: its Ray cluster and stub server
            pid = stack.pop()
            ours.add(pid)
            stack.extend(children.get(pid, ()))
        latest: dict[int, float] = {}
        for _, _, cpu in window:  # a process that exited keeps its last reading
            latest.update(cpu)
        by_label: dict[str, float] = defaultdict(float)
        for pid, cpu in latest.items():
            by_label[self._label(pid, ours)] += cpu - first[2].get(pid, 0.0)
        return last[0] - first[0], last[1] - first[1], dict(by_label)


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

    tasks = {t.task_id: t for t in make_benchmark("bfcl_multi_turn_base").load_tasks()}
    task_ids = list(tasks)
    sample = task_ids[: args.sequential_sample]
    # The orchestrator's dispatch order (longest first), as a sweep stage uses it.
    task_ids = longest_first(task_ids[: args.episodes] * args.repeats, tasks)
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
        sampler = CpuSampler().start() if CpuSampler.available() else None
        finished: list[float] = []

        def on_summary(_: object) -> None:
            # The last episode has landed: sample before the workers are shut down.
            finished.append(time.perf_counter())
            if sampler is not None and len(finished) == len(task_ids):
                finished[-1] = sampler.sample()

        cpu_before = time.process_time()
        with ray_session(cluster):
            run = run_agent(job, [url], task_ids, cluster, progress=False, on_summary=on_summary)
        driver_cpu = time.process_time() - cpu_before
        if sampler is not None:
            sampler.stop()
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
    # Where the rest goes: time inside episodes (per call, vs the sequential loop's) and
    # how full the C slots were (dispatch gaps, start-up, the tail).
    episode_s = sum(r.wall_s for r in records)
    print(
        f"inside episodes          {1000 * episode_s / total_calls:.1f} ms/call "
        f"(sequential {per_call_seq * 1000:.1f}); slots busy "
        f"{episode_s / (ideal * run.wall_s):.2f} of {ideal} x {run.wall_s:.2f} s "
        f"(best schedule {sum(calls) * per_call_seq / (ideal * schedule_wall):.2f})"
    )
    print(
        f"orchestrator CPU/step    {1000 * (run.worker_cpu_s + driver_cpu) / total_calls:.2f} ms "
        f"(workers {run.worker_cpu_s:.2f} s + driver {driver_cpu:.2f} s)"
    )
    if sampler is not None:
        # The run's window: its wall time, ending when run_agent returned.
        span, busy, by_label = sampler.split(finished[-1] - run.wall_s, finished[-1])
        order = ["episode workers", "driver", "ray system", "stub server", "other processes"]
        cores = os.cpu_count() or 1
        print(
            f"machine CPU in the run   {busy / span:.2f} of {cores} cores busy over {span:.1f} s: "
            + ", ".join(f"{k} {by_label.get(k, 0.0) / span:.2f}" for k in order)
        )
        print(
            "CPU per LLM call         "
            + ", ".join(f"{k} {1000 * by_label.get(k, 0.0) / total_calls:.2f} ms" for k in order)
        )


if __name__ == "__main__":
    main()
