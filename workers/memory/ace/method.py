"""ACE as a `MemoryMethod` (kind `ace`): its playbook is grown by its own stage kind
(`stage.AceStage`), read whole by an ordinary evaluate stage through `hooks.AceHooks`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.memory.ace import prompts
from distillery.workers.memory.ace.hooks import AceHooks
from distillery.workers.memory.ace.records import COLLECTIONS, STORE_PREFIX
from distillery.workers.memory.ace.settings import (
    AceSettings,
    ace_py_deviations,
    omit_first_version_defaults,
)
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.feedback import with_shared_feedback
from distillery.workers.memory.method import BaseMemoryMethod, own_settings, summed_counters

COUNTERS = (
    "isolation_checked", "isolation_violations", "bullets_shown", "empty_playbook",
    "reflections_shown", "playbook_cut", "bullets_cut",
)  # fmt: skip


class Ace(BaseMemoryMethod):
    kind: ClassVar[str] = "ace"
    settings_model: ClassVar[type[AceSettings]] = AceSettings
    # Bump when what is adapted or shown changes.
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts a block or a line (memory/bounds.py): a bullet cannot
    # open a section, fake another bullet or close the playbook.
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"\[ACE playbook\]", r"\[ACE reflection\]", r"### PLAYBOOK (?:BEGIN|END)", r"## ",
        r"\[[A-Za-z]+-\d{5}\]",
    )  # fmt: skip

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> AceSettings:
        # The shared defaults it reads: `feedback` only (workers/memory/feedback.py).
        return own_settings(AceSettings, with_shared_feedback(defaults, overrides), types)

    def bank_stage(self, planner: Any) -> Any:
        return planner.stage("ace", memory_kind=self.kind)

    def hook_texts(self) -> tuple[str, ...]:
        return prompts.HOOK_TEXTS

    def read_identity(self, settings: Any) -> dict[str, Any]:
        # Settings added later, left out at the first version's values (the evaluations
        # of old keep their keys); set otherwise, their bank's key moves anyway.
        return omit_first_version_defaults(super().read_identity(settings))

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: AceSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> AceHooks:
        return AceHooks(task.task_id, search, settings, allows)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out = summed_counters(records, COUNTERS)
        chars = summed_counters(records, ("playbook_chars",))["playbook_chars"]
        out["playbook_chars_mean"] = chars / len(records) if records else 0.0
        return out

    def tags(self, settings: AceSettings, embedder: str) -> dict[str, str]:
        dedup = "off" if settings.dedup_threshold is None else str(settings.dedup_threshold)
        out = {"ace_rounds": str(settings.max_rounds), "ace_dedup": dedup}
        if settings.prompts == "ours":  # ace.py's loop: where it takes the harness's choices
            out["ace_deviations"] = ",".join(ace_py_deviations(settings))
        return out

    def report_columns(self, settings: AceSettings) -> dict[str, Any]:
        # What its reflector reads of an outcome: the shared feedback setting's column.
        return {"learning_feedback": settings.feedback}

    def label(self, settings: AceSettings) -> str:
        return f"ace rounds={settings.max_rounds}"

    def descriptors(self, settings: AceSettings) -> dict[str, str]:
        # Named by the method: its settings never read as another method's (`k`).
        return {
            f"ace.{k}": "null" if v is None else str(v)
            for k, v in settings.model_dump(mode="json").items()
        }
