"""AgentBrew's brew throughput by wave size B: the same brew of BFCL tasks run with
B = 1 (Algorithm 1's sequential stream), 4 and 16 tasks in flight, each reading the
memory as of its wave's start, against scripted student and teacher servers that add a
fixed latency to every call (distillery/testing/agentbrew_scripts.py: the student
solves a hard task only with its group's note). Prints, per B, the brew stage's wall
time and speed-up over B = 1, and what the brew wrote (its Table 3): a wave's tasks
cannot read each other's notes, so larger waves fail more first plays and ask the
teacher more, and notes written for the same group in one wave are merged by the
curator.

    python bench/brew.py --tasks 40 --delay 0.1
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import pandas as pd  # noqa: E402

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points  # noqa: E402
from distillery.orchestrator.core.config import to_config  # noqa: E402
from distillery.orchestrator.driver.run import run_sweep  # noqa: E402
from distillery.testing.scripted_server import run_stub_server  # noqa: E402

FIGURES = {
    "brew.failed_tasks": "first plays failed",
    "brew.teacher_calls": "teacher calls",
    "brew.total_writes": "notes written",
    "brew.merges": "merges",
    "brew.notes": "notes in memory",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=40, help="BFCL tasks (70 %% brewed)")
    parser.add_argument("--delay", type=float, default=0.1, help="seconds added per call")
    parser.add_argument("--waves", default="1,4,16", help="wave sizes B")
    parser.add_argument("--workers", type=int, default=2, help="episode worker actors")
    args = parser.parse_args()
    waves = [int(b) for b in args.waves.split(",")]
    root = Path(tempfile.mkdtemp(prefix="brew-bench-"))
    with (
        run_stub_server("distillery.testing.agentbrew_scripts:student", args.delay) as student,
        run_stub_server("distillery.testing.agentbrew_scripts:teacher", args.delay) as teacher,
    ):
        argv = [
            f"output_dir={root / 'runs'}",
            f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
            f"benchmark.limit={args.tasks}",
            "protocol=cross_split",
            "agent.retry_backoff_s=0",
            f"cluster.num_workers={args.workers}",
            "+tracking.trace_sample=0",
            f"methods=[{','.join(f'brew_b{b}' for b in waves)}]",
            *[f"+method_catalog.brew_b{b}={{kind: agentbrew, retrieval: {{brew: "
              f"{{wave_size: {b}}}}}}}" for b in waves],  # fmt: skip
            "student=external", "student.name=student", f"student.base_url={student}",
            "student.model=scripted", "student.action_format=prompt",
            "teacher=external", "teacher.name=teacher", f"teacher.base_url={teacher}",
            "teacher.model=scripted-teacher",
        ]  # fmt: skip
        configs = [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), False)]
        started = time.perf_counter()
        result = run_sweep(configs, progress=False)
        total = time.perf_counter() - started
    sweep = Path(result.sweep_dir)
    stages = pd.read_parquet(sweep / "stages.parquet")
    figures = pd.read_parquet(sweep / "stage_figures.parquet")
    rows = []
    for stage, frame in figures.groupby("stage_hash", sort=False):
        described = root / "runs" / "stages" / "brew" / str(stage)[:16] / "stage.json"
        b = json.loads(described.read_text())["identity"]["brew"]["wave_size"]
        wall = float(stages.loc[stages["stage_hash"] == stage, "wall_s"].sum())
        rows.append({"B": b, "wall_s": wall, **dict(zip(frame["metric"], frame["value"],
                                                          strict=True))})  # fmt: skip
    by_wall = pd.DataFrame(rows).sort_values("B").reset_index(drop=True)
    base = float(by_wall["wall_s"].iloc[0])
    tasks = int(by_wall["brew.tasks"].iloc[0])
    print(f"{tasks} brew tasks, {args.delay:g} s per model call, load {os.getloadavg()[0]:.1f}, "
          f"sweep {total:.0f} s (Ray start, evaluations and MLflow included)")  # fmt: skip
    head = ["B", "brew s", "speed-up", "tasks/s", *FIGURES.values()]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for _, row in by_wall.iterrows():
        cells = [str(int(row["B"])), f"{row['wall_s']:.1f}", f"{base / row['wall_s']:.2f}x",
                 f"{tasks / row['wall_s']:.2f}", *(str(int(row[m])) for m in FIGURES)]  # fmt: skip
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
