"""AgentBrew's notes and AMD's memory read together by one student (kind
`agentbrew_amd`): beyond both papers, for `agentbrew_vs_amd` (both memories against
each alone, same students, same tests).

Its bank is the union of two banks planned as each method plans its own, so each is
shared with the points that read it alone: AMD's bank built from the teacher's
collection (`planner.build(..., kind="amd")`, with its render stage where the AMD
settings read text) and AgentBrew's brew (`planner.stage("brew", ...)`); a `combine`
stage (`CombineStage`, this module) copies both into one bank under this method's
prefix (no model is called; the entries are embedded again). Its hooks are both
methods' hooks in turn: AMD's blocks in the system prompt, the notes' block before them,
AMD's function hints after failing calls.

Settings: `retrieval: {amd: {...}, agentbrew: {...}}` (each validated by its method: AMD
takes the shared `memory.retrieval` defaults and the entry's `types`).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from distillery.orchestrator.stages.stage import BankStage, CostRow
from distillery.workers.memory.agentbrew.notes import COLLECTIONS as NOTE_COLLECTIONS
from distillery.workers.memory.agentbrew.notes import DELIMITERS
from distillery.workers.memory.agentbrew.settings import AgentBrewSettings
from distillery.workers.memory.amd.records import COLLECTIONS as AMD_COLLECTIONS
from distillery.workers.memory.amd.settings import RetrievalConfig
from distillery.workers.memory.entries import CollectionSpec
from distillery.workers.memory.method import BaseMemoryMethod

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep
    from distillery.orchestrator.stages.stage import StageKey
    from distillery.orchestrator.state.ledger import Ledger


class CombinedSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    amd: RetrievalConfig = RetrievalConfig()
    agentbrew: AgentBrewSettings = AgentBrewSettings()


def _amd() -> Any:
    from distillery.workers.memory.registry import memory_method

    return memory_method("amd")


def _agentbrew() -> Any:
    from distillery.workers.memory.registry import memory_method

    return memory_method("agentbrew")


class AgentBrewAmd(BaseMemoryMethod):
    kind: ClassVar[str] = "agentbrew_amd"
    settings_model: ClassVar[type[CombinedSettings]] = CombinedSettings
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = (*AMD_COLLECTIONS, *NOTE_COLLECTIONS)
    store_prefix: ClassVar[str] = "agentbrewamd"
    # AMD's part is built from executed calls: the tool-use benchmarks only.
    reads: ClassVar[frozenset[str]] = frozenset({"tool_calls"})
    memory_delimiters: ClassVar[tuple[str, ...]] = (
        r"\[Workflow\]",
        r"\[Subtask\]",
        r"\[Function memory\]",
        r"\[memory truncated\]",
        *DELIMITERS,
    )

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> CombinedSettings:
        given = dict(overrides)
        amd = _amd().settings(defaults, given.pop("amd", {}) or {}, types)
        notes = AgentBrewSettings.model_validate(given.pop("agentbrew", {}) or {})
        return CombinedSettings.model_validate({**given, "amd": amd, "agentbrew": notes})

    def for_benchmark(self, settings: CombinedSettings, benchmark: str) -> CombinedSettings:
        return settings.model_copy(update={"amd": _amd().for_benchmark(settings.amd, benchmark)})

    def bank_stage(self, planner: Any) -> Any:
        settings = planner.read_settings
        amd = getattr(settings, "amd", None)
        notes = getattr(settings, "agentbrew", None)
        amd_bank = planner.build(planner.teacher_collection(), kind="amd", settings=amd)
        brew = planner.stage("brew", memory_kind="agentbrew", settings=notes)
        return planner.stage("combine", parts=(brew, amd_bank), memory_kind=self.kind)

    def read_identity(self, settings: CombinedSettings) -> dict[str, Any]:
        return {
            "amd": _amd().read_identity(settings.amd),
            "agentbrew": _agentbrew().read_identity(settings.agentbrew),
        }

    def hook_texts(self) -> tuple[str, ...]:
        return (*_amd().hook_texts(), *_agentbrew().hook_texts())

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: CombinedSettings,
        allows: Callable[[Any], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> BothHooks:
        return BothHooks(
            _amd().hooks(task, search, settings.amd, allows, ask_model),
            _agentbrew().hooks(task, search, settings.agentbrew, allows, ask_model),
        )

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out = _amd().metrics(records)  # its counters, the audit summed over both
        notes = [
            replace(r, extra_json=json.dumps(json.loads(r.extra_json or "{}").get("notes", {})))
            for r in records
        ]
        for name, value in _agentbrew().metrics(notes).items():
            if not name.startswith("isolation_"):
                out[name] = value
        return out

    def tags(self, settings: CombinedSettings, embedder: str) -> dict[str, str]:
        amd = _amd().tags(settings.amd, embedder)
        return {
            **_agentbrew().tags(settings.agentbrew, embedder),
            **amd,
            "memory_types": f"{amd.get('memory_types', '')}+notes",
        }

    def report_columns(self, settings: CombinedSettings) -> dict[str, Any]:
        return {
            **_amd().report_columns(settings.amd),
            **_agentbrew().report_columns(settings.agentbrew),
        }

    def label(self, settings: CombinedSettings) -> str:
        return f"{_amd().label(settings.amd)} + {_agentbrew().label(settings.agentbrew)}"

    def descriptors(self, settings: CombinedSettings) -> dict[str, str]:
        amd = {f"amd.{k}": v for k, v in _amd().descriptors(settings.amd).items()}
        notes = _agentbrew().descriptors(settings.agentbrew)
        return {**amd, **{f"agentbrew.{k}": v for k, v in notes.items()}}


@dataclass
class BothHooks:
    """AMD's hooks, then the notes' (their blocks stacked; every optional hook AMD has
    is AMD's)."""

    amd: Any
    notes: Any

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        prompt = await self.amd.before_turn(turn_index, user_text, system_prompt)
        return await self.notes.before_turn(turn_index, user_text, prompt)

    async def after_step(self, turn_index: int, user_text: str, observations: list) -> list:
        observations = await self.amd.after_step(turn_index, user_text, observations)
        return await self.notes.after_step(turn_index, user_text, observations)

    def model_usage(self) -> tuple[int, Any]:
        return self.amd.model_usage()  # the notes' hooks ask no model

    def record(self) -> dict[str, Any]:
        amd, notes = self.amd.record(), self.notes.record()
        return {
            **amd,
            "notes": notes,
            "shown": notes.get("shown", []),
            "isolation_checked": amd.get("isolation_checked", 0)
            + notes.get("isolation_checked", 0),
            "isolation_violations": amd.get("isolation_violations", 0)
            + notes.get("isolation_violations", 0),
        }


@dataclass(frozen=True, kw_only=True)
class CombineStage(BankStage):
    """One bank holding the entries of its `parts`' banks (their collections under the
    composite method's prefix): no model, the entries embedded again."""

    kind: ClassVar[str] = "combine"
    code_version: ClassVar[str] = "1"

    parts: tuple[StageKey, ...]
    memory_kind: str

    def builders(self) -> str:
        return f"combine-{self.code_version}"

    def cost_rows(self, ledger: Ledger, needs: set[str]) -> list[CostRow]:
        output = ledger.output(self.key)
        chars = int(output.counts.get("embedded_chars", 0)) if output else 0
        return [CostRow(self.role, "none", embed_tokens=chars // 4)]

    def run(self, sweep: Sweep, prefix: str) -> bool:
        return sweep.memory.ensure(self, prefix, lambda: self._combine(sweep))

    def _combine(self, sweep: Sweep) -> Any:
        from distillery.orchestrator.stages.stage import digest_of
        from distillery.workers.memory.bank import BuiltBank
        from distillery.workers.memory.registry import memory_method

        method = memory_method(self.memory_kind)
        ids = [sweep.memory.bank_of(part) for part in self.parts]
        bank_id = digest_of({"parts": ids, "stage": self.key.digest})
        reused = sweep.memory.reused(bank_id)
        if reused is not None:
            return reused
        collections: dict[str, list[Any]] = {spec.name: [] for spec in method.collections}
        for part in ids:
            bank: BuiltBank = sweep.memory.call("load_bank", part)
            for name, entries in bank.collections.items():
                collections[name].extend(entries)
        counts = {f"{name}.combined": len(items) for name, items in collections.items()}
        combined = BuiltBank(method.store_prefix, method.collections, collections, counts)
        return sweep.memory.written(bank_id, combined)

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> CombineStage:
        parts = tuple(inputs["parts"])
        cfg = planner.cfg
        identity = {
            "parts": [f"{p.kind}:{p.digest}" for p in parts],
            "memory_kind": inputs["memory_kind"],
            "embedder": cfg.memory.embedder.model_dump(mode="json", include={"kind", "model"}),
        }
        node = cls(
            identity=identity,
            upstream=parts,
            label=f"combine {' + '.join(str(p) for p in parts)}",
            model=None,
            parts=parts,
            memory_kind=inputs["memory_kind"],
        )
        planner.add(node)
        return node
