"""Injection: before the first turn, the top-k trajectories join the system prompt.

The query is the task's first user message (the student's task instruction, as
AMD's Workflow memory is queried). Every hit is re-checked against the run's
isolation protocol here too (the method's own audit, `isolation_violations`), and
what was retrieved, shown and cut is recorded in the episode's `extra_json`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.memory.audit import allowed_hits, audit_log
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.proactive import ProactiveOnly
from distillery.workers.memory.trajectory_rag.prompts import memory_block, render_trajectory
from distillery.workers.memory.trajectory_rag.records import COLLECTION
from distillery.workers.memory.trajectory_rag.settings import TrajectoryRagSettings


def _empty_log() -> dict[str, Any]:
    return audit_log(injected=0, injected_chars=0, truncated=0)


@dataclass
class TrajectoryRagHooks(ProactiveOnly):
    task_id: str
    search: Any  # memory_service.BankSearch
    settings: TrajectoryRagSettings
    allows: Callable[[MemorySource], bool]
    log: dict[str, Any] = field(default_factory=_empty_log)
    _block: str = ""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            s = self.settings
            (hits,) = await self.search.search(
                COLLECTION, [user_text], self.task_id, s.k, s.threshold
            )
            rendered = []
            for hit in allowed_hits(hits, self.allows, self.log):
                text, cut = render_trajectory(
                    hit.entry,
                    len(rendered) + 1,
                    hit.score,
                    s.max_chars,
                    s.max_observation_chars,
                    bool(s.answers),
                )
                rendered.append(text)
                self.log["truncated"] += cut
            self._block = memory_block(rendered, bool(s.answers))
            self.log["injected"] = len(rendered)
            self.log["injected_chars"] = len(self._block)
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt
