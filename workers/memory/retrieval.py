"""Retrieval over a memory bank, with isolation that is exact and nearly free.

Design (numbers from `bench/retrieval.py`):

- A bank's vectors are loaded ONCE from Qdrant into an in-process float32 matrix per
  memory type (rows in memory_id order, so ties break deterministically). A query is
  one matrix product: exact cosine top-k in ~1-2 ms at 20 k entries, where
  qdrant-client's local mode needs ~15 ms unfiltered and ~80-190 ms with a `must_not`
  payload filter. Several queries of one task go through one matrix-matrix product.
- Isolation never costs a filtered query: the rows a policy excludes are known in
  advance (per source task: a dict task_id -> rows; per split: a cached boolean mask),
  so their scores are set to -inf before the top-k is taken. The result is exactly
  the top-k of the allowed entries.
- A grouped collection (`CollectionSpec.group_field`, e.g. records of one function) is
  split by the field's value once per bank (value -> its own entries and matrix); a
  query names its group and ranks only that group's entries. A group without entries
  answers without an embedding call.
- For banks too large to hold in process (or on request, `backend="qdrant"`), the
  same API queries Qdrant: top-(k + the most entries one source task owns) unfiltered,
  disallowed hits dropped in Python (exact: only those can be missing), and a filtered
  query only when that over-fetch did not yield k allowed hits.
- Whatever the backend, every hit is re-checked against the `Isolation` policy with
  the entry's own `MemorySource` before it is returned (a separate code path from the
  masks above). `stats()` counts `checked` hits and `violations` (disallowed hits the
  search produced; they are dropped, never returned). Violations must stay 0; a
  method's hooks audit the hits they inject once more.

`BankRetriever` is one bank: an index per collection of its method and one `search`
for all of them. What a method does on top (e.g. deduplicating hits across queries) is
the method's own, in its folder.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal, Protocol

import numpy as np

from distillery.workers.memory.entries import CollectionSpec, MemoryEntry, MemorySource
from distillery.workers.memory.isolation import Hit, Isolation
from distillery.workers.memory.qdrant_index import QdrantGroupedIndex, QdrantIndex
from distillery.workers.memory.store import MemoryStore, collection_name

Backend = Literal["auto", "memory", "qdrant"]
Combine = Literal["each", "mean"]  # one answer per query text, or one for their mean
MAX_IN_PROCESS = 1_000_000  # points per collection held in process under backend="auto"


def _top(
    scores: np.ndarray,
    k: int,
    threshold: float | None,
    accept: Callable[[int], bool] | None = None,
) -> list[int]:
    """Rows of the k best scores (>= threshold, finite), best first, ties by row."""
    n = scores.shape[0]
    if n == 0 or k < 1:
        return []
    if k == 1 and accept is None:  # the paper's setting: argmax (first max = lowest row)
        best = int(np.argmax(scores))
        score = scores[best]
        if score == -np.inf or (threshold is not None and score < threshold):
            return []
        return [best]
    if k < n:
        kth = np.partition(scores, n - k)[n - k]
        candidates = np.flatnonzero(scores >= kth)
    else:
        candidates = np.arange(n)
    while True:
        order = candidates[np.lexsort((candidates, -scores[candidates]))]
        rows: list[int] = []
        for i in order.tolist():
            score = scores[i]
            if score == -np.inf or (threshold is not None and score < threshold):
                return rows
            if accept is None or accept(i):
                rows.append(i)
                if len(rows) == k:
                    return rows
        if accept is None or len(candidates) == n:
            return rows
        candidates = np.arange(n)  # a caller's predicate rejected some: rank them all


class VectorIndex:
    """Exact cosine top-k over the entries of one collection, held in process."""

    def __init__(self, collection: str, entries: Sequence[MemoryEntry], vectors: Any) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        order = sorted(range(len(entries)), key=lambda i: entries[i].memory_id)
        self.collection = collection
        self.entries: list[MemoryEntry] = [entries[i] for i in order]
        if self.entries:
            if vectors.ndim != 2 or vectors.shape[0] != len(entries):
                raise ValueError(f"{len(entries)} entries but vectors of shape {vectors.shape}")
            self.matrix = np.ascontiguousarray(vectors[order])
        else:
            self.matrix = np.zeros((0, vectors.shape[-1] if vectors.ndim == 2 else 0), np.float32)
        by_task: dict[str, list[int]] = {}
        split_codes: dict[str, int] = {}
        codes = np.empty(len(self.entries), dtype=np.int32)
        for row, entry in enumerate(self.entries):
            by_task.setdefault(entry.source.task_id, []).append(row)
            codes[row] = split_codes.setdefault(entry.source.split, len(split_codes))
        self.rows_by_task = {t: np.array(r, dtype=np.int64) for t, r in by_task.items()}
        self.max_per_task = max((len(r) for r in by_task.values()), default=0)
        self._split_codes = codes
        self._split_ids = split_codes
        self._blocked: dict[tuple[str, ...], np.ndarray | None] = {}

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def blocked_by_split(self, isolation: Isolation) -> np.ndarray | None:
        """Boolean mask of rows whose split the policy refuses (None: none refused)."""
        if not isolation.filters_splits:
            return None
        key = isolation.allowed_splits
        if key not in self._blocked:
            allowed = [self._split_ids[s] for s in key if s in self._split_ids]
            mask = ~np.isin(self._split_codes, allowed)
            self._blocked[key] = mask if mask.any() else None
        return self._blocked[key]

    def _check_dim(self, queries: np.ndarray) -> None:
        if self.entries and queries.shape[-1] != self.dim:
            raise ValueError(
                f"the {self.collection} collection holds {self.dim}-d vectors but the query is "
                f"{queries.shape[-1]}-d: query with the embedder the bank was built with"
            )

    def _mask(self, scores: np.ndarray, isolation: Isolation, task_id: str | None) -> None:
        blocked = self.blocked_by_split(isolation)
        if blocked is not None:
            scores[..., blocked] = -np.inf
        if isolation.excludes_own_task:
            own = self.rows_by_task.get(isolation.task(task_id))  # type: ignore[arg-type]
            if own is not None:
                scores[..., own] = -np.inf

    def search_many(
        self,
        queries: np.ndarray,
        k: int,
        threshold: float | None,
        isolation: Isolation,
        task_id: str | None,
    ) -> list[list[Hit]]:
        """Top-k allowed hits per query row (one matrix product for all of them)."""
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if not self.entries:
            return [[] for _ in range(queries.shape[0])]
        self._check_dim(queries)
        # (n, d) @ (d, L) is the faster BLAS shape for a few queries; rows per query
        scores = np.ascontiguousarray((self.matrix @ queries.T).T)
        self._mask(scores, isolation, task_id)
        return [
            [Hit(self.entries[i], float(row[i]), self.collection) for i in _top(row, k, threshold)]
            for row in scores
        ]

    def search(
        self,
        query: np.ndarray,
        k: int,
        threshold: float | None = None,
        allowed: Callable[[MemorySource], bool] | None = None,
        *,
        isolation: Isolation | None = None,
        task_id: str | None = None,
    ) -> list[Hit]:
        """Top-k for one query; `isolation` masks rows, `allowed` is any predicate."""
        query = np.asarray(query, dtype=np.float32)
        if not self.entries:
            return []
        self._check_dim(query)
        scores = self.matrix @ query
        if isolation is not None:
            self._mask(scores, isolation, task_id)
        accept = None if allowed is None else (lambda i: allowed(self.entries[i].source))
        return [
            Hit(self.entries[i], float(scores[i]), self.collection)
            for i in _top(scores, k, threshold, accept)
        ]


class GroupedIndex:
    """A collection split by one field's value (`CollectionSpec.group_field`): each
    group is a `VectorIndex` of its own, and a query ranks only its group's entries."""

    def __init__(
        self, collection: str, group_field: str, entries: Sequence[MemoryEntry], vectors: Any
    ) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        rows: dict[str, list[int]] = {}
        for i, entry in enumerate(entries):
            rows.setdefault(getattr(entry, group_field), []).append(i)
        self.collection = collection
        self.group_field = group_field
        self.by_group = {
            group: VectorIndex(collection, [entries[i] for i in idx], vectors[idx])
            for group, idx in rows.items()
        }

    def __len__(self) -> int:
        return sum(len(index) for index in self.by_group.values())

    def groups(self) -> list[str]:
        return sorted(self.by_group)

    def has_group(self, group: str) -> bool:
        return group in self.by_group

    def search_many(
        self,
        queries: np.ndarray,
        k: int,
        threshold: float | None,
        isolation: Isolation,
        task_id: str | None,
        group: str | None = None,
    ) -> list[list[Hit]]:
        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        index = self.by_group.get(group) if group is not None else None
        if index is None:
            return [[] for _ in range(queries.shape[0])]
        return index.search_many(queries, k, threshold, isolation, task_id)


