"""ExpeL as a `MemoryMethod` (kind `expel`): its bank is written by its own stage kind
(`stage.ExpelStage`: gathering with Reflexion, then insight extraction), read by an
ordinary evaluate stage through `hooks.ExpelHooks`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.memory.config import EmbedderConfig
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.expel import prompts
from distillery.workers.memory.expel.hooks import ExpelHooks
from distillery.workers.memory.expel.records import COLLECTIONS, STORE_PREFIX
from distillery.workers.memory.expel.settings import ORIGINAL_EMBEDDER, ExpelSettings
from distillery.workers.memory.feedback import with_shared_feedback
from distillery.workers.memory.method import BaseMemoryMethod, own_settings, summed_counters
from distillery.workers.memory.reflexion.prompts import HOOK_TEXTS as REFLECTION_HOOK_TEXTS

COUNTERS = (
    "isolation_checked", "isolation_violations", "insights_shown", "examples_shown",
    "examples_too_long", "reflections_shown",
)  # fmt: skip


class Expel(BaseMemoryMethod):
    kind: ClassVar[str] = "expel"
    settings_model: ClassVar[type[ExpelSettings]] = ExpelSettings
    # Bump when what is gathered, extracted or shown changes.
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts a block: inert in built text (memory/bounds.py).
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"\[ExpeL insights\]", r"\[ExpeL examples\]", r"Example \d+:", r"\[Reflexion memory\]",
    )  # fmt: skip

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> ExpelSettings:
        # The shared defaults it reads: `feedback` only (workers/memory/feedback.py).
        return own_settings(ExpelSettings, with_shared_feedback(defaults, overrides), types)

    def bank_stage(self, planner: Any) -> Any:
        return planner.stage("expel", memory_kind=self.kind)

    def hook_texts(self) -> tuple[str, ...]:
        return (*prompts.HOOK_TEXTS, *REFLECTION_HOOK_TEXTS)

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: ExpelSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> ExpelHooks:
        return ExpelHooks(task.task_id, search, settings, allows)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out = summed_counters(records, COUNTERS)
        chars = summed_counters(records, ("injected_chars",))["injected_chars"]
        out["injected_chars_mean"] = chars / len(records) if records else 0.0
        return out

    def embedder(self, settings: ExpelSettings) -> EmbedderConfig | None:
        return settings.embedder

    def tags(self, settings: ExpelSettings, embedder: str) -> dict[str, str]:
        embedder = settings.embedder.model if settings.embedder else embedder
        out = {"expel_k": str(settings.k), "expel_insights": str(settings.insights).lower(),
               "expel_max_example_chars": str(settings.max_example_chars)}  # fmt: skip
        if embedder.removeprefix("sentence-transformers/") != ORIGINAL_EMBEDDER:
            # Task similarity (its examples) is a cosine of the original's embedder.
            out["expel_embedder"] = f"original {ORIGINAL_EMBEDDER}, run with {embedder}"
        return out

    def report_columns(self, settings: ExpelSettings) -> dict[str, Any]:
        # `k_examples`: examples read per query of collection `examples` (an integer: a
        # k sweep gets its success-vs-k panel).
        return {"k_examples": settings.k, "learning_feedback": settings.feedback}

    def read_identity(self, settings: ExpelSettings) -> dict[str, Any]:
        # `feedback` decides the bank (the build stage's identity, upstream), not what
        # the student is shown of it.
        out = super().read_identity(settings)
        out.pop("feedback", None)
        if settings.embedder is None:  # the sweep's: the read identities of old
            out.pop("embedder", None)
        return out

    def label(self, settings: ExpelSettings) -> str:
        return f"expel k={settings.k}" + ("" if settings.insights else " no insights")

    def descriptors(self, settings: ExpelSettings) -> dict[str, str]:
        # Named by the method: its settings never read as another method's (`k`).
        out = {
            f"expel.{k}": "null" if v is None else str(v)
            for k, v in settings.model_dump(mode="json", exclude={"embedder"}).items()
        }
        if settings.embedder is not None:  # its own (None: the sweep's, said elsewhere)
            out["expel.embedder"] = f"{settings.embedder.kind}:{settings.embedder.model}"
        return out
