"""AMD's lookup over one bank: Workflow, Subtask and Function retrieval on the generic
indexes of `memory.retrieval` (see its docstring for the design), every hit re-checked
against the isolation policy (`_gate`) and counted per memory type."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from distillery.workers.memory.amd.records import (
    MEMORY_TYPES,
    FunctionRecord,
    MemoryEntry,
    MemoryType,
)
from distillery.workers.memory.embedding import Embedder
from distillery.workers.memory.retrieval import (
    MAX_IN_PROCESS,
    Backend,
    FunctionIndex,
    Hit,
    Isolation,
    QdrantFunctionIndex,
    QdrantIndex,
    TypeIndex,
)
from distillery.workers.memory.store import MemoryStore, collection_name

SubtaskDedup = Literal["memory_id", "label"]


@dataclass
class _Stats:
    queries: dict[str, int] = field(default_factory=lambda: dict.fromkeys(MEMORY_TYPES, 0))
    hits: int = 0
    checked: int = 0
    violations: int = 0


class MemoryRetriever:
    """Workflow, Subtask and Function retrieval over one bank per memory type."""

    def __init__(
        self,
        embedder: Embedder,
        isolation: Isolation | None = None,
        *,
        workflows: TypeIndex | QdrantIndex | None = None,
        segments: TypeIndex | QdrantIndex | None = None,
        functions: FunctionIndex | QdrantFunctionIndex | None = None,
    ) -> None:
        self.embedder = embedder
        self.isolation = isolation or Isolation()
        self.workflows = workflows if workflows is not None else TypeIndex("wf", [], [])
        self.segments = segments if segments is not None else TypeIndex("st", [], [])
        self.function_index = functions if functions is not None else FunctionIndex([], [])
        self._stats = _Stats()
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------

    @classmethod
    def from_entries(
        cls,
        embedder: Embedder,
        isolation: Isolation | None = None,
        *,
        wf: tuple[Sequence[MemoryEntry], Any] | None = None,
        st: tuple[Sequence[MemoryEntry], Any] | None = None,
        fn: tuple[Sequence[FunctionRecord], Any] | None = None,
    ) -> MemoryRetriever:
        """In-process indexes from (entries, vectors) per type."""
        return cls(
            embedder,
            isolation,
            workflows=TypeIndex("wf", *wf) if wf else None,
            segments=TypeIndex("st", *st) if st else None,
            functions=FunctionIndex(*fn) if fn else None,
        )

    @classmethod
    def from_collections(
        cls,
        store: MemoryStore,
        collections: dict[MemoryType, str],
        embedder: Embedder,
        isolation: Isolation | None = None,
        backend: Backend = "auto",
    ) -> MemoryRetriever:
        """One collection per memory type (a missing type retrieves nothing).

        backend: "memory" loads the vectors once into process (fastest, exact),
        "qdrant" queries the store each time, "auto" loads unless a collection holds
        more than MAX_IN_PROCESS points.
        """
        if backend not in ("auto", "memory", "qdrant"):
            raise ValueError(f"unknown retrieval backend {backend!r}")
        indexes: dict[str, Any] = {}
        for memory_type, name in collections.items():
            if not store.client.collection_exists(name):
                continue
            use_qdrant = backend == "qdrant" or (
                backend == "auto" and store.count(name) > MAX_IN_PROCESS
            )
            if use_qdrant:
                index = QdrantIndex(store, name, memory_type)
                indexes[memory_type] = QdrantFunctionIndex(index) if memory_type == "fn" else index
            else:
                entries, vectors = store.load_with_vectors(name)
                indexes[memory_type] = (
                    FunctionIndex(entries, vectors)  # type: ignore[arg-type]
                    if memory_type == "fn"
                    else TypeIndex(memory_type, entries, vectors)
                )
        return cls(
            embedder,
            isolation,
            workflows=indexes.get("wf"),
            segments=indexes.get("st"),
            functions=indexes.get("fn"),
        )

    @classmethod
    def from_store(
        cls,
        store: MemoryStore,
        bank_id: str,
        embedder: Embedder,
        isolation: Isolation | None = None,
        backend: Backend = "auto",
        types: Sequence[MemoryType] = MEMORY_TYPES,
    ) -> MemoryRetriever:
        """The three collections of one bank (by its content hash)."""
        collections = {t: collection_name(bank_id, t) for t in types}
        return cls.from_collections(store, collections, embedder, isolation, backend)

    def with_isolation(self, isolation: Isolation) -> MemoryRetriever:
        """The same loaded bank under another policy (fresh stats; nothing reloaded)."""
        return MemoryRetriever(
            self.embedder,
            isolation,
            workflows=self.workflows,
            segments=self.segments,
            functions=self.function_index,
        )

    # -- queries ------------------------------------------------------------------

    def workflow(
        self, query: str, task_id: str | None = None, k: int = 1, threshold: float | None = None
    ) -> list[Hit]:
        """Top-k workflow insights for the task instruction (cosine >= threshold)."""
        task = self.isolation.task(task_id)
        vectors = self.embedder.embed([query])
        hits = self.workflows.search_many(vectors, k, threshold, self.isolation, task)[0]
        return self._gate("wf", hits, task)

    def subtasks(
        self,
        queries: list[str],
        task_id: str | None = None,
        k: int = 1,
        threshold: float | None = None,
        dedup: SubtaskDedup = "memory_id",
    ) -> list[Hit]:
        """Top-k segments per query, deduplicated across queries (first occurrence
        kept: query order, then score order). dedup="label" follows Algorithm 1."""
        task = self.isolation.task(task_id)
        if not queries:
            return []
        vectors = self.embedder.embed(list(queries))
        per_query = self.segments.search_many(vectors, k, threshold, self.isolation, task)
        seen: set[str] = set()
        hits = []
        for query_hits in per_query:
            for hit in query_hits:
                key = hit.entry.memory_id if dedup == "memory_id" else hit.entry.label  # type: ignore[union-attr]
                if key not in seen:
                    seen.add(key)
                    hits.append(hit)
        return self._gate("st", hits, task, queries=len(queries))

    def functions(
        self,
        function_name: str,
        instruction: str,
        task_id: str | None = None,
        k: int = 1,
        threshold: float | None = None,
    ) -> list[Hit]:
        """Records of exactly `function_name`, ranked by instruction similarity."""
        task = self.isolation.task(task_id)
        if isinstance(self.function_index, FunctionIndex) and (
            function_name not in self.function_index.by_name
        ):
            return self._gate("fn", [], task)  # nothing to rank: no embedding needed
        vectors = self.embedder.embed([instruction])
        hits = self.function_index.search(
            function_name, vectors, k, threshold, self.isolation, task
        )
        return self._gate("fn", hits, task)

    def _gate(self, memory_type: str, hits: list[Hit], task: str | None, queries: int = 1):
        """Re-check every hit's provenance; count and drop the disallowed."""
        kept = [h for h in hits if self.isolation.allows(h.entry.source, task)]
        with self._lock:
            self._stats.queries[memory_type] += queries
            self._stats.checked += len(hits)
            self._stats.violations += len(hits) - len(kept)
            self._stats.hits += len(kept)
        return kept

    # -- introspection ------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._lock:
            s = self._stats
            # Qdrant backend only; counted per index (shared by `with_isolation` copies)
            fallbacks = sum(
                getattr(i, "fallbacks", 0)
                for i in (self.workflows, self.segments, self.function_index)
            )
            return {
                "protocol": self.isolation.protocol,
                "queries": dict(s.queries),
                "hits": s.hits,
                "checked": s.checked,
                "violations": s.violations,
                "filtered_fallbacks": fallbacks,
            }

    def sizes(self) -> dict[str, int]:
        return {
            "wf": len(self.workflows),
            "st": len(self.segments),
            "fn": len(self.function_index),
        }


# The name the memory service and older callers use.
BankRetriever = MemoryRetriever
