"""Retrieval over a memory bank, with isolation that is exact and nearly free.

Design (numbers from `bench/retrieval.py`):

- A bank's vectors are loaded ONCE from Qdrant into an in-process float32 matrix per
  memory type (rows in memory_id order, so ties break deterministically). A query is
  one matrix product: exact cosine top-k in ~1-2 ms at 20 k entries, where
  qdrant-client's local mode needs ~15 ms unfiltered and ~80-190 ms with a `must_not`
  payload filter. Subtask queries of one task go through one matrix-matrix product.
- Isolation never costs a filtered query: the rows a policy excludes are known in
  advance (per source task: a dict task_id -> rows; per split: a cached boolean mask),
  so their scores are set to -inf before the top-k is taken. The result is exactly
  the top-k of the allowed entries.
- Function memory is grouped by exact function name once per bank (name -> its own
  records and matrix); a lookup ranks only that function's records by the cosine
  between the instruction and each record's stored instruction embedding.
- For banks too large to hold in process (or on request, `backend="qdrant"`), the
  same API queries Qdrant: top-(k + the most entries one source task owns) unfiltered,
  disallowed hits dropped in Python (exact: only those can be missing), and a filtered
  query only when that over-fetch did not yield k allowed hits.
- Whatever the backend, every hit is re-checked against the `Isolation` policy with
  the entry's own `MemorySource` before it is returned (a separate code path from the
  masks above). `stats()` counts `checked` hits and `violations` (disallowed hits the
  search produced; they are dropped, never returned). Violations must stay 0; the
  student side (`method.AmdHooks`) audits the hits it injects once more.

This module holds the indexes and the isolation policy; AMD's lookup over them (one
index per memory type, the `_gate` re-check and its stats) is `memory.amd.lookup`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from distillery.workers.memory.amd.records import (
    FunctionRecord,
    MemoryEntry,
    MemorySource,
)
from distillery.workers.memory.store import MemoryStore, entry_from_payload

PROTOCOLS = ("main", "self_excluded", "cross_split")
Backend = Literal["auto", "memory", "qdrant"]
MAX_IN_PROCESS = 1_000_000  # points per collection held in process under backend="auto"


@dataclass(frozen=True)
class Hit:
    entry: MemoryEntry
    score: float
    memory_type: str


@dataclass(frozen=True)
class Isolation:
    """Which memory the evaluated task may see.

    - main: everything (memory was built from the same tasks, as in the paper).
    - self_excluded: everything except the entries built from the evaluated task.
    - cross_split: only entries whose source split is in `allowed_splits` (the memory
      split), and never the evaluated task's own.

    Positional order is (protocol, allowed_splits, evaluated_task_id); a bank-level
    policy leaves `evaluated_task_id` None and each query names its task (or use
    `for_task`).
    """

    protocol: str = "main"
    allowed_splits: tuple[str, ...] = ()
    evaluated_task_id: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; use one of {PROTOCOLS}")
        if isinstance(self.allowed_splits, str):
            object.__setattr__(self, "allowed_splits", (self.allowed_splits,))
        else:
            object.__setattr__(self, "allowed_splits", tuple(self.allowed_splits))
        if self.protocol == "cross_split" and not self.allowed_splits:
            raise ValueError("cross_split isolation needs allowed_splits (the memory split)")

    @property
    def excludes_own_task(self) -> bool:
        return self.protocol != "main"

    @property
    def filters_splits(self) -> bool:
        return self.protocol == "cross_split"

    def for_task(self, task_id: str) -> Isolation:
        return replace(self, evaluated_task_id=task_id)

    def task(self, task_id: str | None = None) -> str | None:
        """The evaluated task: `task_id` if given, else the bound one."""
        task = task_id if task_id is not None else self.evaluated_task_id
        if task is None and self.excludes_own_task:
            raise ValueError(f"{self.protocol} isolation needs the evaluated task id")
        return task

    def allows(self, source: MemorySource, task_id: str | None = None) -> bool:
        if self.protocol == "main":
            return True
        if source.task_id == self.task(task_id):
            return False
        if self.protocol == "cross_split":
            return source.split in self.allowed_splits
        return True


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


class TypeIndex:
    """Exact cosine top-k over the entries of one memory type, held in process."""

    def __init__(self, memory_type: str, entries: Sequence[MemoryEntry], vectors: Any) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        order = sorted(range(len(entries)), key=lambda i: entries[i].memory_id)
        self.memory_type = memory_type
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
                f"the {self.memory_type} bank holds {self.dim}-d vectors but the query is "
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
            [Hit(self.entries[i], float(row[i]), self.memory_type) for i in _top(row, k, threshold)]
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
            Hit(self.entries[i], float(scores[i]), self.memory_type)
            for i in _top(scores, k, threshold, accept)
        ]


class FunctionIndex:
    """Function records grouped by exact function name: name -> TypeIndex."""

    def __init__(self, records: Sequence[FunctionRecord], vectors: Any) -> None:
        vectors = np.asarray(vectors, dtype=np.float32)
        rows: dict[str, list[int]] = {}
        for i, record in enumerate(records):
            rows.setdefault(record.function, []).append(i)
        self.by_name = {
            name: TypeIndex("fn", [records[i] for i in idx], vectors[idx])
            for name, idx in rows.items()
        }

    def __len__(self) -> int:
        return sum(len(index) for index in self.by_name.values())

    def names(self) -> list[str]:
        return sorted(self.by_name)

    def search(
        self,
        function: str,
        query: np.ndarray,
        k: int,
        threshold: float | None,
        isolation: Isolation,
        task_id: str | None,
    ) -> list[Hit]:
        index = self.by_name.get(function)
        if index is None:
            return []
        return index.search_many(query, k, threshold, isolation, task_id)[0]


class QdrantIndex:
    """The same searches as a Qdrant query (server mode, or banks too big to load).

    Over-fetches top-(k + max entries per source task) without a filter and drops
    disallowed hits in Python; only when that leaves fewer than k (and more may exist)
    is a filtered query sent. Function lookups always filter on the (indexed) name.
    """

    def __init__(
        self, store: MemoryStore, collection: str, memory_type: str, exact: bool = False
    ) -> None:
        self.client = store.client
        self.collection = collection
        self.memory_type = memory_type
        self.exact = exact
        self.size = store.count(collection)
        self.max_per_task = self._max_per_task()
        self.fallbacks = 0  # filtered queries sent

    def __len__(self) -> int:
        return self.size

    def _max_per_task(self) -> int:
        if self.size == 0:
            return 0
        try:
            facet = self.client.facet(self.collection, key="source_task_id", limit=1, exact=True)
            return int(facet.hits[0].count) if facet.hits else 0
        except Exception:  # a server without facets: count from the payloads
            counts: dict[str, int] = {}
            offset = None
            while True:
                points, offset = self.client.scroll(
                    self.collection, limit=4096, offset=offset, with_payload=["source_task_id"]
                )
                for p in points:
                    task = p.payload["source_task_id"]
                    counts[task] = counts.get(task, 0) + 1
                if offset is None:
                    return max(counts.values(), default=0)

    def _filter(self, function: str | None, isolation: Isolation | None, task: str | None):
        from qdrant_client import models

        must: list[Any] = []
        must_not: list[Any] = []
        if function is not None:
            must.append(
                models.FieldCondition(key="function", match=models.MatchValue(value=function))
            )
        if isolation is not None and isolation.filters_splits:
            must.append(
                models.FieldCondition(
                    key="split", match=models.MatchAny(any=list(isolation.allowed_splits))
                )
            )
        if isolation is not None and isolation.excludes_own_task and task is not None:
            must_not.append(
                models.FieldCondition(key="source_task_id", match=models.MatchValue(value=task))
            )
        if not must and not must_not:
            return None
        return models.Filter(must=must or None, must_not=must_not or None)

    def search_many(
        self,
        queries: np.ndarray,
        k: int,
        threshold: float | None,
        isolation: Isolation,
        task_id: str | None,
        function: str | None = None,
    ) -> list[list[Hit]]:
        from qdrant_client import models

        queries = np.atleast_2d(np.asarray(queries, dtype=np.float32))
        if self.size == 0:
            return [[] for _ in range(queries.shape[0])]
        task = isolation.task(task_id)
        limit = k + (self.max_per_task if isolation.excludes_own_task else 0)
        params = models.SearchParams(exact=self.exact)

        def keep(hit: Hit) -> bool:
            return threshold is None or hit.score >= threshold

        def request(query: np.ndarray, flt: Any, n: int) -> models.QueryRequest:
            return models.QueryRequest(
                query=query.tolist(),
                filter=flt,
                limit=n,
                # a hair lower, then `>= threshold` on the returned score in Python,
                # so the boundary is the same as the in-process backend's
                score_threshold=None if threshold is None else threshold - 1e-6,
                params=params,
                with_payload=True,
            )

        first = self.client.query_batch_points(
            self.collection,
            [request(q, self._filter(function, None, None), limit) for q in queries],
        )
        results = []
        for query, response in zip(queries, first, strict=True):
            hits = [self._hit(p) for p in response.points]
            allowed = [h for h in hits if keep(h) and isolation.allows(h.entry.source, task)][:k]
            if len(allowed) < k and len(response.points) == limit:
                self.fallbacks += 1
                flt = self._filter(function, isolation, task)
                (response,) = self.client.query_batch_points(
                    self.collection, [request(query, flt, k)]
                )
                allowed = [h for h in map(self._hit, response.points) if keep(h)]
            results.append(allowed)
        return results

    def _hit(self, point: Any) -> Hit:
        return Hit(entry_from_payload(point.payload), float(point.score), self.memory_type)


class QdrantFunctionIndex:
    def __init__(self, index: QdrantIndex) -> None:
        self.index = index

    def __len__(self) -> int:
        return len(self.index)

    @property
    def fallbacks(self) -> int:
        return self.index.fallbacks

    def search(
        self,
        function: str,
        query: np.ndarray,
        k: int,
        threshold: float | None,
        isolation: Isolation,
        task_id: str | None,
    ) -> list[Hit]:
        return self.index.search_many(query, k, threshold, isolation, task_id, function)[0]
