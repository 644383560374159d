"""How long the tracking store takes to write one episode's trace: the figure behind
`cost.trace_write_s` (what `--plan` counts per trace written), with the sweep's trace
writer settings beside MLflow's defaults.

`python bench/trace_write.py --episodes DIR [DIR ...] [--uri URI] [--repeats N]` writes
the episodes of each DIR (a stage's episode files, e.g. a rehearsal's
`runs/stages/evaluate/KEY/episodes`) as the traces of one point, the way a sweep does:
handed to the trace writer's child process (`tracking.trace_export.TraceExporter`), into
a fresh SQLite store (or `--uri`, a tracking server). Each repeat writes the point twice,
once with the writer's MLflow settings (`trace_export.writer_settings`) and once with
MLflow's defaults, in alternating order; it prints the seconds per trace of each, their
ratio, the spans per trace, and the machine's load. With several DIRs, their episodes
are one point (task ids made distinct), as a point of a full-size sweep.
"""

from __future__ import annotations

import argparse
import dataclasses
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
    parser.add_argument("--episodes", nargs="+", required=True, help="folders of episode files")
    parser.add_argument("--uri", help="tracking URI (default: a fresh SQLite store)")
    parser.add_argument("--repeats", type=int, default=3, help="points written per setting")
    args = parser.parse_args()

    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.tracking.trace_export import TraceExporter, writer_settings
    from distillery.orchestrator.tracking.traces import episode_trace
    from distillery.workers.trajectories import read_episodes

    records = []
    for index, folder in enumerate(args.episodes):
        found = read_episodes(folder)
        if len(args.episodes) > 1:  # one point of many tasks: each (folder, task) its own
            found = [dataclasses.replace(r, task_id=f"{r.task_id}@{index}") for r in found]
        records.extend(found)
    if not records:
        raise SystemExit(f"no episode files in {' '.join(args.episodes)}")
    uri = args.uri or f"sqlite:///{tempfile.mkdtemp(prefix='trace-write-')}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment(f"trace-write-{time.time_ns()}")
    settings = {"writer": writer_settings(), "MLflow defaults": {}}
    writers = {name: TraceExporter(uri, experiment, settings=s) for name, s in settings.items()}
    for writer in writers.values():  # warm-up: the child started, MLflow imported
        writer.log(client.create_run(experiment).info.run_id, records[:2])
        writer.drain()
        writer.written, writer.writing_s = 0, 0.0
    per_trace: dict[str, list[float]] = {name: [] for name in writers}
    for repeat in range(args.repeats):
        order = list(writers) if repeat % 2 == 0 else list(reversed(writers))
        for name in order:
            writer = writers[name]
            before_n, before_s = writer.written, writer.writing_s
            writer.log(client.create_run(experiment).info.run_id, records)
            writer.drain()
            written = writer.written - before_n
            per_trace[name].append((writer.writing_s - before_s) / max(1, written))
    for writer in writers.values():
        writer.close()
    spans = statistics.mean(len(episode_trace(r).children) + 1 for r in records)
    medians = {name: statistics.median(values) for name, values in per_trace.items()}
    print(
        f"{len(records)} episodes a point ({spans:.1f} spans each) to {uri.split(':', 1)[0]}, "
        f"median of {args.repeats}; load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    for name, values in per_trace.items():
        print(
            f"  {name}: {medians[name]:.3f} s per trace "
            f"({', '.join(f'{s:.3f}' for s in values)}) {settings[name] or ''}"
        )
    print(
        f"  writer / MLflow defaults = {medians['writer'] / medians['MLflow defaults']:.2f} "
        f"(cost.trace_write_s={medians['writer']:.3g} for --plan)"
    )


if __name__ == "__main__":
    main()