Index = VectorIndex | GroupedIndex | QdrantIndex


class Embedder(Protocol):
    def embed(self, texts: list[str]) -> np.ndarray: ...


@dataclass
class _Stats:
    queries: dict[str, int]
    hits: int = 0
    checked: int = 0
    violations: int = 0


def index_for(spec: CollectionSpec, entries: Sequence[MemoryEntry], vectors: Any) -> Index:
    """The in-process index of one collection."""
    if spec.group_field:
        return GroupedIndex(spec.name, spec.group_field, entries, vectors)
    return VectorIndex(spec.name, entries, vectors)


class BankRetriever:
    """Retrieval over one bank: an index per collection of its method, one `search`.

    Every hit is re-checked against the isolation policy (`_gate`) and counted per
    collection, whatever the index did; `stats()` proves a run's isolation.
    """

    def __init__(
        self,
        embedder: Embedder,
        isolation: Isolation | None,
        specs: Sequence[CollectionSpec],
        indexes: Mapping[str, Index],
    ) -> None:
        self.embedder = embedder
        self.isolation = isolation or Isolation()
        self.specs = {s.name: s for s in specs}
        unknown = set(indexes) - set(self.specs)
        if unknown:
            raise ValueError(f"indexes of unknown collections {sorted(unknown)}")
        # A collection without stored entries retrieves nothing.
        self.indexes: dict[str, Index] = {
            name: indexes[name] if name in indexes else index_for(spec, [], np.zeros((0, 1)))
            for name, spec in self.specs.items()
        }
        self._stats = _Stats(queries=dict.fromkeys(self.specs, 0))
        self._lock = threading.Lock()

    # -- construction -------------------------------------------------------------

    @classmethod
    def from_entries(
        cls,
        embedder: Embedder,
        isolation: Isolation | None,
        specs: Sequence[CollectionSpec],
        entries: Mapping[str, tuple[Sequence[MemoryEntry], Any]],
    ) -> BankRetriever:
        """In-process indexes from (entries, vectors) per collection name."""
        by_name = {s.name: s for s in specs}
        indexes = {name: index_for(by_name[name], *ev) for name, ev in entries.items()}
        return cls(embedder, isolation, specs, indexes)

    @classmethod
    def from_store(
        cls,
        store: MemoryStore,
        bank_id: str,
        specs: Sequence[CollectionSpec],
        embedder: Embedder,
        isolation: Isolation | None = None,
        backend: Backend = "auto",
        *,
        prefix: str,
    ) -> BankRetriever:
        """The collections of one bank (by its content hash) under a method's prefix.

        backend: "memory" loads the vectors once into process (fastest, exact),
        "qdrant" queries the store each time, "auto" loads unless a collection holds
        more than MAX_IN_PROCESS points. A missing collection retrieves nothing.
        """
        if backend not in ("auto", "memory", "qdrant"):
            raise ValueError(f"unknown retrieval backend {backend!r}")
        indexes: dict[str, Index] = {}
        for spec in specs:
            name = collection_name(bank_id, spec.name, prefix)
            if not store.client.collection_exists(name):
                continue
            use_qdrant = backend == "qdrant" or (
                backend == "auto" and store.count(name) > MAX_IN_PROCESS
            )
            if use_qdrant:
                qdrant = QdrantGroupedIndex if spec.group_field else QdrantIndex
                indexes[spec.name] = qdrant(store, name, spec)
            else:
                indexes[spec.name] = index_for(
                    spec, *store.load_with_vectors(name, spec.entry_type)
                )
        return cls(embedder, isolation, specs, indexes)

    def with_isolation(self, isolation: Isolation) -> BankRetriever:
        """The same loaded bank under another policy (fresh stats; nothing reloaded)."""
        return type(self)(self.embedder, isolation, list(self.specs.values()), self.indexes)

    # -- queries ------------------------------------------------------------------

    def search(
        self,
        collection: str,
        queries: Sequence[str],
        task_id: str | None = None,
        k: int = 1,
        threshold: float | None = None,
        group: str | None = None,
        combine: Combine = "each",
    ) -> list[list[Hit]]:
        """Top-k allowed hits (cosine >= threshold) per query text, best first.

        A grouped collection ranks only the entries of `group`; a group (or a
        collection) without entries answers without embedding the queries.
        `combine="mean"`: the query texts are one query whose score per entry is the
        mean of their cosines (one list of hits; e.g. similarity averaged over a
        request's keywords). With unit vectors that mean is the dot product with the
        mean query vector, so it is ranked exactly like one query.
        """
        if combine not in ("each", "mean"):
            raise ValueError(f"combine must be 'each' or 'mean', not {combine!r}")
        if collection not in self.indexes:
            raise KeyError(f"no collection {collection!r}; the bank has {sorted(self.indexes)}")
        spec = self.specs[collection]
        if spec.group_field and group is None:
            raise ValueError(f"{collection} is grouped by {spec.group_field}: name the group")
        task = self.isolation.task(task_id)
        index = self.indexes[collection]
        queries = list(queries)
        empty = len(index) == 0 or (
            isinstance(index, GroupedIndex | QdrantGroupedIndex)
            and (group is None or not index.has_group(group))
        )
        answers = 1 if combine == "mean" and queries else len(queries)
        if not queries or empty:
            per_query: list[list[Hit]] = [[] for _ in range(answers)]
        else:
            vectors = np.asarray(self.embedder.embed(queries), dtype=np.float32)
            scale = 1.0
            if combine == "mean":
                mean = vectors.mean(axis=0)
                scale = float(np.linalg.norm(mean))
                # The unit mean vector (what a cosine index expects) ranks as the mean;
                # its scores (and the threshold) scale by the mean vector's length.
                vectors = (mean / scale if scale > 0 else mean)[None, :]
                if threshold is not None and scale > 0:
                    threshold = threshold / scale
            if combine == "mean" and scale == 0:
                per_query = [[]]
            elif isinstance(index, GroupedIndex | QdrantGroupedIndex):
                per_query = index.search_many(vectors, k, threshold, self.isolation, task, group)
            else:
                per_query = index.search_many(vectors, k, threshold, self.isolation, task)
            if scale != 1.0:
                per_query = [
                    [replace(h, score=h.score * scale) for h in hits] for hits in per_query
                ]
        return self._gate(collection, per_query, task, answers)

    def _gate(
        self, collection: str, per_query: list[list[Hit]], task: str | None, queries: int
    ) -> list[list[Hit]]:
        """Re-check every hit's provenance; count and drop the disallowed."""
        kept = [
            [h for h in hits if self.isolation.allows(h.entry.source, task)] for hits in per_query
        ]
        checked = sum(len(h) for h in per_query)
        allowed = sum(len(h) for h in kept)
        with self._lock:
            self._stats.queries[collection] += queries
            self._stats.checked += checked
            self._stats.violations += checked - allowed
            self._stats.hits += allowed
        return kept

    # -- introspection ------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        with self._lock:
            s = self._stats
            # Qdrant backend only; counted per index (shared by `with_isolation` copies)
            fallbacks = sum(getattr(i, "fallbacks", 0) for i in self.indexes.values())
            return {
                "protocol": self.isolation.protocol,
                "queries": dict(s.queries),
                "hits": s.hits,
                "checked": s.checked,
                "violations": s.violations,
                "filtered_fallbacks": fallbacks,
            }

    def sizes(self) -> dict[str, int]:
        return {name: len(index) for name, index in self.indexes.items()}
