"""An outcome-driven stage run in process against a simulated world: its real program
and framework (order, provisional slot, commits, event log, bounds, cost rows), with
plays decided by a seeded coin and models answered instantly with texts of realistic
size, so the numbers are the method's own (calls, tokens by prompt size, its prompt's
growth, the framework's time), not a model's latency.

A play's episode is a GSM8K-sized question and reply (`QUESTION_CHARS`,
`REPLY_CHARS`); a play whose prompt the method's hooks put no memory in succeeds with
probability `p_first`, one that reads memory (a reflection of its own, a committed
entry, a note its routing picked) with `p_memory`. The episode records the hooks' own
account (`extra_json`), which a program may read back (AgentBrew counts the notes a
first play was shown). Token counts are characters / 4, as the scripted server counts
them. Used by bench/methods.py.
"""

from __future__ import annotations

import json
import random
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from distillery.orchestrator.execution.ordered_run import OrderedRun
from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, Reply
from distillery.orchestrator.state.ledger import BankOutput, Ledger
from distillery.workers.envs.base import Task
from distillery.workers.memory.config import MemoryBounds
from distillery.workers.trajectories import EpisodeRecord, EpisodeSummary, write_episode

QUESTION_CHARS = 300  # a GSM8K problem
REPLY_CHARS = 1_200  # a worked solution
PLAY_TOKENS_IN = 120  # the system prompt and the question, without memory
WORDS = ("apples", "pears", "trains", "hours", "dollars", "half", "twice", "total", "each",
         "remaining", "minutes")  # fmt: skip


def tokens(text: str) -> int:
    return max(1, len(text) // 4)


def task(index: int, rng: random.Random) -> Task:
    words = " ".join(rng.choice(WORDS) for _ in range(QUESTION_CHARS // 7))
    return Task(f"task_{index}", "gsm8k", (f"Problem {index}: {words}?",), (), ())


@dataclass(frozen=True)
class PlayView:
    """What one play reads: the memory searchable to it (committed as of its wave and
    its task's staged entries, as `OrderedRun.view_of` builds it), the staged entries
    alone, and which play of its task it is."""

    task: Task
    entries: list[Any]
    staged: tuple[Any, ...]
    attempt: int


# A play's memory as the method's hooks show it: the characters put in the prompt and
# the hooks' record (the episode's `extra_json`).
MemoryRead = Callable[[PlayView], Awaitable[tuple[int, dict[str, Any]]]]


def _record(
    task_: Task, attempt: int, success: bool, memory_chars: int, extra: dict[str, Any]
) -> EpisodeRecord:
    reply = "Step: " + "x" * (REPLY_CHARS - 20) + " \\boxed{5}"
    messages = [
        {"role": "system", "content": "Please reason step by step." + "m" * memory_chars},
        {"role": "user", "content": task_.turns[0]},
        {"role": "assistant", "content": reply},
    ]
    return EpisodeRecord(
        run_id="bench", stage="sim", role="student", agent="sim", model="sim",
        backend="external", action_format="native", benchmark="gsm8k",
        task_id=task_.task_id, group_id=None, n_turns=1, success=success,
        error_type=None if success else "wrong_answer", error_message=None,
        termination="done", steps_per_turn=[0], total_steps=0, n_llm_calls=1,
        tokens_in=PLAY_TOKENS_IN + memory_chars // 4, tokens_out=tokens(reply),
        llm_latency_s=0.0, wall_s=0.0, started_at=0.0, finished_at=0.0, attempts=1,
        episode_id=f"{task_.task_id}-{attempt}", messages_json=json.dumps(messages),
        attempt=attempt, extra_json=json.dumps(extra),
    )  # fmt: skip


@dataclass
class Simulation:
    """What one stage did over its tasks."""

    plays: int = 0
    asks: Counter[str] = field(default_factory=Counter)
    tokens_in: Counter[str] = field(default_factory=Counter)
    tokens_out: Counter[str] = field(default_factory=Counter)
    bank: dict[str, list[Any]] = field(default_factory=dict)
    memory_chars: list[int] = field(default_factory=list)  # per play: memory it read
    wall_s: float = 0.0


def simulate(
    stage: OrderedEpisodeStage,
    n_tasks: int,
    answer: Callable[[str, list[dict[str, Any]]], str],
    read: MemoryRead,
    p_first: float = 0.5,
    p_memory: float = 0.7,
    seed: int = 0,
) -> Simulation:
    """Run `stage` over `n_tasks` simulated tasks (see the module docstring);
    `answer(role, messages)` is the text a model returns, `read(view)` what the method's
    hooks show a play (characters, their record)."""
    rng = random.Random(seed)
    tasks = {f"task_{i}": task(i, rng) for i in range(n_tasks)}
    out = Simulation()
    saved = {name: getattr(OrderedRun, name) for name in ("view_of", "play", "ask", "similarities")}
    views: dict[str, list[Any]] = {}

    def view_of(self, snapshot, staged, task_id):
        entries = [e for items in (*snapshot.values(), *staged.values()) for e in items]
        views[f"v{len(views)}"] = entries
        return (
            f"v{len(views) - 1}"
            if self.stage.searches_live_bank and self.method.collections
            else None
        )

    async def play(self, task_id, attempt, view, staged):
        entries = list(views.get(view, [])) if view else list(staged)
        chars, extra = await read(PlayView(tasks[task_id], entries, tuple(staged), attempt))
        out.plays += 1
        out.memory_chars.append(chars)
        success = rng.random() < (p_memory if chars else p_first)
        made = _record(tasks[task_id], attempt, success, chars, extra)
        folder = self.ledger.episodes_dir(self.stage.key) / f"attempt-{attempt}"
        return EpisodeSummary.of(made, write_episode(folder, made))

    async def ask(self, role, messages):
        text = answer(role, messages)
        sent = sum(tokens(str(m.get("content") or "")) for m in messages)
        out.asks[role] += 1
        out.tokens_in[role] += sent
        out.tokens_out[role] += tokens(text)
        return Reply(text, sent, tokens(text)), f"{role}-model"

    async def similarities(self, queries, keys):
        return [[0.0 for _ in keys] for _ in queries]

    for name, fn in (("view_of", view_of), ("play", play), ("ask", ask),
                     ("similarities", similarities)):  # fmt: skip
        setattr(OrderedRun, name, fn)
    try:
        with tempfile.TemporaryDirectory() as root:
            ledger = Ledger(root)

            def written(bank_id, bank):
                out.bank = {n: list(v) for n, v in bank.collections.items()}
                return BankOutput(bank_id, bank.counts(), dict(bank.stats))

            sweep = SimpleNamespace(
                graph=SimpleNamespace(needs={stage.key: set(tasks)}, tasks=tasks),
                ledger=ledger, say=lambda text: None, line=lambda s: s.label,
                names=SimpleNamespace(stage=lambda key: ""), progress=False, infra=Counter(),
                cfg=SimpleNamespace(memory=SimpleNamespace(embedder=MemoryBounds(),
                                                           bounds=MemoryBounds())),
                memory=SimpleNamespace(reused=lambda bank_id: None, written=written,
                                       drop_views=lambda prefix: None),
            )  # fmt: skip
            started = time.perf_counter()
            stage.run(sweep, "[bench]")  # type: ignore[arg-type]
            out.wall_s = time.perf_counter() - started
    finally:
        for name, fn in saved.items():
            setattr(OrderedRun, name, fn)
    return out
