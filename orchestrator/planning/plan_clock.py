"""`--plan`'s wall-clock forecast: how long the stages still to run take as a graph,
beside the critical-path bound and the one-stage-at-a-time schedule, and the GPU-hours
each model's servers are held in that schedule.

A stage's time is its tokens (`plan_totals.stage_work`: measured in this ledger, else
assumed) over its model's throughput: `cost.throughput_tokens_per_s` (tokens one replica
processes per second) times the model's replicas; and, where the model has a latency
(`cost.latency_s`, seconds a call takes), at least its tasks' calls one after another
for as many waves as its tasks fill at the width it plays them (an ordered stage's wave,
else its model's request slots): ACE over 1,000 tasks one at a time is 1,000 tasks of
calls in sequence whatever the throughput. A stage that writes a bank as it plays
counts `plan_totals.BUILD_CALLS_PER_TASK` more calls per task (its notes), assumed. A model's servers serve its stages
one after another at that rate (stages of one model share its servers: running two at
once takes as long as one after the other); stages of different models overlap as the
graph allows. The schedule is simulated as the driver runs it (`execution.schedule`: a
ready stage starts as soon as its model is free, the longest chain first). What plays
without a model (the oracle, a deterministic build) or a model without a throughput is
counted as instant, and the forecast says which.

The bound no schedule beats: the longest chain of stages, and, for each model, the work
of its stages that cannot start before their inputs are ready (a stage's release: the
longest chain above it). A model whose stages wait for a build serves at most the work
released since: for each release time r, r + the work of its stages released at r or
later + the shortest chain below them (the single-server bound with release dates,
which the preemptive schedule meets). Without releases it is the model's whole load.

Every evaluation point's traces are written by one writer beside the driver
(`tracking.trace_export`), each in `cost.trace_write_s`, from the moment its stage
ends: the sweep ends when the last is written. The writer is a server of its own in the
schedule and in the bound (its work released when each point's stage can end).

Its assumptions are the throughput's: the episode slots are taken to feed every server
(size `cluster.num_workers` x `cluster.episodes_per_worker` to the models' request slots),
and a replica's throughput at the sweep's concurrency is the figure given.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from distillery.orchestrator.planning.plan import StageGraph, server_key
from distillery.orchestrator.planning.plan_listing import PlannedStatus
from distillery.orchestrator.planning.plan_totals import (
    BUILD_CALLS_PER_TASK,
    StageWork,
    measured_units,
    stage_work,
)
from distillery.orchestrator.stages.stage import StageKey
from distillery.orchestrator.state.ledger import Ledger
from distillery.workers.llm.config import ModelConfig, gpus_of


@dataclass
class WallForecast:
    """The forecast of a sweep's stages still to run."""

    wall_s: float  # as a graph
    bound_s: float  # no schedule is shorter: the longest chain, or a model's released work
    one_at_a_time_s: float  # every stage after the other
    held_gpu_h: dict[str, float] = field(default_factory=dict)  # model -> GPU-hours up
    instant: list[str] = field(default_factory=list)  # models without a throughput
    # The bound without release times (the longest chain, or a model's whole load).
    load_bound_s: float = 0.0
    traces: int = 0  # episodes written as traces, one after another
    trace_write_s: float = 0.0  # their writing, in all


