"""ACE's bank: the playbook's bullets (an id, a section, the content and the reflector's
helpful/harmful counts). Reflections are staged for a task's own re-plays only."""

from __future__ import annotations

from dataclasses import dataclass

from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.reflexion.records import Reflection

BULLETS = "bullets"
REFLECTIONS = "reflections"
STORE_PREFIX = "ace"


@dataclass(frozen=True)
class Bullet:
    memory_id: str  # the bullet's id, e.g. "misc-00003": kept through count updates
    source: MemorySource  # the task whose curation added it (initial bullets: none)
    section: str  # normalized: "strategies_and_insights"
    content: str
    helpful: int = 0
    harmful: int = 0
    order: int = 0  # when it was added (the playbook shows a section's bullets so)

    @property
    def key_text(self) -> str:
        return self.content


COLLECTIONS = (CollectionSpec(BULLETS, Bullet), CollectionSpec(REFLECTIONS, Reflection))
