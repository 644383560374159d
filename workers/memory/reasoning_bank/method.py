"""ReasoningBank as a `MemoryMethod` (kind `reasoning_bank`).

Ouyang et al., 2025 (arXiv 2509.25140; code: google-research/reasoning-bank), adapted
to teacher->student transfer as the AMD paper describes its baseline: the bank is
built once from the teacher's collection (successful AND failed trajectories, judged
by the benchmark's checker), and the frozen student reads it (no online update).
Defaults are the original's (`settings.py`); the AMD authors' ports are the catalog
entries `reasoning_bank_amd_appworld` (top_k = 3, items withdrawn after the first step)
and `reasoning_bank_amd_toolsandbox` (top_k = 3).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.envs.base import TOOL_CALLS
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.method import BaseMemoryMethod, own_settings, summed_counters
from distillery.workers.memory.reasoning_bank import build, prompts
from distillery.workers.memory.reasoning_bank.hooks import ReasoningBankHooks
from distillery.workers.memory.reasoning_bank.records import COLLECTIONS, STORE_PREFIX
from distillery.workers.memory.reasoning_bank.settings import DIFFERENCES, ReasoningBankSettings

_METRICS = (
    "isolation_checked",
    "isolation_violations",
    "injected_records",
    "injected_items",
    "injected_failure_records",
)


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


class ReasoningBank(BaseMemoryMethod):
    kind: ClassVar[str] = "reasoning_bank"
    # Its bank is built from the episodes' executed calls (memory/applicability.py).
    reads: ClassVar[frozenset[str]] = frozenset({TOOL_CALLS})
    settings_model: ClassVar[type[ReasoningBankSettings]] = ReasoningBankSettings
    # Bump when what is read or shown changes (the builders have build.BUILDER_VERSION).
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts an item (prompts.py): inert in built text (memory/bounds.py).
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"#+ *Memory Item",
        r"#+ *(?:Title|Description|Content)\b",
    )

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> ReasoningBankSettings:
        return own_settings(ReasoningBankSettings, overrides, types)  # no memory types of its own

    def read_identity(self, settings: ReasoningBankSettings) -> dict[str, Any]:
        # What the student is shown enters its evaluate stage's key: the settings and
        # the injected text (the builders' prompts are the bank's, upstream). A setting
        # added later enters only when on, so existing keys stay.
        out = settings.model_dump(mode="json", exclude={"remove_after_first_step"})
        texts = [prompts.MEMORY_PREAMBLE]
        if settings.remove_after_first_step:
            out["remove_after_first_step"] = True
            texts.append(prompts.WITHDRAWN)
        return {**out, "texts": texts}

    def build_identity(self, memory: Any) -> dict[str, Any]:
        # Who writes is the build's builder model; no shared builder knob (concurrency,
        # AMD's segment limits) changes a record. The method's own constants do.
        return {"entries": "memory items per scored trajectory", **build.build_constants()}

    def build_fingerprint(self) -> str:
        return build.builder_fingerprint()

    def bank_id(self, episodes: Sequence[Any], memory: Any, writer: str, split: str) -> str:
        return build.bank_content_id(episodes, writer, split)

    async def build(
        self, episodes: Sequence[Any], tasks: Sequence[Any], builder: Any, llm: Any, split: str
    ) -> BuiltBank:
        builder_ = build.ReasoningBankBuilder(llm, split)
        records = await builder_.build_all(episodes, tasks, builder.concurrency)
        return build.built_bank(records, builder_.stats)

    async def render(self, bank: BuiltBank, builder: Any, llm: Any) -> BuiltBank:
        return bank  # no derived stage

    def hook_texts(self) -> tuple[str, ...]:
        return (prompts.MEMORY_PREAMBLE,)

    def derived_stage(self, settings: ReasoningBankSettings) -> bool:
        return False

    def prompt_framing(self, settings: ReasoningBankSettings) -> str | None:
        from distillery.workers.memory.reasoning_bank.hooks import ReasoningBankHooks

        return ReasoningBankHooks.prompt_framing

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: ReasoningBankSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> ReasoningBankHooks:
        return ReasoningBankHooks(task.task_id, search, settings, allows)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        return summed_counters(records, _METRICS)

    def tags(self, settings: ReasoningBankSettings, embedder: str) -> dict[str, str]:
        return {
            **self.descriptors(settings),
            "differences": ",".join(DIFFERENCES),
        }

    def report_columns(self, settings: ReasoningBankSettings) -> dict[str, Any]:
        # An integer: a sweep over top_k gets its success-vs-k panel.
        return {"rb_top_k": settings.top_k, "rb_threshold": settings.threshold}

    def label(self, settings: ReasoningBankSettings) -> str:
        return f"rb k={settings.top_k}"

    def descriptors(self, settings: ReasoningBankSettings) -> dict[str, str]:
        out = {"rb_top_k": str(settings.top_k), "rb_threshold": _text(settings.threshold)}
        if settings.remove_after_first_step:
            out["rb_remove_after_first_step"] = "true"
        return out
