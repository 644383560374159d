"""`toy_recall`: a memory method of another package, for tests.

Each successful teacher episode becomes one entry (`Answer`: the task's first request
and the calls that solved it) in one collection; an evaluated task retrieves the top-1
answer by request similarity under the run's isolation protocol and reads it in its
system prompt behind `MARKER`. Registered only through the `distillery.memory_methods`
entry point of the toy plugin's distribution; it imports only distillery's public
memory seams (`workers.memory.api`: the base class, whose defaults it keeps where they
fit, the isolation audit, the proactive hooks) and owns its settings and defaults (the
shared `memory.retrieval` defaults are another method's).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from distillery.workers.memory.api import (
    BaseMemoryMethod,
    BuiltBank,
    CollectionSpec,
    MemorySource,
    ProactiveOnly,
    allowed_hits,
    audit_log,
    summed_counters,
)

MARKER = "[Toy recall]"
HEADER = f"{MARKER} How a previous request was solved (for guidance only):"
COLLECTION = "answers"


@dataclass(frozen=True)
class Answer:
    """One solved request: what was asked and the calls that solved it."""

    memory_id: str
    source: MemorySource
    request: str  # the task's first user message: the retrieval key
    calls: tuple[str, ...]  # every call of the episode, in order

    @property
    def key_text(self) -> str:
        return self.request


COLLECTIONS = (CollectionSpec(COLLECTION, Answer),)


class RecallSettings(BaseModel):
    """The method's own read settings, with its own defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(1, ge=1, le=5)
    threshold: float | None = Field(None, ge=-1, le=1)


@dataclass
class RecallHooks(ProactiveOnly):
    """EpisodeHooks: before the first turn, the best answer joins the system prompt
    (the hits re-checked by distillery's isolation audit, `allowed_hits`)."""

    task_id: str
    search: Any  # the bank's generic search (memory_service.BankSearch)
    settings: RecallSettings
    allows: Callable[[MemorySource], bool]
    log: dict[str, Any] = field(default_factory=audit_log)
    _block: str = ""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            (hits,) = await self.search.search(
                COLLECTION, [user_text], self.task_id, self.settings.k, self.settings.threshold
            )
            kept = [hit.entry for hit in allowed_hits(hits, self.allows, self.log)]
            self.log["recalled"] = [e.memory_id for e in kept]
            self._block = "\n".join(
                [HEADER, *(f"Request: {e.request}\nCalls: {'; '.join(e.calls)}" for e in kept)]
                if kept
                else []
            )
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt


class ToyRecall(BaseMemoryMethod):
    """Built from the teacher's collection (the base's default `bank_stage`)."""

    kind = "toy_recall"
    settings_model = RecallSettings
    code_version = "1"
    collections = COLLECTIONS
    store_prefix = "toyrecall"

    def read_identity(self, settings: RecallSettings) -> dict[str, Any]:
        # What the student is shown enters the evaluate stage's key with the settings.
        return {**settings.model_dump(mode="json"), "header": HEADER}

    def build_identity(self, memory: Any) -> dict[str, Any]:
        return {"entries": "first request and calls"}

    def build_fingerprint(self) -> str:
        return f"toy-recall-{self.code_version}"

    def bank_id(self, episodes: Sequence[Any], memory: Any, writer: str, split: str) -> str:
        solved = sorted((e.task_id, e.agent, _calls(e)) for e in episodes if e.success is True)
        payload = {"kind": self.kind, "code": self.code_version, "split": split, "solved": solved}
        return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()

    async def build(
        self, episodes: Sequence[Any], tasks: Sequence[Any], builder: Any, llm: Any, split: str
    ) -> BuiltBank:
        requests = {t.task_id: t.turns[0] for t in tasks}
        answers = [
            Answer(
                f"answer:{e.episode_id}",
                MemorySource(e.task_id, e.group_id, split, e.agent, e.episode_id),
                requests[e.task_id],
                _calls(e),
            )
            for e in episodes
            if e.success is True
        ]
        return BuiltBank(
            self.store_prefix, COLLECTIONS, {COLLECTION: answers}, {"answers.built": len(answers)}
        )

    def hook_texts(self) -> tuple[str, ...]:
        return (HEADER,)

    def hooks(
        self,
        task: Any,
        search: Any,
        settings: RecallSettings,
        allows: Callable[[MemorySource], bool],
        ask_model: Callable[[list[dict[str, Any]]], Awaitable[Any]],
    ) -> RecallHooks:
        return RecallHooks(task.task_id, search, settings, allows)

    def metrics(self, records: Sequence[Any]) -> dict[str, float]:
        out = summed_counters(records, ("isolation_checked", "isolation_violations"))
        recalled = sum(len(json.loads(r.extra_json or "{}").get("recalled", [])) for r in records)
        return {"recalled": float(recalled), **out}

    def tags(self, settings: RecallSettings, embedder: str) -> dict[str, str]:
        return {"recall_k": str(settings.k)}

    def report_columns(self, settings: RecallSettings) -> dict[str, Any]:
        return {"recall_k": settings.k}

    def label(self, settings: RecallSettings) -> str:
        return f"recall k={settings.k}"

    def descriptors(self, settings: RecallSettings) -> dict[str, str]:
        return {"recall_k": str(settings.k), "recall_threshold": str(settings.threshold)}


def _calls(episode: Any) -> tuple[str, ...]:
    return tuple(c.call for s in episode.steps for c in s.calls if not c.rejected)
