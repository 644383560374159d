"""A reflection: the student's words on one failed play, staged for the task's own
re-plays only (never committed: nothing crosses to another task)."""

from __future__ import annotations

from dataclasses import dataclass

from distillery.workers.memory.entries import CollectionSpec, MemorySource

COLLECTION = "reflections"
STORE_PREFIX = "reflexion"


@dataclass(frozen=True)
class Reflection:
    memory_id: str  # reflection:<task>:<attempt it reflects on>
    source: MemorySource
    request: str  # the task's first user message
    text: str
    attempt: int  # the play it reflects on
    fallback: bool = False  # the reflector gave no usable answer twice: a fixed text

    @property
    def key_text(self) -> str:
        return self.request


COLLECTIONS = (CollectionSpec(COLLECTION, Reflection),)
