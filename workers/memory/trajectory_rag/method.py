"""Naive trajectory RAG as a `MemoryMethod` (kind `trajectory_rag`).

The naive teacher-memory transfer that motivates AMD (AMD paper, Figure 1 B): each
successful teacher trajectory is stored whole (the task's requests and every executed
call with its observation), the task most similar to the student's (by its first
user message) is retrieved, and its trajectory is placed in the system prompt, cut to
a budget. Nothing is distilled, so the build asks no model: its entries are counted
as deterministic.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.envs.base import ANSWER, TOOL_CALLS
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.method import BaseMemoryMethod, own_settings, summed_counters
from distillery.workers.memory.trajectory_rag import build, prompts
from distillery.workers.memory.trajectory_rag.hooks import TrajectoryRagHooks
from distillery.workers.memory.trajectory_rag.records import COLLECTIONS, STORE_PREFIX
from distillery.workers.memory.trajectory_rag.settings import TrajectoryRagSettings


class TrajectoryRag(BaseMemoryMethod):
    kind: ClassVar[str] = "trajectory_rag"
    # Its bank is built from the episodes' executed calls or their graded answer
    # (memory/applicability.py): tool-use and answer benchmarks alike.
    reads_one_of: ClassVar[frozenset[str]] = frozenset({TOOL_CALLS, ANSWER})
    settings_model: ClassVar[type[TrajectoryRagSettings]] = TrajectoryRagSettings
    # Bump when what is stored or shown changes.
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts a block (prompts.py): inert in built text (memory/bounds.py).
    memory_delimiters: ClassVar[tuple[str, ...]] = (r"\[Trajectory memory\]", r"Example \d+ \(")

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> TrajectoryRagSettings:
        return own_settings(TrajectoryRagSettings, overrides, types)  # no memory types of its own

    def for_benchmark(
        self, settings: TrajectoryRagSettings, benchmark: str
    ) -> TrajectoryRagSettings:
        # Where the benchmark grades a closing reply, the entries hold it: shown.
        from distillery.workers.envs.registry import trajectory_contents

        # Only where the user left it to the benchmark (None): a value set is kept.
        if settings.answers is not None:
            return settings
        answers = ANSWER in trajectory_contents(benchmark, None)
        return settings.model_copy(update={"answers": answers})

    def read_identity(self, settings: TrajectoryRagSettings) -> dict[str, Any]:
        # What the student is shown: the settings and every text of the rendering (the
        # answers' only where they are shown: a tool-use point's key is as it was).
        if not settings.answers:
            return {
                **settings.model_dump(mode="json", exclude={"answers"}),
                "texts": list(prompts.TEXTS),
            }
        return {
            **settings.model_dump(mode="json"),
            "texts": list(prompts.TEXTS),
            "answer_texts": list(prompts.ANSWER_TEXTS),
        }

    def build_identity(self, memory: Any) -> dict[str, Any]:
        # No builder knob changes a stored trajectory.
        return {"entries": "successful teacher trajectories, whole"}

    def build_fingerprint(self) -> str:
        return f"trajectory-rag-{self.code_version}-obs{build.STORED_OBSERVATION_CHARS}"

    def bank_id(self, episodes: Sequence[Any], memory: Any, writer: str, split: str) -> str:
        # `writer` is left out: no model writes this bank, whoever is configured.
        return build.bank_content_id(episodes, self.code_version, split)

    async def build(
        self, episodes: Sequence[Any], tasks: Sequence[Any], builder: Any, llm: Any, split: str
    ) -> BuiltBank:
        entries, stats = build.build_trajectories(episodes, tasks, split)
        return build.built_bank(entries, stats, len(episodes))

    async def render(self, bank: BuiltBank, builder: Any, llm: Any) -> BuiltBank:
        return bank  # no derived stage

    def hook_texts(self) -> tuple[str, ...]:
        return (*prompts.TEXTS, *prompts.ANSWER_TEXTS)

    def derived_stage(self, settings: TrajectoryRagSettings) -> bool:
        return False

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: TrajectoryRagSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> TrajectoryRagHooks:
        return TrajectoryRagHooks(task.task_id, search, settings, allows)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out = summed_counters(
            records, ("isolation_checked", "isolation_violations", "injected", "truncated")
        )
        chars = summed_counters(records, ("injected_chars",))["injected_chars"]
        out["injected_chars_mean"] = chars / len(records) if records else 0.0
        return out

    def tags(self, settings: TrajectoryRagSettings, embedder: str) -> dict[str, str]:
        return {"traj_k": str(settings.k), "traj_max_chars": str(settings.max_chars)}

    def report_columns(self, settings: TrajectoryRagSettings) -> dict[str, Any]:
        # `k_traj` (entries read per query of collection `traj`): an integer, so a k
        # sweep gets its success-vs-k panel. The budgets stay out of the points table
        # (an integer column would be read as another k, a text one as a
        # representation); they are in the descriptors (MLflow params).
        return {"k_traj": settings.k}

    def label(self, settings: TrajectoryRagSettings) -> str:
        return f"traj k={settings.k}"

    def descriptors(self, settings: TrajectoryRagSettings) -> dict[str, str]:
        # `answers` follows from the benchmark: not a setting to name points by.
        dump = settings.model_dump(exclude={"answers"})
        return {k: "null" if v is None else str(v) for k, v in dump.items()}
