"""What the rehearsal measures once its sweep has run: episodes and model calls, the
measured throughputs and the schedules they bound (`--plan`'s forecast functions over
the ledger's measured work), GPU time held and serving, Parquet written, the MLflow
store and how long its UI takes to list the sweep's runs, and how long the report takes.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distillery.orchestrator.core.config import DistilleryConfig


def wall_forecast_line(plan_output: str) -> str | None:
    for line in plan_output.splitlines():
        if line.startswith("wall-clock forecast:"):
            return line
    return None


@dataclass
class Work:
    """The sweep's work as its ledger measured it, and the schedules it bounds."""

    episodes: int = 0
    calls: float = 0.0
    tokens: dict[str, float] = field(default_factory=dict)  # model name -> tokens in + out
    throughput: dict[str, float] = field(default_factory=dict)  # model -> tokens/s/replica
    wall_graph_s: float = 0.0  # the driver's schedule simulated with these throughputs
    bound_s: float = 0.0  # the longest chain, or a model's work once released
    load_bound_s: float = 0.0  # the longest chain, or a model's whole load
    one_at_a_time_s: float = 0.0


@contextlib.contextmanager
def _measured_units_as(measured: dict[Any, Any]) -> Iterator[None]:
    """plan_clock reads the per-episode work from the ledger it is given; the forecast of
    a finished sweep as if nothing had run reads an empty ledger, with the finished
    ledger's measured means put in its place."""
    from distillery.orchestrator.planning import plan_clock

    original = plan_clock.measured_units
    plan_clock.measured_units = lambda *_: measured  # type: ignore[assignment]
    try:
        yield
    finally:
        plan_clock.measured_units = original


def measured_work(
    configs: list[DistilleryConfig],
    serving_s: dict[str, float],
    empty_root: Path,
    trace_s: float = 0.0,
) -> Work:
    """Episodes, calls and tokens per model from the finished ledger; each model's
    throughput (its tokens over its serving seconds and replicas: `serving_s`, model name
    -> seconds with a request in flight); and with those, `--plan`'s forecast of the
    whole sweep (graph schedule, bound, one stage at a time) over each stage's own
    measured time (`stage_seconds`), the traces written at `trace_s` each (the trace
    writer's measured time per trace: `trace_writer_line`)."""
    from distillery.orchestrator.planning.plan import plan_sweep
    from distillery.orchestrator.planning.plan_clock import forecast_wall
    from distillery.orchestrator.planning.plan_listing import stage_status
    from distillery.orchestrator.planning.plan_totals import measured_units, stage_work
    from distillery.orchestrator.state.ledger import Ledger

    graph = plan_sweep(configs)
    ledger = Ledger(graph.configs[0].output_dir)
    measured = measured_units(graph, stage_status(graph, ledger), ledger)
    fresh = [c.model_copy(update={"output_dir": str(empty_root)}) for c in configs]
    empty_graph = plan_sweep(fresh)
    empty = Ledger(str(empty_root))
    statuses = stage_status(empty_graph, empty)
    work = Work()
    for st in statuses:
        stage = st.stage
        if stage.model is None or stage.model.backend == "oracle":
            continue
        w = stage_work(stage, empty_graph, empty, measured)
        if stage.plays_episodes:
            work.episodes += w.units
        work.calls += w.calls
        name = stage.model.name
        work.tokens[name] = work.tokens.get(name, 0.0) + w.tokens
    models = {s.model.name: s.model for s in empty_graph.stages.values() if s.model is not None}
    for name, tokens in work.tokens.items():
        model = models[name]
        replicas = model.replicas if model.launched else 1
        if serving_s.get(name):
            work.throughput[name] = tokens / (serving_s[name] * replicas)
    with _measured_units_as(measured):
        forecast = forecast_wall(
            empty_graph,
            statuses,
            empty,
            work.throughput,
            stage_seconds(empty_graph, ledger),
            trace_s=trace_s,
        )
    work.wall_graph_s = forecast.wall_s
    work.bound_s = forecast.bound_s
    work.load_bound_s = forecast.load_bound_s
    work.one_at_a_time_s = forecast.one_at_a_time_s
    return work


