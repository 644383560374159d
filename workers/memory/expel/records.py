"""ExpeL's bank: the extracted insights (rules, with their importance counts) and the
teacher's successful trajectories (the in-context examples). Reflections are staged
during gathering only (Reflexion's entry type)."""

from __future__ import annotations

from dataclasses import dataclass

from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.reflexion.records import Reflection

INSIGHTS = "insights"
EXAMPLES = "examples"
REFLECTIONS = "reflections"
STORE_PREFIX = "expel"


@dataclass(frozen=True)
class Insight:
    memory_id: str  # insight:<n>, kept through EDITs
    source: MemorySource  # the task whose critique added it
    text: str
    importance: int  # the original's count: ADD 2, AGREE / EDIT +1, REMOVE -1 (or -3)
    rank: int  # its place in the final list (by importance, then age)

    @property
    def key_text(self) -> str:
        return self.text


@dataclass(frozen=True)
class Example:
    memory_id: str  # example:<task>
    source: MemorySource
    request: str  # the task's first user message: the retrieval key (task similarity)
    trajectory: str  # the successful play, as the episode transcript

    @property
    def key_text(self) -> str:
        return self.request


COLLECTIONS = (
    CollectionSpec(INSIGHTS, Insight),
    CollectionSpec(EXAMPLES, Example),
    CollectionSpec(REFLECTIONS, Reflection),
)
