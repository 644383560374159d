"""Retrieval straight from Qdrant: the same searches as the in-process indexes of
`retrieval.py`, for a Qdrant server or banks too large to load."""

from __future__ import annotations

from typing import Any

import numpy as np

from distillery.workers.memory.entries import CollectionSpec
from distillery.workers.memory.isolation import Hit, Isolation
from distillery.workers.memory.store import MemoryStore, entry_from_payload


class QdrantIndex:
    """The same searches as a Qdrant query (server mode, or banks too big to load).

    Over-fetches top-(k + max entries per source task) without a filter and drops
    disallowed hits in Python; only when that leaves fewer than k (and more may exist)
    is a filtered query sent. A grouped collection's queries always filter on the
    (indexed) group field.
    """

    def __init__(
        self, store: MemoryStore, name: str, spec: CollectionSpec, exact: bool = False
    ) -> None:
        self.client = store.client
        self.name = name  # the Qdrant collection
        self.spec = spec
        self.collection = spec.name
        self.exact = exact
        self.size = store.count(name)
        self.max_per_task = self._max_per_task()
        self.fallbacks = 0  # filtered queries sent

    def __len__(self) -> int:
        return self.size

    def _max_per_task(self) -> int:
        if self.size == 0:
            return 0
        try:
            facet = self.client.facet(self.name, key="source_task_id", limit=1, exact=True)
            return int(facet.hits[0].count) if facet.hits else 0
        except Exception:  # a server without facets: count from the payloads
            counts: dict[str, int] = {}
            offset = None
            while True:
                points, offset = self.client.scroll(
                    self.name, limit=4096, offset=offset, with_payload=["source_task_id"]
                )
                for p in points:
                    task = (p.payload or {})["source_task_id"]
                    counts[task] = counts.get(task, 0) + 1
                if offset is None:
                    return max(counts.values(), default=0)

    def _filter(self, group: str | None, isolation: Isolation | None, task: str | None):
        from qdrant_client import models

        must: list[Any] = []
        must_not: list[Any] = []
        if group is not None:
            must.append(
                models.FieldCondition(
                    key=str(self.spec.group_field), match=models.MatchValue(value=group)
                )
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
        group: str | None = None,
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
            self.name,
            [request(q, self._filter(group, None, None), limit) for q in queries],
        )
        results = []
        for query, response in zip(queries, first, strict=True):
            hits = [self._hit(p) for p in response.points]
            allowed = [h for h in hits if keep(h) and isolation.allows(h.entry.source, task)][:k]
            if len(allowed) < k and len(response.points) == limit:
                self.fallbacks += 1
                flt = self._filter(group, isolation, task)
                (response,) = self.client.query_batch_points(self.name, [request(query, flt, k)])
                allowed = [h for h in map(self._hit, response.points) if keep(h)]
            results.append(allowed)
        return results

    def _hit(self, point: Any) -> Hit:
        entry = entry_from_payload(point.payload, self.spec.entry_type)
        return Hit(entry, float(point.score), self.collection)


class QdrantGroupedIndex(QdrantIndex):
    """`QdrantIndex` of a grouped collection: a query without a group finds nothing."""

    def has_group(self, group: str) -> bool:
        return True  # unknown without a query: the filtered query answers

    def search_many(
        self,
        queries: np.ndarray,
        k: int,
        threshold: float | None,
        isolation: Isolation,
        task_id: str | None,
        group: str | None = None,
    ) -> list[list[Hit]]:
        if group is None:
            return [[] for _ in range(np.atleast_2d(queries).shape[0])]
        return super().search_many(queries, k, threshold, isolation, task_id, group)