def stage_seconds(graph: Any, ledger: Any) -> dict[Any, float]:
    """Each finished stage's own time: a GPU model's stage, its share of its model's
    serving time (the ledger's GPU-seconds of the stage over the model's GPUs: a second
    with n of the stage's calls among m in flight counts n/m); a stage of a model that
    holds no GPU (the API teacher, its builders), its measured wall-clock: its calls'
    latency at its concurrency, which no throughput while serving tells. (Tokens over
    a throughput would not do: a zero-shot stage's short prompts took 31 s of tokens
    for 220 s of serving.)"""
    from distillery.workers.llm.config import gpus_of

    out: dict[Any, float] = {}
    for key, stage in graph.stages.items():
        model = stage.model
        if model is None or model.backend == "oracle":
            continue
        runs = ledger.runs(key)
        if not runs:
            continue
        gpus = gpus_of(model)
        if model.launched and gpus:
            out[key] = runs[-1].gpu_s_by_model.get(model.name, 0.0) / gpus
        else:
            out[key] = runs[-1].wall_s
    return out


def gpu_time(root: Path) -> dict[str, dict[str, float]]:
    """Per model, over every gpu_time/*.json of the sweep: GPUs, held and serving s."""
    out: dict[str, dict[str, float]] = {}
    for path in root.rglob("gpu_time/*.json"):
        for m in json.loads(path.read_text())["models"]:
            row = out.setdefault(m["model"], {"gpus": 0.0, "held_s": 0.0, "serving_s": 0.0})
            row["gpus"] = max(row["gpus"], float(m["gpus"]))
            row["held_s"] += float(m["held_s"])
            row["serving_s"] += float(m["serving_s"])
    return out


def parquet_written(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*.parquet") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def tree_bytes(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def done_episodes(root: Path) -> int:
    """Episodes the ledger has recorded so far (their done files), cheaply."""
    stages = root / "stages"
    n = 0
    if not stages.is_dir():
        return 0
    for kind in os.scandir(stages):
        if not kind.is_dir():
            continue
        for stage in os.scandir(kind.path):
            done = os.path.join(stage.path, "done")
            if os.path.isdir(done):
                n += sum(1 for _ in os.scandir(done))
    return n


def mlflow_listing(db: Path, artifacts: Path, log: Path) -> dict[str, Any]:
    """`mlflow server` over the sweep's store; the time of the UI's requests that list
    the sweep's runs: the experiment's runs page (its first search, 100 runs, newest
    first) and every child of the sweep's parent run (all pages, as expanding it)."""
    from distillery.testing.mlflow_ui import mlflow_server, rest

    out: dict[str, Any] = {}
    with mlflow_server(db, artifacts, log) as url:
        experiments = rest(url, "POST", "2.0/mlflow/experiments/search", {"max_results": 100})
        ids = [e["experiment_id"] for e in experiments.get("experiments", [])]
        started = time.perf_counter()
        first = rest(
            url,
            "POST",
            "2.0/mlflow/runs/search",
            {"experiment_ids": ids, "max_results": 100, "order_by": ["attributes.start_time DESC"]},
        )
        out["first_page_s"] = time.perf_counter() - started
        runs = first.get("runs", [])
        parents = [r for r in runs if "mlflow.parentRunId" not in _tags(r)]
        if not parents:
            return out
        parent = parents[0]["info"]["run_id"]
        started = time.perf_counter()
        children, token = 0, None
        while True:
            body: dict[str, Any] = {
                "experiment_ids": ids,
                "filter": f"tags.`mlflow.parentRunId` = '{parent}'",
                "max_results": 1000,
            }
            if token:
                body["page_token"] = token
            page = rest(url, "POST", "2.0/mlflow/runs/search", body)
            children += len(page.get("runs", []))
            token = page.get("next_page_token")
            if not token:
                break
        out["children_s"] = time.perf_counter() - started
        out["children"] = children
    return out


def _tags(run: dict[str, Any]) -> dict[str, str]:
    return {t["key"]: t["value"] for t in run.get("data", {}).get("tags", [])}


def time_report(output_root: Path, env: dict[str, str], log: Path, timeout_s: float) -> float:
    """Wall seconds of `distillery report` on the sweep (its most recent, in the root)."""
    started = time.perf_counter()
    with log.open("wb") as sink:
        subprocess.run(
            [sys.executable, "-m", "distillery.orchestrator.cli.app", "report", str(output_root)],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
            timeout=timeout_s,
            check=True,
        )
    return time.perf_counter() - started


def trace_writer_line(log: Path) -> tuple[str, float]:
    """The driver's line on its trace writer (`traces: N episodes written in X s ...,
    Y s each`) and Y (0.0 when it wrote none)."""
    text = log.read_text(errors="replace") if log.exists() else ""
    found = re.search(r"^traces: .* ([0-9.]+) s each.*$", text, re.MULTILINE)
    return (found.group(0), float(found.group(1))) if found else ("traces: none written", 0.0)
