"""The seam between the orchestrator and a memory method.

A memory method (AMD is one, in `memory/amd/`) owns everything method-specific: which
stage its bank comes from (it asks the planner: `bank_stage`), its settings model, what
of them enters a stage's identity, its code version and prompt texts, building its
bank, the episode hooks that inject memory, and how its points are described. The
orchestrator only ever talks to this protocol, looked up by a method config's `kind`
in `memory.registry`.

`MemoryMethod` is the protocol: every member is part of it (the registry checks the
list derived from it, `MEMORY_METHOD_MEMBERS`), and callers call each member
directly. `BaseMemoryMethod` gives a default for every member a simple method does not
need: a method subclasses it and writes its `kind`, `settings_model`, `code_version`,
`hooks` and, when it has a bank, `collections`, `store_prefix` and `build`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar, cast, runtime_checkable

from pydantic import BaseModel

from distillery.workers.memory.entries import CollectionSpec

if TYPE_CHECKING:
    from distillery.orchestrator.stages.stage import StageKey
    from distillery.workers.agents.loop import MemoryHooks
    from distillery.workers.envs.base import Task
    from distillery.workers.memory.bank import BuiltBank
    from distillery.workers.memory.config import BuilderConfig, EmbedderConfig, MemoryConfig
    from distillery.workers.trajectories import EpisodeRecord


class BankPlanner(Protocol):
    """What a method's `bank_stage` may ask the planner for: the stage its bank comes
    from, planned (and shared with every other point that asks the same) on the
    point's memory split. Each returns the stage's key."""

    def teacher_collection(self) -> StageKey:
        """The teacher's collect stage, playing the memory split."""
        ...

    def student_runs(self) -> StageKey:
        """The student's own zero-shot stage, playing the memory split."""
        ...

    def build(self, source: StageKey, kind: str | None = None, settings: Any = None) -> StageKey:
        """The method's bank built from `source`'s episodes (a collect or zero-shot
        stage above; written by `memory.builder.model`, or by
        `memory.builder.student_memory_model` when the student played them), plus its
        derived (render) stage where the read settings ask for one. `kind` and
        `settings`: the bank another registered method builds, read with those
        settings (a composite memory's part); by default the point's own method's."""
        ...

    @property
    def read_settings(self) -> Any:
        """The point's method's validated read settings (None when only probed)."""
        ...

    def stage(self, kind: str, **inputs: Any) -> StageKey:
        """A stage of a registered stage kind (`distillery.stage_kinds`), planned by
        its node type from `inputs` (e.g. AgentBrew's `brew`)."""
        ...