def forecast_wall(
    graph: StageGraph,
    statuses: Sequence[PlannedStatus],
    ledger: Ledger,
    throughput: dict[str, float],
    durations: Mapping[StageKey, float] | None = None,
    latency: Mapping[str, float] | None = None,
    trace_s: float = 0.0,
) -> WallForecast:
    """The forecast of `statuses`' stages still to run (`durations`: stage times known
    otherwise, e.g. measured, used in place of tokens over throughput; `latency`: seconds
    a call takes, per model name; `trace_s`: seconds one trace takes to write). Stages of a model without servers of ours (an API)
    are not queued behind each other: the provider's capacity is not ours to share out,
    and each stage's own limits (its concurrency, its calls in sequence) are in its time."""
    measured = measured_units(graph, statuses, ledger)
    duration: dict[StageKey, float] = {}
    server: dict[StageKey, str | None] = {}
    models: dict[str, ModelConfig] = {}
    instant: set[str] = set()
    for st in statuses:
        stage, key = st.stage, st.stage.key
        model = stage.model
        duration[key], server[key] = 0.0, None
        if st.is_cached or model is None or model.backend == "oracle":
            continue
        tps = throughput.get(model.name)
        if durations is not None and key in durations:
            duration[key] = durations[key]
        else:
            call_s = (latency or {}).get(model.name)
            if not tps and not call_s:
                instant.add(model.name)
                continue
            replicas = model.replicas if model.launched else 1
            work = stage_work(stage, graph, ledger, measured)
            duration[key] = work.tokens / (tps * replicas) if tps else 0.0
            if call_s:
                duration[key] = max(duration[key], _in_sequence(st, graph, ledger, work, call_s))
        if model.launched:  # our servers: its stages share them
            served = server[key] = server_key(model)
            models[served] = model
    readers: dict[StageKey, list[StageKey]] = {k: [] for k in graph.stages}
    for key, stage in graph.stages.items():
        for up in stage.upstream:
            readers[up].append(key)

    @functools.cache
    def chain(key: StageKey) -> float:  # the longest path from `key` to the end
        return duration[key] + max((chain(r) for r in readers[key]), default=0.0)

    @functools.cache
    def head(key: StageKey) -> float:  # the longest chain above `key`: its release
        return max((head(u) + duration[u] for u in graph.stages[key].upstream), default=0.0)

    by_server: dict[str, list[StageKey]] = {}
    for key, s in server.items():
        if s is not None:
            by_server.setdefault(s, []).append(key)
    longest = max((chain(k) for k in graph.stages), default=0.0)
    load = {s: sum(duration[k] for k in keys) for s, keys in by_server.items()}
    released = {
        s: _released_bound(keys, head, duration, lambda k: chain(k) - duration[k])
        for s, keys in by_server.items()
    }
    traces = traced_episodes(graph, statuses)
    writes = {k: n * trace_s for k, n in traces.items() if n and trace_s > 0}
    if writes:  # the writer's work is released when a point's stage can end
        released["traces"] = _released_bound(
            list(writes), lambda k: head(k) + duration[k], writes, lambda k: 0.0
        )
    bound = max([longest, *released.values(), 0.0])

    # The driver's schedule: each stage starts when its inputs have ended and its model
    # is free; among those ready, the longest chain first.
    end: dict[StageKey, float] = {}
    free_at: dict[str, float] = {}
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    waiting = sorted(graph.stages, key=lambda k: (-chain(k), graph.depth(k), k))
    while waiting:
        ready = [k for k in waiting if all(u in end for u in graph.stages[k].upstream)]
        if not ready:  # a cycle cannot be planned; nothing to forecast
            break

        def start_of(key: StageKey) -> float:
            inputs = max((end[u] for u in graph.stages[key].upstream), default=0.0)
            s = server[key]
            return max(inputs, free_at.get(s, 0.0)) if s is not None else inputs

        key = min(ready, key=lambda k: (start_of(k), waiting.index(k)))
        start = start_of(key)
        end[key] = start + duration[key]
        s = server[key]
        if s is not None:
            free_at[s] = end[key]
            first.setdefault(s, start)
            last[s] = max(last.get(s, 0.0), end[key])
        waiting.remove(key)
    # One stage at a time, in that schedule's order (a topological one), the trace
    # writer still beside them.
    one_end: dict[StageKey, float] = {}
    clock = 0.0
    for key in sorted(end, key=lambda k: end[k]):
        clock += duration[key]
        one_end[key] = clock
    held = {}
    for s, model in models.items():
        gpus = gpus_of(model)
        if gpus:
            held[model.name] = held.get(model.name, 0.0) + gpus * (last[s] - first[s]) / 3600
    return WallForecast(
        wall_s=max([*end.values(), _writer_end(writes, end), 0.0]),
        bound_s=bound,
        one_at_a_time_s=max(sum(duration.values()), _writer_end(writes, one_end)),
        held_gpu_h=held,
        instant=sorted(instant),
        load_bound_s=max([longest, *load.values(), sum(writes.values()), 0.0]),
        traces=sum(traces.values()),
        trace_write_s=sum(writes.values()),
    )


