"""Retrieval over one memory bank, with isolation that is exact and nearly free.

A bank is loaded once from Qdrant into an in-process matrix; a query is one matrix
product (exact cosine top-k). Isolation is applied by walking the ranked hits and
skipping disallowed ones, so a filtered query never costs more than an unfiltered one
(a qdrant-client local-mode `must_not` filter costs ~80 ms at 10 k points). The caller
re-checks every hit again (see `method.AmdHooks`), so a bug here shows up as counted
violations, never as silent leakage.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from distillery.workers.memory.embedding import Embedder
from distillery.workers.memory.records import FunctionRecord, MemoryEntry, MemorySource
from distillery.workers.memory.store import MemoryStore


@dataclass(frozen=True)
class Hit:
    entry: MemoryEntry
    score: float
    memory_type: str


@dataclass(frozen=True)
class Isolation:
    """Which memory a task may see under a protocol."""

    protocol: str  # main | self_excluded | cross_split
    allowed_splits: tuple[str, ...] = ()  # cross_split: the memory split's label

    def allows(self, source: MemorySource, task_id: str) -> bool:
        if self.protocol == "main":
            return True
        if source.task_id == task_id:
            return False
        if self.protocol == "cross_split":
            return source.split in self.allowed_splits
        return True


class TypeIndex:
    """Exact cosine search over the entries of one memory type."""

    def __init__(self, memory_type: str, entries: list[MemoryEntry], vectors: np.ndarray) -> None:
        self.memory_type = memory_type
        self.entries = entries
        self.matrix = np.ascontiguousarray(vectors, dtype=np.float32)

    def __len__(self) -> int:
        return len(self.entries)

    def search(
        self,
        query: np.ndarray,
        k: int,
        threshold: float | None,
        allowed: Callable[[MemorySource], bool],
    ) -> list[Hit]:
        if not self.entries:
            return []
        scores = self.matrix @ query
        # Over-fetch a little: isolation only ever removes a task's own few entries.
        window = min(len(scores), k + 16)
        while True:
            top = np.argpartition(-scores, window - 1)[:window]
            top = top[np.argsort(-scores[top], kind="stable")]
            hits = []
            for i in top:
                score = float(scores[i])
                if threshold is not None and score < threshold:
                    break
                entry = self.entries[i]
                if allowed(entry.source):
                    hits.append(Hit(entry, score, self.memory_type))
                    if len(hits) == k:
                        return hits
            exhausted = window == len(scores) or (
                threshold is not None and float(scores[top[-1]]) < threshold
            )
            if exhausted:
                return hits
            window = min(len(scores), window * 4)


class BankRetriever:
    """Workflow, Subtask and Function retrieval over one loaded bank."""

    def __init__(
        self,
        embedder: Embedder,
        workflows: TypeIndex,
        segments: TypeIndex,
        functions: list[FunctionRecord],
        function_vectors: np.ndarray,
        isolation: Isolation,
    ) -> None:
        self.embedder = embedder
        self.workflows = workflows
        self.segments = segments
        self.isolation = isolation
        self._functions: dict[str, TypeIndex] = {}
        by_name: dict[str, list[int]] = {}
        for i, record in enumerate(functions):
            by_name.setdefault(record.function, []).append(i)
        for name, rows in by_name.items():
            self._functions[name] = TypeIndex(
                "fn", [functions[i] for i in rows], function_vectors[rows]
            )

    @classmethod
    def from_store(
        cls, store: MemoryStore, bank_id: str, embedder: Embedder, isolation: Isolation
    ) -> BankRetriever:
        """Load a bank's three collections from the store into an in-process index."""
        wf = store.load(bank_id, "wf")
        st = store.load(bank_id, "st")
        fn_entries, fn_vectors = store.load(bank_id, "fn")
        return cls(
            embedder,
            TypeIndex("wf", *wf),
            TypeIndex("st", *st),
            fn_entries,  # type: ignore[arg-type]
            fn_vectors,
            isolation,
        )

    def _allowed(self, task_id: str) -> Callable[[MemorySource], bool]:
        return lambda source: self.isolation.allows(source, task_id)

    def workflow(self, query: str, task_id: str, k: int, threshold: float | None) -> list[Hit]:
        vector = self.embedder.embed([query])[0]
        return self.workflows.search(vector, k, threshold, self._allowed(task_id))

    def subtasks(
        self, queries: list[str], task_id: str, k: int, threshold: float | None
    ) -> list[Hit]:
        """Top-k per query, deduplicated across queries, in query order."""
        if not queries:
            return []
        vectors = self.embedder.embed(queries)
        seen: set[str] = set()
        hits = []
        for vector in vectors:
            for hit in self.segments.search(vector, k, threshold, self._allowed(task_id)):
                if hit.entry.memory_id not in seen:
                    seen.add(hit.entry.memory_id)
                    hits.append(hit)
        return hits

    def functions(
        self, function: str, instruction: str, task_id: str, k: int, threshold: float | None
    ) -> list[Hit]:
        """Records of exactly `function`, ranked by instruction similarity."""
        index = self._functions.get(function)
        if index is None:
            return []
        vector = self.embedder.embed([instruction])[0]
        return index.search(vector, k, threshold, self._allowed(task_id))

    def sizes(self) -> dict[str, int]:
        return {
            "wf": len(self.workflows),
            "st": len(self.segments),
            "fn": sum(len(i) for i in self._functions.values()),
        }