@runtime_checkable
class MemoryMethod(Protocol):
    """One memory method. Instances are stateless; the registry hands out one each."""

    kind: str  # the config's `kind`, e.g. "amd"
    settings_model: type[BaseModel]  # validated read settings (method_catalog.*.retrieval)
    code_version: str  # explicit: bump when what the method builds or reads changes
    # Its banks' collections (`memory.entries.CollectionSpec`: name, entry dataclass,
    # group field) and the first part of their Qdrant names (`<prefix>_<name>_<bank16>`):
    # the store, retrieval and memory service read a method's banks through these only.
    collections: tuple[CollectionSpec, ...]
    store_prefix: str
    # What its bank is built from, of what a benchmark's episodes hold
    # (`memory/applicability.py`, e.g. `envs.base.TOOL_CALLS`); empty: any episode.
    reads: frozenset[str]

    def bank_stage(self, planner: BankPlanner) -> StageKey | None:
        """The stage whose bank the method reads, asked of the planner (the teacher's
        collection built, the student's runs built, or a stage of the method's own
        kind); None: its memory needs no bank (no collect or build stage is planned,
        its hooks get no bank to search)."""
        ...

    def evaluation_stage(self, planner: BankPlanner, read: Any) -> StageKey | None:
        """The stage whose episodes score the method's points, where it is not the
        ordinary evaluate stage (None): a stage of its own kind, e.g. Reflexion's
        test-time re-plays (`planner.stage("reflexion", read=read)`); `read` is the
        point's `stages.MemoryRead` (method, bank, isolation, settings)."""
        ...

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> BaseModel:
        """The read settings of one method config: the shared `memory.retrieval`
        defaults, the method's own overrides and its `types` (None: the method's
        default). Raises pydantic's ValidationError (locations are the setting names)."""
        ...

    def for_benchmark(self, settings: Any, benchmark: str) -> Any:
        """The read settings as read on `benchmark` (a method that reads differently
        by benchmark, AMD on AppWorld); `settings` itself for most."""
        ...

    def read_identity(self, settings: Any) -> dict[str, Any]:
        """What of `settings` decides an evaluate stage's episodes (its identity)."""
        ...

    def prompt_framing(self, settings: Any) -> str | None:
        """The framing its hooks ask of a benchmark's own opening prompt (their
        `prompt_framing`, e.g. the AMD authors' AppWorld ports), None for none: the
        benchmark's texts of that framing are part of its evaluate stages' identity."""
        ...

    def build_identity(self, memory: MemoryConfig) -> dict[str, Any]:
        """The builder knobs that decide a bank's content (build stage identity)."""
        ...

    def build_fingerprint(self) -> str:
        """Version and prompt texts of the builders: a changed text is a new bank."""
        ...

    def build_profile(self, benchmark: str) -> str | None:
        """What the build on `benchmark` does differently (its prompts' version), added
        to the build stage's identity; None where it builds as everywhere."""
        ...

    def bank_id(
        self, episodes: Sequence[EpisodeRecord], memory: MemoryConfig, writer: str, split: str
    ) -> str:
        """Content hash of everything that decides a built bank's entries (`writer`:
        the builder model's name or "none"): equal banks are reused from the store."""
        ...

    async def build(
        self,
        episodes: Sequence[EpisodeRecord],
        tasks: Sequence[Task],
        builder: BuilderConfig,
        llm: Any,
        split: str,
    ) -> BuiltBank:
        """One bank from the source stage's episodes (`llm`: the builder model, None
        for deterministic entries): a `memory.bank.BuiltBank` of `collections` under
        `store_prefix`, which the memory service embeds (each entry's `key_text`) and
        stores."""
        ...

    async def render(self, bank: BuiltBank, builder: BuilderConfig, llm: Any) -> BuiltBank:
        """The derived bank of a derived stage (see `derived_stage`)."""
        ...

    def hook_texts(self) -> tuple[str, ...]:
        """Texts the episode hooks show the agent (part of episode stage keys)."""
        ...

    def derived_stage(self, settings: Any) -> bool:
        """Whether the read bank is derived from the built one by a second stage
        (AMD: text renderings of Subtask and Function entries)."""
        ...

    def hooks(
        self,
        task: Task,
        search: Any,
        settings: Any,
        allows: Callable[[Any], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> MemoryHooks:
        """The hooks through which the method acts inside one episode (the only way).
        `search`: the bank's generic search (`memory_service.BankSearch`: awaitable
        `search(collection, queries, task_id, k, threshold, group=None)`, isolation
        applied and every hit re-checked; its `attempt` and `staged` say which play of
        the task this is and what an outcome-driven stage staged for it; a method
        without a bank gets one whose `has_bank` is False)."""
        ...

    def metrics(self, records: Sequence[EpisodeRecord]) -> dict[str, float]:
        """A point's memory metrics from its episode records (`extra_json`: what the
        method's hooks recorded), e.g. an isolation audit."""
        ...

    def tags(self, settings: Any, embedder: str) -> dict[str, str]:
        """MLflow tags of an evaluation point (what researchers filter runs by);
        `embedder`: the embedding model the sweep runs with."""
        ...

    def report_columns(self, settings: Any) -> dict[str, Any]:
        """Columns of the sweep's points table: every one is a descriptor of the
        report's cells; `memory_types` sets the shared column of that name. What else
        the report does with a column follows from its values (`orchestrator/
        sweep_tables.py`): integers (entries read per query) get a success-vs-k panel,
        texts (how entries are shown) the representation table; `<setting>_<collection>`
        for one of `collections` is labelled by that collection."""
        ...

    def label(self, settings: Any) -> str:
        """A short reminder of the settings for stage labels, e.g. `wf+st+fn`."""
        ...

    def descriptors(self, settings: Any) -> dict[str, str]:
        """Settings as `key -> text` for MLflow params, point names and report columns."""
        ...


def protocol_members(protocol: type) -> tuple[str, ...]:
    """The public members a protocol declares (attributes, then methods), in order."""
    names = [n for n in vars(protocol).get("__annotations__", {}) if not n.startswith("_")]
    names += [
        n
        for n, v in vars(protocol).items()
        if callable(v) and not n.startswith("_") and n not in names
    ]
    return tuple(names)


# What the registry checks a method has: every member of the protocol.
MEMORY_METHOD_MEMBERS = protocol_members(MemoryMethod)


class BaseMemoryMethod:
    """Defaults for every member a simple method does not need (see the protocol for
    what each means). A subclass sets `kind`, `settings_model`, `code_version` and
    `hooks`; a method with a bank also `collections`, `store_prefix` and `build`
    (and `build_identity` / `build_fingerprint` where its builders have knobs or
    prompts). By default the bank is built from the teacher's collection."""

    kind: ClassVar[str]
    settings_model: ClassVar[type[BaseModel]]
    code_version: ClassVar[str]
    collections: ClassVar[tuple[CollectionSpec, ...]] = ()
    store_prefix: ClassVar[str] = ""
    reads: ClassVar[frozenset[str]] = frozenset()
    # Optional (read by `memory/applicability.py`): what its bank is built from either
    # way, at least one of which the benchmark's episodes must hold; empty: no such need.
    reads_one_of: ClassVar[frozenset[str]] = frozenset()

    def bank_stage(self, planner: BankPlanner) -> StageKey | None:
        return planner.build(planner.teacher_collection())

    def evaluation_stage(self, planner: BankPlanner, read: Any) -> StageKey | None:
        return None  # the ordinary evaluate stage

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> BaseModel:
        # The shared `memory.retrieval` defaults are AMD's: a method reads its own only.
        return own_settings(self.settings_model, overrides, types)

    def for_benchmark(self, settings: Any, benchmark: str) -> Any:
        return settings

    def prompt_framing(self, settings: Any) -> str | None:
        return None

    def read_identity(self, settings: Any) -> dict[str, Any]:
        # What the student is shown: the settings and every text of the hooks.
        return {
            **settings.model_dump(mode="json"),
            "texts": list(self.hook_texts()),
            "code_version": self.code_version,
        }

    def build_identity(self, memory: MemoryConfig) -> dict[str, Any]:
        return {}

    def build_fingerprint(self) -> str:
        return f"{self.kind}-{self.code_version}"

    def build_profile(self, benchmark: str) -> str | None:
        return None

    def bank_id(
        self, episodes: Sequence[EpisodeRecord], memory: MemoryConfig, writer: str, split: str
    ) -> str:
        # The episodes it is built from (each a finished, kept file: the same episodes
        # have the same ids), what builds them and who writes.
        payload = {
            "kind": self.kind,
            "builders": self.build_fingerprint(),
            "builder": self.build_identity(memory),
            "writer": writer,
            "split": split,
            "episodes": sorted((e.task_id, e.episode_id, e.success) for e in episodes),
        }
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    async def build(
        self,
        episodes: Sequence[EpisodeRecord],
        tasks: Sequence[Task],
        builder: BuilderConfig,
        llm: Any,
        split: str,
    ) -> BuiltBank:
        raise NotImplementedError(f"memory method {self.kind!r} builds no bank")

    async def render(self, bank: BuiltBank, builder: BuilderConfig, llm: Any) -> BuiltBank:
        raise NotImplementedError(f"memory method {self.kind!r} has no derived stage")

    def hook_texts(self) -> tuple[str, ...]:
        return ()

    def derived_stage(self, settings: Any) -> bool:
        return False

    def metrics(self, records: Sequence[EpisodeRecord]) -> dict[str, float]:
        return summed_counters(records, ("isolation_checked", "isolation_violations"))

    def tags(self, settings: Any, embedder: str) -> dict[str, str]:
        return {}

    def embedder(self, settings: Any) -> EmbedderConfig | None:
        """The embedder of this method's bank and queries when it has its own (e.g.
        ExpeL's original's); None: the sweep's `memory.embedder`."""
        return None

    def report_columns(self, settings: Any) -> dict[str, Any]:
        return {}

    def label(self, settings: Any) -> str:
        return self.kind

    def descriptors(self, settings: Any) -> dict[str, str]:
        return {
            k: "null" if v is None else str(v) for k, v in settings.model_dump(mode="json").items()
        }


class StudentRunsMethod(BaseMemoryMethod):
    """A method whose bank is built from the student's own zero-shot runs."""

    def bank_stage(self, planner: BankPlanner) -> StageKey | None:
        return planner.build(planner.student_runs())


class NoBankMethod(BaseMemoryMethod):
    """A method whose memory needs no bank (e.g. a test-time protocol): no collect or
    build stage, its hooks get no search."""

    def bank_stage(self, planner: BankPlanner) -> StageKey | None:
        return None


SettingsT = TypeVar("SettingsT", bound=BaseModel)


def own_settings(
    model: type[SettingsT], overrides: Mapping[str, Any], types: Sequence[str] | None
) -> SettingsT:
    """The read settings of a method that ignores the shared `memory.retrieval` defaults
    (they are AMD's): its own overrides, validated by its own model. A `types` list is
    handed to the model too, so a method without memory types refuses it as it refuses
    any unknown setting (ValidationError at `types`)."""
    given = dict(overrides) if types is None else {**overrides, "types": list(types)}
    return model.model_validate(given)


def summed_counters(records: Sequence[EpisodeRecord], names: Sequence[str]) -> dict[str, float]:
    """Each of `names` summed over the episodes' logs (`extra_json`; absent counts 0)."""
    out = dict.fromkeys(names, 0.0)
    for record in records:
        log = json.loads(record.extra_json or "{}")
        for name in names:
            out[name] += log.get(name, 0)
    return out


def own_embedder(method: Any, settings: Any) -> EmbedderConfig | None:
    """A method's own embedder (`BaseMemoryMethod.embedder`; a plugin without the hook:
    None, the sweep's)."""
    hook = getattr(method, "embedder", None)
    own = hook(settings) if callable(hook) else None
    return cast("EmbedderConfig | None", own)
