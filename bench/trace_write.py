"""How long the tracking store takes to write one episode's trace: the figure behind
`cost.trace_write_s` (what `--plan` counts per trace written).

`python bench/trace_write.py --episodes DIR [--uri URI] [--repeats N]` writes the
episodes of DIR (a stage's episode files, e.g. a rehearsal's
`runs/stages/evaluate/KEY/episodes`) as traces of one run, the way the sweep's trace
writer does (`tracking.trace_log.TraceLog.log`, one point at a time), into a fresh
SQLite store (or `--uri`, a tracking server), and prints the seconds per trace, its
spans, and the machine's load.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", required=True, help="a folder of episode files")
    parser.add_argument("--uri", help="tracking URI (default: a fresh SQLite store)")
    parser.add_argument("--repeats", type=int, default=3, help="runs written, each whole")
    args = parser.parse_args()

    import mlflow
    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.tracking import TraceLog
    from distillery.orchestrator.tracking.traces import episode_trace
    from distillery.workers.trajectories import read_episodes

    records = read_episodes(args.episodes)
    if not records:
        raise SystemExit(f"no episode files in {args.episodes}")
    uri = args.uri or f"sqlite:///{tempfile.mkdtemp(prefix='trace-write-')}/mlflow.db"
    mlflow.set_tracking_uri(uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment(f"trace-write-{time.time_ns()}")
    trace_log = TraceLog(client, uri, experiment)
    trace_log.log(client.create_run(experiment).info.run_id, records[:2])  # warm-up
    spans = statistics.mean(len(episode_trace(r).children) + 1 for r in records)
    per_trace = []
    for _ in range(args.repeats):
        run_id = client.create_run(experiment).info.run_id
        started = time.perf_counter()
        written = trace_log.log(run_id, records)
        per_trace.append((time.perf_counter() - started) / max(1, len(written)))
    print(
        f"{len(records)} episodes ({spans:.1f} spans each) to {uri.split(':', 1)[0]}: "
        f"{statistics.median(per_trace):.3f} s per trace (median of {args.repeats}; "
        f"{', '.join(f'{s:.3f}' for s in per_trace)}); load {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores"
    )


if __name__ == "__main__":
    main()
