"""What a play reads of ExpeL's memory, in its system prompt before the first turn:

- at evaluation (a bank): every insight, by importance (the original's rule list in
  full), then the successful trajectories of the `k` most similar training tasks by
  task similarity (each candidate of `k * buffer_retrieve_ratio` too long to show is
  skipped, as the original skips a few-shot over its token limit);
- during gathering (the teacher's re-plays of a training task, no bank yet): the
  reflections staged for that task (Reflexion's block).

Every hit is re-checked against the run's isolation protocol (`allowed_hits`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.memory.audit import allowed_hits, audit_log
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.expel import prompts
from distillery.workers.memory.expel.records import EXAMPLES, INSIGHTS
from distillery.workers.memory.expel.settings import ExpelSettings
from distillery.workers.memory.proactive import ProactiveOnly
from distillery.workers.memory.reflexion.prompts import memory_block as reflections_block
from distillery.workers.memory.reflexion.records import Reflection

EVERY = 100_000  # the whole insight list (ExpeL shows every rule)
REFLECTIONS_SHOWN = 3  # Reflexion's memory size (alfworld_trial.py `memory[-3:]`)


def _empty_log() -> dict[str, Any]:
    return audit_log(
        insights_shown=0, examples_shown=0, examples_too_long=0, reflections_shown=0,
        injected_chars=0,
    )  # fmt: skip


@dataclass
class ExpelHooks(ProactiveOnly):
    task_id: str
    search: Any  # memory_service.BankSearch
    settings: ExpelSettings
    allows: Callable[[MemorySource], bool]
    log: dict[str, Any] = field(default_factory=_empty_log)
    _block: str = ""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            blocks = [self._reflections()]
            if self.search.has_bank:
                blocks += [await self._insights(user_text), await self._examples(user_text)]
            self._block = "\n\n".join(b for b in blocks if b)
            self.log["injected_chars"] = len(self._block)
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt

    def _reflections(self) -> str:
        own = [
            e
            for e in self.search.staged
            if isinstance(e, Reflection) and e.source.task_id == self.task_id
        ][-REFLECTIONS_SHOWN:]
        self.log["reflections_shown"] = len(own)
        return reflections_block([(e.attempt, e.text) for e in own])

    async def _insights(self, user_text: str) -> str:
        if not self.settings.insights:
            return ""
        (hits,) = await self.search.search(INSIGHTS, [user_text], self.task_id, EVERY, None)
        kept = sorted((h.entry for h in allowed_hits(hits, self.allows, self.log)),
                      key=lambda e: e.rank)  # fmt: skip
        self.log["insights_shown"] = len(kept)
        return prompts.insights_block([e.text for e in kept])

    async def _examples(self, user_text: str) -> str:
        s = self.settings
        if s.k == 0:
            return ""
        (hits,) = await self.search.search(
            EXAMPLES, [user_text], self.task_id, s.k * s.buffer_retrieve_ratio, None
        )
        shown: list[str] = []
        for hit in allowed_hits(hits, self.allows, self.log):
            text = hit.entry.trajectory
            if len(text) > s.max_example_chars:
                self.log["examples_too_long"] += 1
                continue
            shown.append(text)
            if len(shown) == s.k:
                break
        self.log["examples_shown"] = len(shown)
        return prompts.examples_block(shown)
