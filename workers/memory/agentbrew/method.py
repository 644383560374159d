"""AgentBrew (../shared/papers/agentbrew-paper.txt) as a `MemoryMethod` (kind `agentbrew`).

Brew (a stage of its own kind, `brew`: `stage.py`, `program.py`): on the memory split,
the student plays each task in order reading the notes brewed so far; a failure calls
the teacher for one student-aware note, certified only by the student's recovery in a
re-play (the Ralph loop), curated into skill-scoped, append-only memory. Serve
(`serve.py`): the frozen memory, no teacher; the routed scope's notes reranked by Eq. 3,
top k in the system prompt, one rollout; no note, the vanilla student.

It learns from the student's own trajectories and outcomes, so it applies to every
benchmark, the single-reply math and code ones included (`reads` is empty).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, ClassVar

from distillery.workers.memory.agentbrew import prompts
from distillery.workers.memory.agentbrew.notes import COLLECTIONS, DELIMITERS, STORE_PREFIX
from distillery.workers.memory.agentbrew.serve import NoteHooks
from distillery.workers.memory.agentbrew.settings import AgentBrewSettings
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.feedback import with_shared_feedback
from distillery.workers.memory.method import BaseMemoryMethod, own_settings, summed_counters


class AgentBrewMethod(BaseMemoryMethod):
    kind: ClassVar[str] = "agentbrew"
    settings_model: ClassVar[type[AgentBrewSettings]] = AgentBrewSettings
    # Bump when what the method brews or shows changes.
    code_version: ClassVar[str] = "1"
    collections: ClassVar[tuple[CollectionSpec, ...]] = COLLECTIONS
    store_prefix: ClassVar[str] = STORE_PREFIX
    # Its bank is brewed from the student's own plays and their outcomes, whatever an
    # episode holds: any benchmark (memory/applicability.py).
    reads: ClassVar[frozenset[str]] = frozenset()
    memory_delimiters: ClassVar[tuple[str, ...]] = DELIMITERS

    def bank_stage(self, planner: Any) -> Any:
        return planner.stage("brew", memory_kind=self.kind)

    def settings(
        self, defaults: Mapping[str, Any], overrides: Mapping[str, Any], types: Sequence[str] | None
    ) -> AgentBrewSettings:
        given = with_shared_feedback(defaults, overrides, "brew", "feedback")
        return own_settings(AgentBrewSettings, given, types)

    def read_identity(self, settings: AgentBrewSettings) -> dict[str, Any]:
        # What the student is shown: the serving fields and the block's texts (the brew
        # settings are its brew stage's identity, upstream of the evaluation).
        return {
            **settings.serving(),
            "texts": list(prompts.HOOK_TEXTS),
            "code_version": self.code_version,
        }

    def hook_texts(self) -> tuple[str, ...]:
        return prompts.HOOK_TEXTS

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: AgentBrewSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> NoteHooks:
        return NoteHooks(task, search, settings, allows)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out = summed_counters(
            records,
            ("isolation_checked", "isolation_violations", "vanilla", "notes_shown", "dampened"),
        )
        routes: dict[str, float] = {"explicit": 0.0, "similarity": 0.0, "actions": 0.0,
                                    "none": 0.0}  # fmt: skip
        distinct: set[str] = set()
        for record in records:
            log = json.loads(record.extra_json or "{}")
            route = log.get("route", "none")
            routes[route] = routes.get(route, 0.0) + 1
            distinct.update(log.get("shown") or [])
        out["vanilla_fallback"] = out.pop("vanilla")
        out.update({f"route_{name}": count for name, count in routes.items()})
        out["distinct_notes_shown"] = float(len(distinct))
        out["notes_shown_mean"] = out["notes_shown"] / len(records) if records else 0.0
        return out

    def tags(self, settings: AgentBrewSettings, embedder: str) -> dict[str, str]:
        brew = settings.brew
        return {
            "agentbrew_k": str(settings.k),
            "agentbrew_suppression": str(settings.suppression).lower(),
            "agentbrew_r_max": str(brew.r_max),
            "agentbrew_unvalidated": brew.unvalidated,
            "agentbrew_student_aware": str(brew.student_aware).lower(),
            "agentbrew_brew_student": brew.student,
            "agentbrew_brew_teacher": brew.teacher,
            "memory_types": "notes",
        }

    def report_columns(self, settings: AgentBrewSettings) -> dict[str, Any]:
        # `k_notes`: notes read per task (an integer: a k sweep gets its success-vs-k
        # panel); the ablations are told apart by their catalog names (cells are).
        return {"k_notes": settings.k, "learning_feedback": settings.brew.feedback}

    def label(self, settings: AgentBrewSettings) -> str:
        brew = settings.brew
        parts = [f"notes k={settings.k}"]
        if not settings.suppression:
            parts.append("no suppression")
        if brew.r_max == 0:
            parts.append("no ralph")
        if not brew.student_aware:
            parts.append("not student-aware")
        if brew.student != "student":
            parts.append(f"brewed by {brew.student}")
        if brew.teacher != "teacher":
            parts.append(f"taught by {brew.teacher}")
        return ", ".join(parts)

    def descriptors(self, settings: AgentBrewSettings) -> dict[str, str]:
        out = {}
        for key, value in settings.model_dump(mode="json").items():
            if key == "brew":
                for inner, item in value.items():
                    if inner == "read":
                        for name, read in item.items():
                            out[f"brew.read.{name}"] = "null" if read is None else str(read)
                    else:
                        out[f"brew.{inner}"] = "null" if item is None else str(item)
            else:
                out[key] = "null" if value is None else str(value)
        return out