def traced_episodes(graph: StageGraph, statuses: Sequence[PlannedStatus]) -> dict[StageKey, int]:
    """The traces each stage still to run has written when it ends: its evaluation
    points' evaluated tasks (`tracking.trace_sample` of them; 0: none)."""
    to_run = {st.stage.key for st in statuses if not st.is_cached}
    out: dict[StageKey, int] = {}
    for point in graph.points.values():
        if point.stage not in to_run:
            continue
        n = len(point.split.eval_ids)
        sample = point.cfg.tracking.trace_sample
        out[point.stage] = out.get(point.stage, 0) + (n if sample is None else min(n, sample))
    return out


def _writer_end(writes: Mapping[StageKey, float], end: Mapping[StageKey, float]) -> float:
    """When the trace writer is done: each point's traces written one after another,
    from the end of its stage (`end`)."""
    written = 0.0
    for key in sorted(writes, key=lambda k: end.get(k, 0.0)):
        written = max(written, end.get(key, 0.0)) + writes[key]
    return written


def _in_sequence(
    st: PlannedStatus, graph: StageGraph, ledger: Ledger, work: StageWork, call_s: float
) -> float:
    """The least time a stage's tasks take when each task's calls follow each other:
    its waves (tasks over the width it plays at) times a task's calls times `call_s`."""
    stage = st.stage
    if not stage.plays_episodes or work.units <= 0 or stage.model is None:
        return 0.0
    model = stage.model
    width = stage.episode_demand(ledger, graph.needs.get(stage.key, set()))
    if model.backend != "oracle":
        replicas = model.replicas if model.launched else 1
        width = min(width, replicas * model.max_concurrency_per_server)
    per_task = work.calls / work.units + (BUILD_CALLS_PER_TASK if stage.writes_bank else 0.0)
    return math.ceil(work.units / max(1, width)) * per_task * call_s


def _released_bound(
    keys: list[StageKey],
    release: Callable[[StageKey], float],
    duration: Mapping[StageKey, float],
    tail: Callable[[StageKey], float],
) -> float:
    """One server's stages with release times and tails: for each release time r, no
    schedule ends before r + the work released at r or later + the least tail among it."""
    best = 0.0
    for r in sorted({release(k) for k in keys}):
        later = [k for k in keys if release(k) >= r]
        work = sum(duration[k] for k in later)
        best = max(best, r + work + min(tail(k) for k in later))
    return best


def format_forecast(forecast: WallForecast) -> str:
    lines = [
        f"wall-clock forecast: {_time(forecast.wall_s)} as a graph (bound "
        f"{_time(forecast.bound_s)}; one stage at a time {_time(forecast.one_at_a_time_s)}), "
        "from cost.throughput_tokens_per_s and cost.latency_s"
    ]
    if forecast.trace_write_s:
        lines.append(
            f"  traces: {forecast.traces:,} episodes written one after another, "
            f"{_time(forecast.trace_write_s)} in all (cost.trace_write_s; "
            "tracking.trace_sample=N writes N per point)"
        )
    if forecast.held_gpu_h:
        held = ", ".join(f"{m} {h:,.2f}" for m, h in sorted(forecast.held_gpu_h.items()))
        lines.append(f"  GPU-hours held in that schedule (servers up, first to last stage): {held}")
    if forecast.instant:
        lines.append(
            f"  no throughput for {', '.join(forecast.instant)}: its stages are counted as "
            "instant (set '+cost.throughput_tokens_per_s={NAME: TOKENS_PER_S}' or "
            "'+cost.latency_s={NAME: SECONDS}')"
        )
    return "\n".join(lines)


def _time(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.0f} s"
