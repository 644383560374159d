"""`--plan`'s totals: what the stages still to run will cost, per model: episodes, LLM
calls, tokens, USD from `cost.prices` where the model has a price, GPU-hours where a
throughput is configured (`cost.throughput_tokens_per_s`).

These are estimates, and each line says what it rests on:

* measured: the mean per episode (per memory task for a bank) of the episodes (banks)
  of the same model that this sweep's ledger already holds;
* assumed, where nothing of that model has run yet: `CALLS_PER_TURN` calls per user
  turn, each sending the task's tools and messages again (`CHARS_PER_TOKEN` characters a
  token, the history growing it by `HISTORY_GROWTH`) and answering
  `COMPLETION_TOKENS` tokens (`REASONING_COMPLETION_TOKENS` for a reasoning model,
  whose cap is `max_completion_tokens`); a bank costs `BUILD_CALLS_PER_TASK` calls of
  `BUILD_PROMPT_TOKENS` in and `BUILD_COMPLETION_TOKENS` out per memory task. These
  figures are ours (no paper gives them); once a few episodes ran, re-planning uses
  what they measured instead.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from distillery.orchestrator.planning.plan import StageGraph, server_key
from distillery.orchestrator.planning.plan_listing import PlannedStatus
from distillery.orchestrator.stages.stage import Stage
from distillery.orchestrator.state.ledger import Ledger
from distillery.workers.envs.base import Task
from distillery.workers.llm.config import ModelConfig
from distillery.workers.trajectories import EpisodeSummary

CALLS_PER_TURN = 2.0  # ours: one call that acts, one closing reply
CHARS_PER_TOKEN = 4.0  # ours: a common rule of thumb for English text and JSON
HISTORY_GROWTH = 1.5  # ours: later calls re-send the earlier steps too
COMPLETION_TOKENS = 150.0  # ours: a call or two, or a short answer
# ours: a reasoning model (its cap is max_completion_tokens, as OpenAI's reasoning models
# take it) spends hundreds to thousands of reasoning tokens per call at medium effort.
REASONING_COMPLETION_TOKENS = 1000.0
BUILD_CALLS_PER_TASK = 2.0  # ours: e.g. AMD's workflow insight and subtask segmentation
BUILD_PROMPT_TOKENS = 3000.0  # ours: a trajectory and the builder's instructions
BUILD_COMPLETION_TOKENS = 300.0  # ours: an insight or a segmentation


@dataclass
class ModelTotals:
    name: str
    roles: set[str] = field(default_factory=set)
    episodes: int = 0
    memory_tasks: int = 0
    calls: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    basis: set[str] = field(default_factory=set)
    model: ModelConfig | None = None

    def usd(self, prices: dict) -> float | None:
        price = prices.get(self.name)
        if price is None:
            return None
        return (
            self.tokens_in * price.input_per_mtok + self.tokens_out * price.output_per_mtok
        ) / 1e6

    def gpu_hours(self, throughput: dict[str, float]) -> float | None:
        tps = throughput.get(self.name)
        if not tps or self.model is None:
            return None
        gpus = max(self.model.gpus_per_server, 1) if self.model.backend == "vllm" else 1
        return (self.tokens_in + self.tokens_out) / tps / 3600 * gpus


@dataclass(frozen=True)
class PerUnit:
    """Per episode (or per memory task): calls and tokens, and what it rests on."""

    calls: float
    tokens_in: float
    tokens_out: float
    basis: str


def plan_totals(
    graph: StageGraph, statuses: Sequence[PlannedStatus], ledger: Ledger
) -> list[ModelTotals]:
    """One entry per model with work still to do (models that make no LLM call, the
    oracle and deterministic banks, are left out)."""
    measured = measured_units(graph, statuses, ledger)
    out: dict[str, ModelTotals] = {}
    for st in statuses:
        model = st.stage.model
        if model is None or st.is_cached:
            continue
        totals = out.setdefault(model.name, ModelTotals(model.name, model=model))
        work = stage_work(st.stage, graph, ledger, measured)
        if st.stage.plays_episodes:
            totals.roles.add(st.stage.role or "agent")
            totals.episodes += work.units
        else:
            totals.roles.add("memory builder")
            totals.memory_tasks += work.units
        totals.calls += work.calls
        totals.tokens_in += work.tokens_in
        totals.tokens_out += work.tokens_out
        totals.basis.update(work.basis)
    return list(out.values())


@dataclass
class StageWork:
    """What a stage still to run will ask of its model: episodes (or memory tasks),
    calls and tokens, and what the figures rest on."""

    units: int = 0
    calls: float = 0.0
    tokens_in: float = 0.0
    tokens_out: float = 0.0
    basis: set[str] = field(default_factory=set)

    @property
    def tokens(self) -> float:
        return self.tokens_in + self.tokens_out


def stage_work(
    stage: Stage, graph: StageGraph, ledger: Ledger, measured: dict[tuple[str, str], PerUnit]
) -> StageWork:
    """The work left of one stage of a model (`measured`: `measured_units`)."""
    work = StageWork()
    model = stage.model
    if model is None:
        return work
    key = server_key(model)
    if stage.plays_episodes:
        done = set(ledger.episodes(stage.key, verify=False))
        todo = [t for t in graph.needs.get(stage.key, set()) if t not in done]
        work.units = len(todo)
        unit = measured.get(("episode", key))
        for task_id in todo:
            per = unit or _assumed_episode(graph.tasks.get(task_id), model)
            work.calls += per.calls
            work.tokens_in += per.tokens_in
            work.tokens_out += per.tokens_out
            work.basis.add(per.basis)
        return work
    n = _memory_tasks(stage)
    work.units = n
    per = measured.get(("bank", key)) or PerUnit(
        BUILD_CALLS_PER_TASK,
        BUILD_CALLS_PER_TASK * BUILD_PROMPT_TOKENS,
        BUILD_CALLS_PER_TASK * BUILD_COMPLETION_TOKENS,
        f"assumed: {BUILD_CALLS_PER_TASK:g} calls per memory task",
    )
    work.calls = per.calls * n
    work.tokens_in = per.tokens_in * n
    work.tokens_out = per.tokens_out * n
    work.basis.add(per.basis)
    return work


def _memory_tasks(stage: Stage) -> int:
    """The tasks a bank stage builds from (a build's or a render's source)."""
    source = getattr(stage, "source", None)
    return len(getattr(source, "task_ids", ()) or ())


def measured_units(
    graph: StageGraph, statuses: Sequence[PlannedStatus], ledger: Ledger
) -> dict[tuple[str, str], PerUnit]:
    """Means over what this sweep's ledger already holds, per model (its servers' key)."""
    episodes: dict[str, list[EpisodeSummary]] = defaultdict(list)
    banks: dict[str, list[tuple[int, dict[str, float]]]] = defaultdict(list)
    for st in statuses:
        stage = st.stage
        if stage.model is None:
            continue
        key = server_key(stage.model)
        if stage.plays_episodes:
            for summary in ledger.episodes(stage.key, verify=False).values():
                if summary.finished:
                    episodes[key].append(summary)
        elif stage.writes_bank:
            output = ledger.output(stage.key)
            n = _memory_tasks(stage)
            if output is not None and n and not output.reused:
                banks[key].append((n, dict(output.stats)))
    out: dict[tuple[str, str], PerUnit] = {}
    for key, found in episodes.items():
        n = len(found)
        out[("episode", key)] = PerUnit(
            sum(s.n_llm_calls for s in found) / n,
            sum(s.tokens_in for s in found) / n,
            sum(s.tokens_out for s in found) / n,
            f"measured: mean of {n} finished episode(s)",
        )
    for key, built in banks.items():
        tasks = sum(n for n, _ in built)
        total: dict[str, float] = defaultdict(float)
        for _, stats in built:
            for name, value in stats.items():
                for suffix in ("requests", "tokens_in", "tokens_out"):
                    if name.endswith(f".{suffix}"):
                        total[suffix] += value
        out[("bank", key)] = PerUnit(
            total["requests"] / tasks,
            total["tokens_in"] / tasks,
            total["tokens_out"] / tasks,
            f"measured: {len(built)} bank(s) built",
        )
    return out


def _assumed_episode(task: Task | None, model: ModelConfig) -> PerUnit:
    turns = max(1, len(task.turns)) if task is not None else 1
    chars = 0
    if task is not None:
        chars = len(json.dumps(list(task.tools), default=str)) + sum(len(t) for t in task.turns)
    calls = CALLS_PER_TURN * turns
    prompt = chars / CHARS_PER_TOKEN * HISTORY_GROWTH
    reasoning = model.token_limit_param == "max_completion_tokens"
    completion = REASONING_COMPLETION_TOKENS if reasoning else COMPLETION_TOKENS
    return PerUnit(
        calls,
        calls * prompt,
        calls * completion,
        f"assumed: {CALLS_PER_TURN:g} calls per user turn, prompts from the tasks' tools and "
        f"messages, {completion:g} completion tokens per call"
        + (" (a reasoning model)" if reasoning else ""),
    )


def format_totals(
    totals: list[ModelTotals], prices: dict, throughput: dict[str, float], gpu_hour: float = 0.0
) -> str:
    """The totals table, its sum and what each model's figures rest on."""
    if not totals:
        return "totals: nothing left to run calls a model (all cached, or oracle/deterministic)"
    header = (
        f"  {'model':22s} {'role':24s} {'episodes':>8s} {'LLM calls':>10s} "
        f"{'tokens in':>10s} {'tokens out':>10s} {'USD':>9s} {'GPU-hours':>9s}"
    )
    lines = ["totals of what would run (estimates, per model):", header]
    usd_sum = gpu_sum = 0.0
    calls_sum = tin_sum = tout_sum = 0.0
    unpriced, no_rate = [], []
    for t in sorted(totals, key=lambda t: t.name):
        usd = t.usd(prices)
        gpu = t.gpu_hours(throughput)
        backend = t.model.backend if t.model is not None else ""
        if usd is None:
            if backend == "external":  # a launched model costs GPU time instead
                unpriced.append(t.name)
        else:
            usd_sum += usd
        if gpu is None:
            if backend == "vllm":
                no_rate.append(t.name)
        else:
            gpu_sum += gpu
        calls_sum += t.calls
        tin_sum += t.tokens_in
        tout_sum += t.tokens_out
        episodes = str(t.episodes) if t.episodes else "-"
        if t.memory_tasks:
            episodes += f" +{t.memory_tasks} mem"
        lines.append(
            f"  {t.name:22s} {', '.join(sorted(t.roles)):24s} {episodes:>8s} "
            f"{_count(t.calls):>10s} {_count(t.tokens_in):>10s} {_count(t.tokens_out):>10s} "
            f"{_usd(usd):>9s} {_hours(gpu):>9s}"
        )
    lines.append(
        f"  {'total':22s} {'':24s} {'':>8s} {_count(calls_sum):>10s} {_count(tin_sum):>10s} "
        f"{_count(tout_sum):>10s} {_usd(usd_sum if any(t.usd(prices) is not None for t in totals) else None):>9s} "
        f"{_hours(gpu_sum if gpu_sum else None):>9s}"
    )
    if gpu_sum and gpu_hour:
        lines.append(f"  GPU time at cost.gpu_hour={gpu_hour:g}: {_usd(gpu_sum * gpu_hour)}")
    for t in sorted(totals, key=lambda t: t.name):
        lines.append(f"  {t.name}: {'; '.join(sorted(t.basis))}")
    if unpriced:
        lines.append(
            f"  no price for {', '.join(unpriced)}: set cost.prices "
            "(e.g. '+cost.prices={NAME: {input_per_mtok: 0.25, output_per_mtok: 2.0}}')"
        )
    if no_rate:
        lines.append(
            f"  no throughput for {', '.join(no_rate)}: set "
            "'+cost.throughput_tokens_per_s={NAME: TOKENS_PER_S}' (tokens one server replica "
            "processes per second) for GPU-hours"
        )
    return "\n".join(lines)


def _count(value: float) -> str:
    if value >= 1e9:
        return f"{value / 1e9:.1f}G"
    if value >= 1e6:
        return f"{value / 1e6:.1f}M"
    if value >= 1e4:
        return f"{value / 1e3:.0f}k"
    return f"{value:,.0f}"


def _usd(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _hours(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"
