"""The driver: sweep points -> a stage graph -> Ray workers and model servers ->
a ledger of Parquet episodes and banks under the output root -> MLflow.

Re-running the same command resumes: every finished stage and every finished episode
recorded in the ledger is reused, and only what is missing runs.

The work itself is in sweep.py (stages), server_pool.py (model servers),
memory_stage.py (banks) and results.py (records, tables, MLflow, provenance).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from distillery.orchestrator.core.config import ClusterConfig, DistilleryConfig
from distillery.orchestrator.core.stats import NO_SCORED_EPISODES
from distillery.orchestrator.execution.heartbeat import Heartbeat
from distillery.orchestrator.execution.observers import QueuedObserver, notify
from distillery.orchestrator.execution.sweep import Sweep
from distillery.orchestrator.planning.plan import StageGraph, plan_sweep
from distillery.orchestrator.planning.plan_listing import format_plan, stage_status
from distillery.orchestrator.planning.preflight import check_run
from distillery.orchestrator.state.ledger import Ledger, read_sweep_record
from distillery.orchestrator.state.locks import run_locks
from distillery.orchestrator.tracking.live_runs import LiveRuns
from distillery.orchestrator.tracking.results import (
    MethodResult,
    RunResult,
    SweepResult,
    config_params,
    git_sha,
    local_or_uri,
    log_gpu_time,
    log_infra_counts,
    log_points,
    package_versions,
    shared_params,
    sweep_parent,
    write_sweep_tables,
)
from distillery.orchestrator.tracking.stage_runs import (
    log_stage_runs,
    stage_reports,
    write_stage_figures,
)
from distillery.orchestrator.tracking.tracker import Tracker, safe_params, ui_hint
from distillery.redaction import install as install_redaction
from distillery.redaction import redact, register_secrets, secrets_in


def run_experiment(cfg: DistilleryConfig, progress: bool = True) -> RunResult:
    """One composed config: a sweep of one point."""
    return run_sweep([cfg], progress).points[0]


def plan(configs: list[DistilleryConfig]) -> str:
    """The stage graph and what is cached, without running anything."""
    graph = plan_sweep(configs)
    return format_plan(graph, stage_status(graph, Ledger(graph.configs[0].output_dir)))


def run_sweep(configs: list[DistilleryConfig], progress: bool = True) -> SweepResult:
    """Plan, check what the run will touch, take the output root, then run. Every user
    error (a bad path, an unset key variable, a busy output root) is raised before Ray
    starts or an MLflow run is created."""
    graph = plan_sweep(configs)
    for c in graph.configs:
        register_secrets(secrets_in(c))
    install_redaction(streams=False)  # this process's logs (the CLI adds its streams)
    check_run(graph)
    cfg = graph.configs[0]
    store = cfg.memory.store
    with run_locks(cfg.output_dir, store.path, store.url, cfg.tracking_uri):
        return _run_locked(graph, progress)


def _run_locked(graph: StageGraph, progress: bool) -> SweepResult:
    sweep = Sweep(graph, progress)
    cfg = sweep.cfg
    if progress:
        print(format_plan(graph, stage_status(graph, sweep.ledger)))
    sweep_json = sweep.sweep_dir / "sweep.json"
    previous = read_sweep_record(sweep_json)
    # A point's traces are written by a child process: the driver's stages go on.
    tracker = Tracker(cfg.tracking_uri, cfg.tracking.experiment, trace_process=True)
    # The sweep's settings, with the catalog cut to the methods it evaluates.
    shared = shared_params([safe_params(config_params(c, None, c.methods)) for c in graph.configs])
    tags = {
        "distillery.sweep_id": sweep.sweep_id,
        "git_sha": git_sha(),
        **package_versions(c.benchmark.name for c in graph.configs),
        "n_points": str(len(graph.points)),
    }
    with (
        tracker.exporting_traces(),  # entered first, left last: after every point's logging
        tracker.parent(
            sweep.sweep_id,
            shared,
            tags,
            run_id=previous.get("parent_run_id") or sweep_parent(tracker, sweep.sweep_id),
        ) as pid,
        ray_session(cfg.cluster),
        contextlib.closing(sweep.memory),
        contextlib.closing(sweep.servers),
    ):
        if cfg.cluster.joins:  # the keys the driver has, on every node too, before a stage
            from distillery.orchestrator.planning.preflight import (
                check_node_variables,
                variables_read_on_nodes,
            )

            check_node_variables(variables_read_on_nodes(graph))
        sweep_json.write_json(
            {
                "sweep_id": sweep.sweep_id,
                "tracking_uri": cfg.tracking_uri,
                "parent_run_id": pid,
                "mlflow_experiment_id": tracker.experiment_id,
                "experiment": cfg.experiment.name,
                "created_at": previous.get("created_at", time.time()),
                "updated_at": time.time(),
                "prices": cfg.cost.prices_dict(),
                "report": cfg.report.model_dump(mode="json"),
                "git_sha": tags["git_sha"],
                "points": [point_ids for point_ids in graph.point_ids_of],
            }
        )
        live = LiveRuns(sweep, tracker, pid, tags)
        # Told from its own thread: logging a point when its stage ends takes seconds to
        # minutes, during which every running stage goes on dispatching episodes.
        live_queue = QueuedObserver(live, "live MLflow runs")
        sweep.observers.append(live_queue)
        if progress:
            sweep.observers.append(Heartbeat(sweep))
        try:
            sweep.run_stages()
        except BaseException as exc:
            # What ended before the stop is logged, then the runs left open are closed.
            live.stop(live_queue, interrupted=isinstance(exc, KeyboardInterrupt))
            raise
        finally:
            notify(sweep.observers, "close")
            log_infra_counts(sweep, tracker, pid)
            log_gpu_time(sweep, tracker, pid)
        logged = log_points(sweep, tracker, pid, tags, live.logged)
        # Stages that report of themselves (a brew's statistics): a run each.
        reports = stage_reports(sweep)
        stage_runs = log_stage_runs(sweep, tracker, pid, tags, reports)
    written = tracker.trace_summary()
    if progress and written:
        print(written, flush=True)
    write_sweep_tables(sweep, logged)
    write_stage_figures(sweep, reports, stage_runs)
    results = []
    for cfg_i, ids in zip(graph.configs, graph.point_ids_of, strict=True):
        methods = [logged[i] for i in ids]
        split = graph.points[ids[0]].split
        results.append(
            RunResult(
                sweep.sweep_id,
                local_or_uri(sweep.sweep_dir),
                split,
                methods,
                pid,
                cfg_i.tracking_uri,
            )
        )
    return SweepResult(
        sweep.sweep_id,
        local_or_uri(sweep.sweep_dir),
        results,
        sweep.stages_run,
        sweep.stages_cached,
        pid,
        cfg.tracking_uri,
    )


@contextmanager
def ray_session(cluster: ClusterConfig) -> Iterator[None]:
    import ray

    if ray.is_initialized():
        yield
        return
    # Workers inherit the driver's interpreter and installed package; keep uv from
    # rewriting their environment.
    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    address = cluster.address()
    if cluster.joins:
        if not address:  # checked before the run started (preflight.check_cluster)
            raise ValueError("cluster.ray_address: no Ray cluster address to join")
        print(f"joining the Ray cluster at {redact(address)} ...", flush=True)
        try:
            ray.init(address=address, log_to_driver=True)
        except ConnectionError as exc:
            raise ConnectionError(
                f"cannot join the Ray cluster at {redact(address)} ({exc}). With token "
                "authentication (the default from Ray 2.59), export RAY_AUTH_MODE=token "
                "and the cluster's token as RAY_AUTH_TOKEN (or RAY_AUTH_TOKEN_PATH; "
                "`ray get-auth-token` on the head prints it)"
            ) from exc
        print(f"joined the Ray cluster at {redact(address)}: {cluster_resources()}", flush=True)
    else:
        # A private cluster on loopback: Ray may otherwise bind the machine's external
        # address.
        ray.init(
            num_cpus=cluster.num_cpus,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            log_to_driver=True,
        )
    try:
        yield
    finally:
        ray.shutdown()


def cluster_resources() -> str:
    """The joined cluster in one line: its live nodes, CPUs and GPUs (and Ray's version)."""
    import ray

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    total = ray.cluster_resources()
    gpus = total.get("GPU", 0)
    return (
        f"{len(nodes)} node(s), {total.get('CPU', 0):g} CPUs, {gpus:g} GPUs (Ray {ray.__version__})"
    )


def unscored_points(result: SweepResult) -> list[tuple[MethodResult, int]]:
    """Every point with unscored (infrastructure-failed) episodes, and how many."""
    seen: set[str] = set()
    out = []
    for point in result.points:
        for m in point.methods:
            n = sum(1 for s in m.summaries if s.success is None)
            if n and m.point_id not in seen:
                seen.add(m.point_id)
                out.append((m, n))
    return out


def resume_command() -> str:
    """The command line that was run (redacted), to run again."""
    import shlex
    import sys
    from pathlib import Path

    # `distillery ...`, or `python -m distillery.orchestrator.cli[.app]` (argv[0] is then
    # the cli package's __main__.py or app.py).
    entry = Path(sys.argv[0]) if sys.argv else None
    if entry is None or not (entry.name == "distillery" or entry.parent.name == "cli"):
        return "the same distillery command (same arguments, same output_dir)"
    return redact(" ".join(["distillery", *(shlex.quote(a) for a in sys.argv[1:])]))


def print_summary(result: SweepResult) -> None:
    print()
    print(
        f"sweep {result.sweep_id}: {len(result.points)} point(s); stages run "
        f"{result.stages_run}, reused {result.stages_cached} -> {result.sweep_dir}"
    )
    shown: set[str] = set()  # a point shared by sweep points (zero-shot) is shown once
    for point in result.points:
        split = point.split
        fresh = [m for m in point.methods if m.point_id not in shown]
        shown.update(m.point_id for m in fresh)
        if not fresh:
            continue
        print(f"  {len(split.eval_ids)} evaluated tasks ({len(split.memory_ids)} memory tasks)")
        for m in fresh:
            x = m.metrics
            if x["n_scored"] > 0:
                rate = (
                    f"success {x['success_rate']:6.1%} [95% CI "
                    f"{x['success_rate_ci_low']:.1%}-{x['success_rate_ci_high']:.1%}] "
                    f"n={int(x['n_scored'])} steps={x['mean_steps']:.1f}"
                )
            else:  # no scored episode: no rate, rather than a 0 % that reads as one
                rate = f"success   {NO_SCORED_EPISODES} (0 of {int(x['n_tasks'])})"
            print(
                f"    {m.name:16s} {m.model.name:16s} "
                f"{m.descriptor + ' ' if m.descriptor else ''}{rate} "
                f"tokens={int(x['tokens_in'])}/{int(x['tokens_out'])} "
                f"infra_errors={int(x['infra_errors'])}"
            )
    print()
    print("Episodes (Parquet, one file per task) are under each stage folder:")
    for path in sorted({str(m.episodes_dir) for p in result.points for m in p.methods}):
        print(f"  {path}")
    print()
    unscored = unscored_points(result)
    if unscored:
        total = sum(n for _, n in unscored)
        print(
            f"INCOMPLETE: {total} episode(s) of {len(unscored)} point(s) are unscored "
            "(infrastructure errors or timeouts left after their retries):"
        )
        for m, n in unscored:
            print(f"  {m.name} {m.model.name}: {n} of {int(m.metrics['n_tasks'])} ({m.stage})")
        print("Their success rates leave them out. Fix the cause (see each episode's")
        print("error_message), then re-run the same command to retry only them:")
        print(f"  {resume_command()}")
    else:
        print("Re-run the same command to finish an interrupted sweep (finished work is reused).")
    print(f"Report: distillery report {result.sweep_dir}")
    print("Open the runs in MLflow:")
    print(f"  {ui_hint(result.tracking_uri)}")
