"""AMD as a `MemoryMethod`: what the orchestrator may know of it, behind the protocol.

`AmdMethod` reads memory built from the teacher's collection; `AmdStudentMemory` is the
same method fed by the student's own successful zero-shot runs (paper table 2). Their
kinds ("amd", "student_memory") are the config names, so configs and keys stay.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from distillery.workers.envs.base import TOOL_CALLS
from distillery.workers.memory.amd.records import COLLECTIONS, MEMORY_TYPES, STORE_PREFIX
from distillery.workers.memory.amd.settings import RetrievalConfig
from distillery.workers.memory.config import BuilderConfig, MemoryConfig
from distillery.workers.memory.entries import CollectionSpec
from distillery.workers.memory.feedback import SHARED_KEY as FEEDBACK_KEY
from distillery.workers.memory.method import BankPlanner, BaseMemoryMethod

if TYPE_CHECKING:
    from distillery.orchestrator.stages.stage import StageKey
    from distillery.workers.agents.loop import MemoryHooks
    from distillery.workers.envs.base import Task
    from distillery.workers.memory.bank import BuiltBank
    from distillery.workers.trajectories import EpisodeRecord


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "+".join(str(v) for v in value)
    return "null" if value is None else str(value)


class AmdMethod(BaseMemoryMethod):
    """Workflow, Subtask and Function memory from the teacher's trajectories."""

    kind: ClassVar[str] = "amd"
    # Its bank is built from the episodes' executed calls (memory/applicability.py).
    reads: ClassVar[frozenset[str]] = frozenset({TOOL_CALLS})
    settings_model: ClassVar[type[RetrievalConfig]] = RetrievalConfig
    # The builders carry their own explicit version (amd.bank.BUILDER_VERSION).
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Where its rendering starts a block (hooks.py): inert in built text (memory/bounds.py).
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"\[Workflow\]",
        r"\[Subtask\]",
        r"\[Function memory\]",
        r"\[memory truncated\]",
    )

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> RetrievalConfig:
        chosen = tuple(types) if types is not None else MEMORY_TYPES
        # The shared `feedback` is the outcome-learning methods' (memory/feedback.py):
        # AMD builds from the teacher's successes and reads no failure.
        shared = {k: v for k, v in defaults.items() if k != FEEDBACK_KEY}
        return RetrievalConfig.model_validate({**shared, **overrides, "types": chosen})

    def for_benchmark(self, settings: RetrievalConfig, benchmark: str) -> RetrievalConfig:
        """The settings as composed (the benchmark's values are composed into
        `memory.retrieval` by conf/memory/benchmark/<benchmark>.yaml: nothing is changed
        here), labelled with the benchmark's profile for the identity (its prompts);
        BFCL's: `settings` itself."""
        from distillery.workers.memory.amd.settings import profile_for

        return profile_for(benchmark).label(settings)

    def build_profile(self, benchmark: str) -> str | None:
        """The profile a build on `benchmark` uses (its prompts' digest), None for
        BFCL's (the build fingerprint already holds its prompts)."""
        from distillery.workers.memory.amd.settings import BFCL_NAME, profile_for

        profile = profile_for(benchmark)
        if profile.name == BFCL_NAME or not profile.builds_differently:
            return None
        return f"{profile.name}:{profile.version()}"

    def read_identity(self, settings: RetrievalConfig) -> dict[str, Any]:
        return settings.read_settings()

    def build_identity(self, memory: MemoryConfig) -> dict[str, Any]:
        # Who writes (model, student_memory_model) is the build's `builder_model`;
        # concurrency changes nothing in a bank.
        return memory.builder.model_dump(
            mode="json", exclude={"concurrency", "model", "student_memory_model"}
        )

    def build_fingerprint(self) -> str:
        from distillery.workers.memory.amd.bank import builder_code_version

        return builder_code_version()

    def bank_id(
        self, episodes: Sequence[EpisodeRecord], memory: MemoryConfig, writer: str, split: str
    ) -> str:
        from distillery.workers.memory.amd.bank import bank_id_for

        # Text renderings are a derived bank of their own (render stage), never built in.
        return bank_id_for(episodes, memory.builder, writer, split, False)

    async def build(
        self,
        episodes: Sequence[EpisodeRecord],
        tasks: Sequence[Task],
        builder: BuilderConfig,
        llm: Any,
        split: str,
    ) -> BuiltBank:
        from distillery.workers.memory.amd.bank import build_bank

        return await build_bank(episodes, tasks, builder, llm, split, False)

    async def render(self, bank: BuiltBank, builder: BuilderConfig, llm: Any) -> BuiltBank:
        """A copy of a built bank whose Subtask and Function entries have `.text`."""
        from distillery.workers.memory.amd.bank import amd_bank
        from distillery.workers.memory.amd.render import TextRenderer
        from distillery.workers.memory.building import BuildStats

        stats = BuildStats()
        renderer = TextRenderer(llm, stats=stats)
        entries = bank.collections
        segments = await renderer.render_segments(entries["st"], builder.concurrency)
        functions = await renderer.render_functions(entries["fn"], builder.concurrency)
        return amd_bank(entries["wf"], segments, functions, stats)

    def hook_texts(self) -> tuple[str, ...]:
        from distillery.workers.memory.amd import hooks

        return (hooks.DECOMPOSE_PROMPT, hooks.MEMORY_HEADER)

    def derived_stage(self, settings: RetrievalConfig) -> bool:
        # Text renderings of Subtask and Function entries are written by a render stage.
        return any(
            t in settings.types and settings.representation(t) == "text" for t in ("st", "fn")
        )

    def hooks(
        self,
        task: Task,
        search: Any,
        settings: RetrievalConfig,
        allows: Callable[[Any], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> MemoryHooks:
        from distillery.workers.memory.amd.hooks import AmdHooks
        from distillery.workers.memory.amd.lookup import SearchLookup
        from distillery.workers.memory.amd.settings import profile_for

        # The task's benchmark picks the profile (how its prompts and actions read);
        # the settings are read as composed (conf/memory/benchmark/<benchmark>.yaml).
        profile = profile_for(task.benchmark)
        # SearchLookup's hits are `isolation.Hit`s, which the hooks' `Hit` protocol reads
        # (lists are invariant, so the checker cannot see it through `list[Hit]`).
        lookup: Any = SearchLookup(search)
        return AmdHooks(
            task.task_id,
            lookup,
            profile.label(settings),  # values as composed; the label for its log
            allows=allows,
            ask_model=ask_model,
            user_turns=list(task.turns),
            profile=profile,
            hidden_query=task.metadata.get("user_instruction"),
            tools=task.tools,
        )

    def metrics(self, records: Sequence[EpisodeRecord]) -> dict[str, float]:
        """Isolation audit and injection counts from the episodes' retrieval logs."""
        totals = {"isolation_violations": 0.0, "isolation_checked": 0.0}
        injected = dict.fromkeys(MEMORY_TYPES, 0.0)
        fallbacks = 0.0
        for record in records:
            if not record.extra_json:
                continue
            log = json.loads(record.extra_json)
            totals["isolation_violations"] += log.get("isolation_violations", 0)
            totals["isolation_checked"] += log.get("isolation_checked", 0)
            fallbacks += bool(log.get("decomposition_fallback"))
            for event in log.get("retrievals", []):
                if event.get("allowed"):
                    injected[event["type"]] += 1
        return {
            **totals,
            **{f"injected_{t}": n for t, n in injected.items()},
            "decomposition_fallbacks": fallbacks,
        }

    def tags(self, settings: RetrievalConfig, embedder: str) -> dict[str, str]:
        out = {"memory_types": "+".join(settings.types)}
        if getattr(settings, "profile", None):  # AMD as on a benchmark of its own
            out["amd_profile"] = settings.profile  # type: ignore[attr-defined]
        if settings.query not in (None, "user_turn"):  # by what the agent is not given
            out["amd_query"] = settings.query
        if settings.thresholds_set_for != embedder:  # cosine scales differ between embedders
            out["thresholds_embedder"] = (
                f"set for {settings.thresholds_set_for}, run with {embedder}"
            )
        for t in settings.types:
            out[f"k_{t}"] = str(settings.k(t))
            out[f"delta_{t}"] = str(settings.threshold(t))
            out[f"repr_{t}"] = settings.representation(t)
        return out

    def report_columns(self, settings: RetrievalConfig) -> dict[str, Any]:
        # Every type's columns, None where unread: the report's cells tell WF from WF+ST.
        out: dict[str, Any] = {"memory_types": "+".join(settings.types)}
        for t in MEMORY_TYPES:
            used = t in settings.types
            out[f"k_{t}"] = settings.k(t) if used else None
            out[f"delta_{t}"] = settings.threshold(t) if used else None
            out[f"repr_{t}"] = settings.representation(t) if used else None
        return out

    def label(self, settings: RetrievalConfig) -> str:
        return "+".join(settings.types)

    def descriptors(self, settings: RetrievalConfig) -> dict[str, str]:
        # The profile is the benchmark's (a digest), not a knob of the point.
        return {
            k: _text(v)
            for k, v in settings.read_settings().items()
            if k not in ("types", "profile")
        }


class AmdStudentMemory(AmdMethod):
    """AMD built from the student's own successful zero-shot runs."""

    kind: ClassVar[str] = "student_memory"

    def bank_stage(self, planner: BankPlanner) -> StageKey | None:
        return planner.build(planner.student_runs())
