"""Injection: before the first turn, the memory items of the top-k past tasks most
similar to the task query are appended to the system prompt, for the whole episode.

The query is the task's first user request (the original embeds the task's intent,
WebArena/run.py `cur_query`). The block goes after the benchmark's system prompt, as
the original appends its preamble and items to the system message
(WebArena/agents/legacy/agent.py). Every hit is re-checked against the run's isolation
protocol (the method's own audit, `isolation_violations`); what was retrieved and
shown is recorded in the episode's `extra_json`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from distillery.workers.memory.audit import allowed_hits, audit_log
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.proactive import ProactiveOnly
from distillery.workers.memory.reasoning_bank.prompts import WITHDRAWN, memory_block
from distillery.workers.memory.reasoning_bank.records import COLLECTION, MemoryItem
from distillery.workers.memory.reasoning_bank.settings import ReasoningBankSettings


def _empty_log() -> dict[str, Any]:
    return audit_log(injected_records=0, injected_items=0, injected_failure_records=0)


@dataclass
class ReasoningBankHooks(ProactiveOnly):
    task_id: str
    search: Any  # memory_service.BankSearch
    settings: ReasoningBankSettings
    allows: Callable[[MemorySource], bool]
    log: dict[str, Any] = field(default_factory=_empty_log)
    _block: str = ""
    # In a benchmark's own opening prompt (AppWorld's), the items are framed as the AMD
    # authors' ReasoningBank port frames them (workers/envs/appworld/framings.py).
    prompt_framing: ClassVar[str] = "reasoning_bank"

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            s = self.settings
            (hits,) = await self.search.search(
                COLLECTION, [user_text], self.task_id, s.top_k, s.threshold
            )
            items: list[MemoryItem] = []
            for hit in allowed_hits(
                hits, self.allows, self.log, lambda record: {"outcome": record.outcome}
            ):
                record = hit.entry
                items.extend(record.items)
                self.log["injected_records"] += 1
                self.log["injected_items"] += len(record.items)
                self.log["injected_failure_records"] += record.outcome == "failure"
            self._block = memory_block(items)
        return f"{system_prompt}\n\n{self._block}" if self._block else system_prompt

    async def system_prompt_after_step(
        self, turn_index: int, steps_done: int, system_prompt: str
    ) -> str | None:
        """The AMD authors' AppWorld port withdraws the items after the first step
        (`remove_after_first_step`): the prompt from then on says no past experiences."""
        if not (self.settings.remove_after_first_step and self._block and steps_done >= 1):
            return None
        self._block = ""
        self.log["removed_after_step"] = steps_done
        return f"{system_prompt}\n\n{WITHDRAWN}"
