"""Runs an outcome-driven stage of the baselines without Ray: its real program, its real
framework (order, waves, provisional slot, commits, event log, bounds, cost rows, the
ledger), with the plays and the models' answers scripted.

A play's outcome is `world.outcome(task_id, attempt, shown)`, where `shown` is every
entry the play could read (the committed ones of its view plus its task's staged ones),
and its record is a real episode file whose transcript is the task, the reply
(`world.reply(task_id, attempt, shown)`, else "the answer is 5") and the verdict; a
probe's (a play of a held-out task) goes to a folder of its own. A model's answer is `world.answer(role, messages)` (a text, or an
`ordered_stage.Reply`). Similarity is a bag-of-words cosine (`word_vector`).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from distillery.orchestrator.execution.ordered_run import OrderedRun
from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, Reply
from distillery.orchestrator.state.ledger import BankOutput, Ledger
from distillery.testing.scripted_server import word_vector
from distillery.workers.envs.base import Task
from distillery.workers.memory.config import MemoryBounds
from distillery.workers.trajectories import EpisodeSummary, write_episode
from tests.support.records import episode_record

BENCHMARK = "gsm8k"


def task(task_id: str) -> Task:
    return Task(task_id, BENCHMARK, (f"Question {task_id}: how many apples?",), (), ())


def record(task_id: str, attempt: int, success: bool, reply: str, stage: str) -> Any:
    messages = [
        {"role": "system", "content": "Please reason step by step."},
        {"role": "user", "content": task(task_id).turns[0]},
        {"role": "assistant", "content": reply},
    ]
    return episode_record(
        task_id, success, [], stage=stage, agent="scripted", benchmark=BENCHMARK,
        n_llm_calls=1, episode_id=f"{task_id}-{attempt}", attempt=attempt,
        messages_json=json.dumps(messages), tokens_in=10, tokens_out=5,
        error_type=None if success else "wrong_answer",
        error_message=None if success else "expected 4, got 5",
    )  # fmt: skip


def cosine(a: str, b: str) -> float:
    va, vb = word_vector(a), word_vector(b)
    dot = sum(x * y for x, y in zip(va, vb, strict=True))
    norm = math.sqrt(sum(x * x for x in va)) * math.sqrt(sum(y * y for y in vb))
    return dot / norm if norm else 0.0


@dataclass
class World:
    outcome: Callable[[str, int, list[Any]], bool]
    answer: Callable[[str, list[dict[str, Any]]], Any]
    reply: Callable[[str, int, list[Any]], str] | None = None
    plays: list[tuple[str, int, list[Any]]] = field(default_factory=list)
    asks: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    views: dict[str, list[Any]] = field(default_factory=dict)
    staged_of_play: list[tuple[Any, ...]] = field(default_factory=list)
    banks: list[dict[str, list[Any]]] = field(default_factory=list)
    bank_stats: list[dict[str, int]] = field(default_factory=list)
    similarity_calls: int = 0


def run_stage(
    stage: OrderedEpisodeStage, tasks: list[str], world: World, root: Any, monkeypatch: Any
) -> Any:
    """Run `stage` over `tasks` in `root` (a ledger); the sweep it ran in."""
    ledger = Ledger(root)

    def view_of(self, snapshot, staged, task_id):
        entries = [e for items in snapshot.values() for e in items]
        entries += [e for items in staged.values() for e in items]
        view = f"view-{len(world.views)}"
        world.views[view] = entries
        return view if self.stage.searches_live_bank and self.method.collections else None

    async def play(self, task_id, attempt, view, staged, folder=None):
        shown = list(world.views.get(view, [])) if view else list(staged)
        world.staged_of_play.append(tuple(staged))
        success = bool(world.outcome(task_id, attempt, shown))
        world.plays.append((task_id, attempt, shown))
        reply = world.reply(task_id, attempt, shown) if world.reply else "the answer is 5"
        made = record(task_id, attempt, success, reply, stage.kind)
        where = ledger.episodes_dir(stage.key) / (folder or f"attempt-{attempt}")
        return EpisodeSummary.of(made, write_episode(where, made))

    async def ask(self, role, messages):
        world.asks.append((role, messages))
        answer = world.answer(role, messages)
        reply = answer if isinstance(answer, Reply) else Reply(str(answer), 7, 3)
        return reply, f"{role}-model"

    async def similarities(self, queries, keys):
        world.similarity_calls += 1
        return [[round(cosine(q, k), 6) for k in keys] for q in queries]

    monkeypatch.setattr(OrderedRun, "view_of", view_of)
    monkeypatch.setattr(OrderedRun, "play", play)
    monkeypatch.setattr(OrderedRun, "ask", ask)
    monkeypatch.setattr(OrderedRun, "similarities", similarities)

    def written(bank_id, bank, embedder=None):
        world.banks.append({n: list(v) for n, v in bank.collections.items()})
        world.bank_stats.append(dict(bank.stats))
        return BankOutput(bank_id, bank.counts(), dict(bank.stats))

    sweep = SimpleNamespace(
        graph=SimpleNamespace(needs={stage.key: set(tasks)}, tasks={t: task(t) for t in tasks}),
        ledger=ledger,
        say=lambda text: None,
        line=lambda s: s.label,
        names=SimpleNamespace(stage=lambda key: ""),
        progress=False,
        infra=Counter(),
        cfg=SimpleNamespace(
            memory=SimpleNamespace(
                embedder=MemoryBounds(),  # any pydantic model: only dumped into bank ids
                bounds=MemoryBounds(),
            )
        ),
        memory=SimpleNamespace(
            reused=lambda bank_id: None, written=written, drop_views=lambda prefix: None
        ),
    )
    stage.run(sweep, "[1/1]")  # type: ignore[arg-type]
    return sweep


def events(sweep: Any, stage: OrderedEpisodeStage) -> list[tuple[str, str]]:
    from distillery.orchestrator.execution.ordered_stage import stage_events

    return [(r["task"], r["kind"]) for r in stage_events(sweep.ledger, stage.key)]


@dataclass
class FakeSearch:
    """A method's `BankSearch` over entries in memory (scored by word overlap), with
    the play's attempt and staged entries; `forbidden`: source tasks isolation refuses
    (returned anyway, as a broken search would: the hooks' audit must catch them)."""

    entries: dict[str, list[Any]] = field(default_factory=dict)
    staged: tuple[Any, ...] = ()
    attempt: int = 1
    has_bank: bool = True
    queries: list[tuple[str, int]] = field(default_factory=list)

    async def search(self, collection, queries, task_id, k, threshold, group=None, combine="each"):
        from distillery.workers.memory.isolation import Hit

        self.queries.append((collection, k))
        out = []
        for query in queries:
            scored = sorted(
                self.entries.get(collection, []),
                key=lambda e: (-cosine(query, e.key_text), e.memory_id),
            )
            out.append([Hit(e, cosine(query, e.key_text), collection) for e in scored[:k]])
        return out


def run(coro: Any) -> Any:
    return asyncio.run(coro)
