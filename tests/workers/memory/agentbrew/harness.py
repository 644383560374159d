"""A brew without Ray or servers: the real outcome-driven stage framework
(`ordered_run.OrderedRun`: its order, waves, contexts, event log and resume), the real
`brew` program and the method's real hooks, with three things in process instead of
remote: the student (a function of the task and the system prompt the hooks built), the
teacher and curator (functions of the messages), and the memory service (the method's
collections indexed by a `BankRetriever` over a deterministic word-hash embedder).

Plays are written as real episode files and recorded in a real ledger under `root`, so a
second `ScriptedBrew` over the same root resumes the first (a kill is simulated by a
player raising `Killed`).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from distillery.orchestrator.execution.ordered_run import OrderedRun, _Memory
from distillery.orchestrator.execution.ordered_stage import Reply
from distillery.orchestrator.stages.stage import digest_of
from distillery.orchestrator.state.ledger import Ledger
from distillery.testing.scripted_server import word_vector
from distillery.workers.envs.base import Task
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.agentbrew.settings import (
    AgentBrewSettings,
    BrewSettings,
    ReadSettings,
)
from distillery.workers.memory.agentbrew.stage import BrewStage
from distillery.workers.memory.bounds import delimiter_pattern, memory_delimiters
from distillery.workers.memory.config import MemoryBounds
from distillery.workers.memory.embedding import normalise_rows
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory.retrieval import BankRetriever, Isolation
from distillery.workers.memory.store import entry_to_dict
from distillery.workers.trajectories import EpisodeRecord, EpisodeSummary, write_episode

Student = Callable[[Task, str], bool]  # (task, system prompt) -> solved
Model = Callable[[list[dict[str, Any]]], str]  # messages -> answer text


class Killed(Exception):
    """A simulated SIGKILL: raised by a player, it ends the run where it is."""


class WordEmbedder:
    dim = 256

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return normalise_rows([word_vector(t, self.dim) for t in texts])


def model(name: str) -> ModelConfig:
    return ModelConfig(name=name, backend="external", model=f"org/{name}", base_url="http://x/v1")


def brew_stage(
    settings: AgentBrewSettings | None = None,
    *,
    benchmark: str = "gsm8k",
    options: dict[str, Any] | None = None,
    wave_size: int = 1,
) -> BrewStage:
    settings = settings or AgentBrewSettings()
    plays = settings.for_brew_plays()
    return BrewStage(
        identity={"benchmark": benchmark, "brew": settings.brew.model_dump(mode="json")},
        upstream=(),
        label="brew test",
        model=model("student-4b"),
        other_models={"teacher": model("teacher"), "curator": model("curator")},
        memory_kind="agentbrew",
        settings=plays,
        split="memory",
        wave_size=wave_size,
        extra={"student": {"model": "org/student-4b", "params_b": 4.0}, "options": options or {}},
    )


def settings(read: dict[str, Any] | None = None, **brew: Any) -> AgentBrewSettings:
    """Settings whose serving fields and brew-time reading are both `read`."""
    read = read or {}
    return AgentBrewSettings(**read, brew=BrewSettings(**brew, read=ReadSettings(**read)))


@dataclass
class FakeSearch:
    """`memory_service.BankSearch` over an in-process retriever."""

    retriever: BankRetriever | None
    attempt: int
    staged: tuple[Any, ...]

    @property
    def has_bank(self) -> bool:
        return self.retriever is not None

    async def search(self, collection, queries, task_id, k, threshold, group=None, combine="each"):
        assert self.retriever is not None
        return self.retriever.search(collection, queries, task_id, k, threshold, group, combine)


class ScriptedBrew(OrderedRun):
    """An `OrderedRun` whose effects are in process (see the module docstring)."""

    def __init__(
        self,
        stage: BrewStage,
        tasks: Sequence[Task],
        root: Path,
        student: Student,
        teacher: Model,
        curator: Model | None = None,
    ) -> None:
        self.tasks = {t.task_id: t for t in tasks}
        self.sweep = SimpleNamespace(
            graph=SimpleNamespace(tasks=self.tasks),
            progress=False,
            names=SimpleNamespace(stage=lambda key: ""),
        )
        self.stage = stage
        self.prefix = ""
        self.ledger = Ledger(str(root))
        self.journal = stage.journal(self.ledger)
        self.method = memory_method(stage.memory_kind)
        self.memory = _Memory(self.method.collections)
        self.isolation = stage.isolation()
        self.program = stage.program()
        # As OrderedRun: committed entries within the default memory bounds, the
        # program's events counted.
        self.bounds = MemoryBounds()
        self._delimiters = delimiter_pattern(memory_delimiters(stage.memory_kind))
        self.bound_counts: Counter[str] = Counter()
        self.event_counts: Counter[str] = Counter()
        self._pool = None
        self._views: set[str] = set()
        self._llms: dict[str, Any] = {}
        self.retrievers: dict[str, BankRetriever] = {}
        self.embedder = WordEmbedder()
        self.student = student
        self.players = {"teacher": teacher, "curator": curator or teacher}
        self.calls: Counter[str] = Counter()  # effects run (not replayed from the log)
        self.prompts: list[tuple[str, str, str]] = []  # (task, attempt, system prompt)

    def brew(self) -> ScriptedBrew:
        asyncio.run(self._run(list(self.tasks)))
        return self

    @property
    def events(self) -> list[dict[str, Any]]:
        return self.journal.ordered()

    def bank(self) -> dict[str, list[Any]]:
        return self.memory.snapshot()

    # -- in-process effects ------------------------------------------------------------

    def view_of(self, snapshot, staged, task_id):
        collections = {
            name: [*snapshot.get(name, []), *staged.get(name, [])] for name in self.memory.specs
        }
        view = digest_of({n: [entry_to_dict(e) for e in v] for n, v in collections.items()})[:24]
        if view not in self.retrievers:
            entries = {
                name: (items, self.embedder.embed([e.key_text for e in items]))
                for name, items in collections.items()
            }
            self.retrievers[view] = BankRetriever.from_entries(
                self.embedder, Isolation("main"), self.method.collections, entries
            )
        return view

    async def similarities(self, queries, keys):
        # As OrderedRun: cosines under the run's embedder (here the test's).
        if not queries or not keys:
            return [[] for _ in queries]
        return (self.embedder.embed(queries) @ self.embedder.embed(keys).T).tolist()

    def _drop_views(self) -> None:
        self._views.clear()

    async def play(self, task_id, attempt, view, staged) -> EpisodeSummary:
        task = self.tasks[task_id]
        search = FakeSearch(self.retrievers.get(view) if view else None, attempt, staged)
        hooks = self.method.hooks(task, search, self.stage.settings, lambda s: True, None)
        system = await hooks.before_turn(0, task.turns[0], "You solve tasks.")
        self.prompts.append((task_id, str(attempt), system))
        solved = self.student(task, system)  # may raise Killed
        self.calls["student"] += 1
        messages = [
            {"role": "system", "content": system},
            {"role": "user", "content": task.turns[0]},
            {"role": "assistant", "content": "42" if solved else "I give up: 7"},
        ]
        record = EpisodeRecord(
            run_id="test", stage="brew", role="student", agent="student-4b", model="org/s",
            backend="external", action_format="prompt", benchmark="gsm8k", task_id=task_id,
            group_id=None, n_turns=1, success=solved,
            error_type=None if solved else "wrong_answer",
            error_message=None if solved else "'7' is not the answer", termination="done",
            steps_per_turn=[1], total_steps=1, n_llm_calls=1, tokens_in=10, tokens_out=2,
            llm_latency_s=0.0, wall_s=0.0, started_at=0.0, finished_at=0.0, attempts=1,
            episode_id=f"{task_id}-{attempt}", messages_json=json.dumps(messages),
            extra_json=json.dumps(hooks.record()), attempt=attempt,
        )  # fmt: skip
        folder = self.ledger.episodes_dir(self.stage.key) / f"attempt-{attempt}"
        return EpisodeSummary.of(record, write_episode(folder, record))

    async def ask(self, role, messages):
        text = self.players[role](messages)  # may raise Killed
        self.calls[role] += 1
        return Reply(text, 100, 50), f"{role}-model"
