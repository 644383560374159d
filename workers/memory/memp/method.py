"""MemP as a `MemoryMethod` (kind `memp`): procedural memory from teacher trajectories.

Build: one procedure per successful teacher trajectory (an abstract numbered script
and the keywords of its query from the builder LLM, validated, one retry, counted
deterministic fallback; plus the executed calls themselves), stored twice: keyed by the
task query and by query + keywords. Read, once before the first turn: by query
embedding (the original's "query" policy) or by keyword-averaged similarity (AveFact:
the student extracts the query's keywords; an entry's score is the mean cosine of the
keywords to it), top-k; the script, the trajectory or both are shown in the first user
message (the original's place) or the system prompt.

Build-only: the student is evaluated frozen, so the original's online Update
(vanilla/validation/reflect/discard after each task) never runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.envs.base import TOOL_CALLS
from distillery.workers.memory import repeats
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.memp import build, prompts
from distillery.workers.memory.memp.hooks import MempHooks
from distillery.workers.memory.memp.records import COLLECTIONS, STORE_PREFIX
from distillery.workers.memory.memp.settings import (
    PORT_DIFFERENCES,
    THRESHOLD_EMBEDDER,
    MempPortSettings,
    MempSettings,
)
from distillery.workers.memory.method import BaseMemoryMethod, own_settings
from distillery.workers.memory.port_context import CONTEXT_FIELDS, context_identity

_METRICS = (
    "isolation_checked",
    "isolation_violations",
    "injected",
    "keywords_fallback",
    "retrievals",
)


class MempMethod(BaseMemoryMethod):
    kind: ClassVar[str] = "memp"
    # Its bank is built from the episodes' executed calls (memory/applicability.py).
    reads: ClassVar[frozenset[str]] = frozenset({TOOL_CALLS})
    settings_model: ClassVar[type[MempSettings]] = MempSettings
    # Bump when what is built, stored or shown changes.
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts a block (hooks.py): inert in built text (memory/bounds.py).
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"\[Procedural memory\]",
        r"Similar request:",
        r"Procedure:",
        r"Executed calls:",
    )

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> MempSettings:
        return own_settings(MempSettings, overrides, types)  # no memory types of its own

    def read_identity(self, settings: MempSettings) -> dict[str, Any]:
        return {
            **settings.model_dump(mode="json"),
            "code": self.code_version,
            "texts": list(prompts.TEXTS),
        }

    def build_identity(self, memory: Any) -> dict[str, Any]:
        # The builder's own limits are in the fingerprint; AMD's builder knobs change
        # nothing here.
        return {"entries": "script + keywords + trajectory per successful trajectory"}

    def build_fingerprint(self) -> str:
        limits = (
            build.MIN_STEPS,
            build.MAX_STEPS,
            build.MAX_SCRIPT_CHARS,
            build.MIN_KEYWORDS,
            build.MAX_KEYWORDS,
            build.MAX_KEYWORD_CHARS,
            build.OBSERVATION_CHARS,
            build.TRAJECTORY_CHARS,
        )
        text = json.dumps([self.code_version, limits, prompts.SCRIPT_PROMPT, prompts.RETRY_PROMPT])
        return f"memp-{self.code_version}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    def bank_id(self, episodes: Sequence[Any], memory: Any, writer: str, split: str) -> str:
        return build.bank_content_id(episodes, self.build_fingerprint(), writer, split)

    async def build(
        self, episodes: Sequence[Any], tasks: Sequence[Any], builder: Any, llm: Any, split: str
    ) -> BuiltBank:
        procedures, stats = await build.build_procedures(
            episodes, tasks, llm, split, builder.concurrency
        )
        return build.memp_bank(procedures, stats, len(episodes))

    async def render(self, bank: BuiltBank, builder: Any, llm: Any) -> BuiltBank:
        return bank  # no derived stage

    def hook_texts(self) -> tuple[str, ...]:
        return prompts.TEXTS

    def derived_stage(self, settings: MempSettings) -> bool:
        return False

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: MempSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> MempHooks:
        return MempHooks(task.task_id, search, settings, allows, ask_model)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out: dict[str, float] = dict.fromkeys(_METRICS, 0.0)
        chars = 0.0
        for record in records:
            log = json.loads(record.extra_json or "{}")
            if log.get("retrieve") is None:
                continue
            out["retrievals"] += 1
            out["isolation_checked"] += log.get("isolation_checked", 0)
            out["isolation_violations"] += log.get("isolation_violations", 0)
            out["injected"] += log.get("injected", 0)
            out["keywords_fallback"] += bool(log.get("keywords_fallback"))
            chars += log.get("injected_chars", 0)
        out["injected_chars_mean"] = chars / len(records) if records else 0.0
        return out

    def tags(self, settings: MempSettings, embedder: str) -> dict[str, str]:
        out = {
            "memp_retrieve": settings.retrieve,
            "memp_k": str(settings.k),
            "memp_content": settings.content,
            "memp_placement": settings.placement,
        }
        if settings.threshold is not None and embedder != THRESHOLD_EMBEDDER:
            # The original's floor is a cosine of its own embedder.
            out["thresholds_embedder"] = f"set for {THRESHOLD_EMBEDDER}, run with {embedder}"
        return out

    def report_columns(self, settings: MempSettings) -> dict[str, Any]:
        # `k_procedure`: entries read per query (an integer: a success-vs-k panel);
        # `repr_procedure`: what an entry shows (a text: the representation table).
        return {"k_procedure": settings.k, "repr_procedure": settings.content}

    def label(self, settings: MempSettings) -> str:
        return f"memp {settings.retrieve} k={settings.k} {settings.content}"

    def descriptors(self, settings: MempSettings) -> dict[str, str]:
        return {
            f"memp_{k}": "null" if v is None else str(v) for k, v in settings.model_dump().items()
        }


class MempAmdPort(MempMethod):
    """MemP as the AMD authors ported it (kind `memp_amd`; taeilkim2465/
    agentic_memory_distillation, appworld/memp and toolsandbox/memp): the bank keeps the
    teacher's failed trajectories too, each procedure labelled with its verdict, and
    the student, shown the labels, reads by keywords, top-3, the script only (its
    settings' defaults, `MempPortSettings`). Its own bank (`memp_amd_*` collections):
    the original's builds and keys are untouched."""

    kind: ClassVar[str] = "memp_amd"
    settings_model: ClassVar[type[MempSettings]] = MempPortSettings
    code_version: ClassVar[str] = "1"
    store_prefix: ClassVar[str] = "memp_amd"

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> MempSettings:
        return own_settings(MempPortSettings, overrides, types)

    def read_identity(self, settings: MempSettings) -> dict[str, Any]:
        out = super().read_identity(settings)
        texts = [*out["texts"], *prompts.PORT_TEXTS]
        # The hints and a context choice enter only when set (the keys of the runs
        # before them stay).
        if out.pop("loop_hints", False):
            out["loop_hints"] = True
            texts += repeats.LOOP_HINT_TEXTS
        for key in CONTEXT_FIELDS:
            out.pop(key, None)
        return {**out, **context_identity(settings), "texts": texts}

    def build_identity(self, memory: Any) -> dict[str, Any]:
        return {"entries": "script + keywords + trajectory per scored trajectory, labelled"}

    def build_fingerprint(self) -> str:
        text = json.dumps([super().build_fingerprint(), prompts.FAILURE_SCRIPT_PROMPT])
        return f"memp-amd-{self.code_version}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"

    async def build(
        self, episodes: Sequence[Any], tasks: Sequence[Any], builder: Any, llm: Any, split: str
    ) -> BuiltBank:
        procedures, stats = await build.build_procedures(
            episodes, tasks, llm, split, builder.concurrency, failures=True
        )
        return build.memp_bank(procedures, stats, len(episodes), self.store_prefix)

    def hook_texts(self) -> tuple[str, ...]:
        return (*prompts.TEXTS, *prompts.PORT_TEXTS)

    def prompt_framing(self, settings: MempSettings) -> str | None:
        return "memp"  # its hooks label the procedures' verdicts (MempHooks.prompt_framing)

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: MempSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> MempHooks:
        hints = repeats.LoopHints() if getattr(settings, "loop_hints", False) else None
        return MempHooks(
            task.task_id, search, settings, allows, ask_model, show_outcome=True, loop_hints=hints
        )

    def tags(self, settings: MempSettings, embedder: str) -> dict[str, str]:
        differences = [*PORT_DIFFERENCES]
        if not getattr(settings, "loop_hints", False):
            differences.append("no_loop_hints")
        return {**super().tags(settings, embedder), "differences": ",".join(differences)}
