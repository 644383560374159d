"""Reflexion as a `MemoryMethod` (kind `reflexion`): no bank (a test-time protocol),
its points scored by its own stage kind (`stage.ReflexionStage`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.feedback import with_shared_feedback
from distillery.workers.memory.method import NoBankMethod, own_settings, summed_counters
from distillery.workers.memory.reflexion import prompts
from distillery.workers.memory.reflexion.hooks import ReflexionHooks
from distillery.workers.memory.reflexion.records import COLLECTIONS, STORE_PREFIX
from distillery.workers.memory.reflexion.settings import ReflexionSettings

COUNTERS = ("reflections_shown", "reflection_fallbacks", "reflection_task_mismatch")


class Reflexion(NoBankMethod):
    kind: ClassVar[str] = "reflexion"
    settings_model: ClassVar[type[ReflexionSettings]] = ReflexionSettings
    # Bump when what a play is shown or how re-plays are decided changes.
    code_version: ClassVar[str] = "1"
    # Its reflections are staged (the outcome-driven stage's provisional slot), never
    # stored: the collection exists for staging only.
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    memory_delimiters: ClassVar[tuple[str, ...]] = (r"\[Reflexion memory\]",)

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> ReflexionSettings:
        return own_settings(ReflexionSettings, with_shared_feedback(defaults, overrides), types)

    def evaluation_stage(self, planner: Any, read: Any) -> Any:
        return planner.stage("reflexion", read=read)

    def hook_texts(self) -> tuple[str, ...]:
        return prompts.HOOK_TEXTS

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: ReflexionSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> ReflexionHooks:
        return ReflexionHooks(task.task_id, search, settings)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        """Per point (each task's scored play): its plays in all (`plays`), the tasks
        solved on a re-play, the reflections the scored plays read, fallbacks."""
        out = summed_counters(records, COUNTERS)
        plays = [int(getattr(r, "attempt", 1) or 1) for r in records]
        out["plays"] = float(sum(plays))
        out["plays_mean"] = sum(plays) / len(plays) if plays else 0.0
        out["reflections"] = float(sum(p - 1 for p in plays))
        out["solved_on_replay"] = float(
            sum(1 for r, p in zip(records, plays, strict=True) if r.success and p > 1)
        )
        return out

    def tags(self, settings: ReflexionSettings, embedder: str) -> dict[str, str]:
        return {
            "reflexion_k": str(settings.max_attempts),
            "reflexion_feedback": settings.feedback,
        }

    def report_columns(self, settings: ReflexionSettings) -> dict[str, Any]:
        # Its k is its test-time budget, in the points table's `test_time_rollouts` (the
        # report's test-time column), not entries per query; what its reflections read
        # of a failure is the shared feedback setting's column.
        return {"learning_feedback": settings.feedback}

    def label(self, settings: ReflexionSettings) -> str:
        return f"reflexion k={settings.max_attempts}"

    def descriptors(self, settings: ReflexionSettings) -> dict[str, str]:
        # Named by the method: its settings never read as another method's (`k`).
        return {
            f"reflexion.{k}": "null" if v is None else str(v)
            for k, v in settings.model_dump(mode="json").items()
        }
