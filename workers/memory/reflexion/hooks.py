"""A play's reflections in its system prompt: what the stage staged for this task (its
own earlier attempts' reflections, the last `memory_size`), nothing else. A first play
sees nothing: it is the zero-shot student's prompt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from distillery.workers.memory.proactive import ProactiveOnly
from distillery.workers.memory.reflexion.prompts import memory_block
from distillery.workers.memory.reflexion.records import Reflection
from distillery.workers.memory.reflexion.settings import ReflexionSettings


def _empty_log() -> dict[str, Any]:
    return {
        "attempt": 1,
        "reflections_staged": 0,
        "reflections_shown": 0,
        "reflection_fallbacks": 0,
        "reflection_task_mismatch": 0,
    }


@dataclass
class ReflexionHooks(ProactiveOnly):
    task_id: str
    search: Any  # memory_service.BankSearch: its `attempt` and `staged`
    settings: ReflexionSettings
    log: dict[str, Any] = field(default_factory=_empty_log)
    _block: str = ""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            staged = [e for e in self.search.staged if isinstance(e, Reflection)]
            # Reflections are the task's own: one of another task would be a leak.
            own = [e for e in staged if e.source.task_id == self.task_id]
            shown = own[-self.settings.memory_size :]
            self._block = memory_block([(e.attempt, e.text) for e in shown])
            self.log.update(
                attempt=int(self.search.attempt),
                reflections_staged=len(staged),
                reflections_shown=len(shown),
                reflection_fallbacks=sum(e.fallback for e in own),
                reflection_task_mismatch=len(staged) - len(own),
            )
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt
