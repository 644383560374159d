"""Independent stages one at a time vs as a graph, side by side in one run.

N students (each its own model name on one scripted server adding `--delay` s per
call: N zero-shot stages that read nothing) play the same BFCL tasks: first with
`cluster.max_stages_in_flight=1` (one stage at a time, as sweeps ran before), then with
the graph schedule (0: as the capacity allows), each into a fresh output root, on the
same local Ray. Prints each sweep's wall time, the ratio of the two, and each beside
one stage's time alone (the bound when the episode slots fit every stage at once).

    python bench/parallel_stages.py --students 4 --tasks 8 --delay 1.0
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides  # noqa: E402
from distillery.orchestrator.core.config import to_config  # noqa: E402
from distillery.orchestrator.driver.run import ray_session, run_sweep  # noqa: E402
from distillery.testing.scripted_server import run_stub_server  # noqa: E402

SCRIPT = "distillery.testing.bfcl_scripts:replay_native"


def configs(url: str, root: Path, students: int, tasks: int, cap: int, workers: int, epw: int):
    out = []
    for index in range(students):
        overrides = [
            f"output_dir={root / 'runs'}",
            f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
            f"benchmark.limit={tasks}",
            "methods=[zero_shot]",
            "student=external",
            f"student.base_url={url}",
            f"student.name=student-{index}",
            f"student.model=scripted-{index}",  # another model: a stage of its own
            "student.action_format=native",
            f"cluster.num_workers={workers}",
            f"cluster.episodes_per_worker={epw}",
            f"cluster.max_stages_in_flight={cap}",
        ]
        out.append(to_config(compose(rewrite_role_overrides(overrides))))
    return out


def timed_sweep(url: str, students: int, tasks: int, cap: int, workers: int, epw: int) -> float:
    with tempfile.TemporaryDirectory(prefix="distillery-bench-") as folder:
        cfgs = configs(url, Path(folder), students, tasks, cap, workers, epw)
        started = time.perf_counter()
        result = run_sweep(cfgs, progress=False)
        wall = time.perf_counter() - started
        assert result.stages_run == students, result.stages_run
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--delay", type=float, default=1.0, help="seconds per model call")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--episodes-per-worker", type=int, default=16)
    args = parser.parse_args()
    slots = args.workers * args.episodes_per_worker
    print(
        f"{args.students} independent zero-shot stages x {args.tasks} BFCL tasks, "
        f"{args.delay:g} s per call, {slots} episode slots "
        f"({args.workers} workers x {args.episodes_per_worker}); load {os.getloadavg()[0]:.1f}"
    )
    cluster = configs("http://unused/v1", Path("/tmp"), 1, 1, 0, args.workers, 1)[0].cluster
    with (
        run_stub_server(script=SCRIPT, delay_s=args.delay) as url,
        ray_session(cluster.model_copy(update={"num_cpus": os.cpu_count()})),
    ):
        one = timed_sweep(url, 1, args.tasks, 0, args.workers, args.episodes_per_worker)
        serial = timed_sweep(
            url, args.students, args.tasks, 1, args.workers, args.episodes_per_worker
        )
        graph = timed_sweep(
            url, args.students, args.tasks, 0, args.workers, args.episodes_per_worker
        )
    print(f"one stage alone:              {one:7.1f} s")
    print(f"one stage at a time (cap 1):  {serial:7.1f} s  = {serial / one:.2f}x one stage")
    print(f"as a graph (cap 0):           {graph:7.1f} s  = {graph / one:.2f}x one stage")
    print(f"speed-up of the graph schedule: {serial / graph:.2f}x")


if __name__ == "__main__":
    main()
