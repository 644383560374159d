"""Memory banks in Qdrant: one collection per (bank, memory type).

A collection is named by the bank's content hash and the type
(`amd_<type>_<bank_id[:16]>`). Each point holds one entry:

- its vector (the embedding of the entry's `key_text`),
- `entry`: the whole dataclass as a JSON-able dict (nested `MemorySource` and steps),
  independent of the representation (text and code are both kept; the student's
  representation is chosen at injection time),
- flat provenance fields, keyword-indexed for filtering: memory_type, source_task_id,
  source_group_id, split, teacher, label (ST), function (FN).

Point ids are UUIDv5 of the memory id, so writing the same entries twice is idempotent.
A collection carries `metadata.complete`: False from `create_bank` until an `upsert`
has finished, so a write interrupted by a crash is never taken for a finished bank.

Modes: embedded (`path=` a folder; ":memory:" for a throwaway store) by default, or a
Qdrant server (`url=`, metadata needs server >= 1.16) for clusters; the code is
otherwise the same. Embedded Qdrant takes an exclusive lock on its folder: only ONE
process may open it, so in a Ray run exactly one actor (the memory service) owns the
store and everyone else goes through it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import uuid
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from distillery.workers.memory.amd.records import (
    MEMORY_TYPES,
    FunctionRecord,
    MemoryEntry,
    MemorySource,
    MemoryType,
    SegmentStep,
    SubtaskSegment,
    WorkflowMemory,
)

_KIND: dict[type, MemoryType] = {WorkflowMemory: "wf", SubtaskSegment: "st", FunctionRecord: "fn"}
INDEXED_FIELDS = (
    "memory_type",
    "source_task_id",
    "source_group_id",
    "split",
    "teacher",
    "label",
    "function",
)
PAYLOAD_VERSION = 2  # 1: `entry` was a JSON string; 2: a nested dict
_ID_NAMESPACE = uuid.UUID("6f1c2f55-6a53-4c5e-9a2e-4b1b8f0d1a77")
_PREFIX = "amd"


def memory_type_of(entry: MemoryEntry) -> MemoryType:
    try:
        return _KIND[type(entry)]
    except KeyError:
        raise TypeError(f"not a memory entry: {type(entry).__name__}") from None


def collection_name(bank_id: str, memory_type: MemoryType) -> str:
    if memory_type not in MEMORY_TYPES:
        raise ValueError(f"unknown memory type {memory_type!r}; use one of {MEMORY_TYPES}")
    if not bank_id:
        raise ValueError("bank_id is empty")
    return f"{_PREFIX}_{memory_type}_{bank_id[:16]}"


def parse_collection_name(name: str) -> tuple[MemoryType, str] | None:
    """(memory type, bank id prefix) of one of our collections, else None."""
    parts = name.split("_", 2)
    if len(parts) == 3 and parts[0] == _PREFIX and parts[1] in MEMORY_TYPES and parts[2]:
        return parts[1], parts[2]  # type: ignore[return-value]
    return None


def point_id(memory_id: str) -> str:
    return str(uuid.uuid5(_ID_NAMESPACE, memory_id))


@functools.cache
def _field_names(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(cls))


def _jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: _jsonable(getattr(value, name)) for name in _field_names(type(value))}
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):  # free-form (a function's schema): must be plain JSON
        return json.loads(json.dumps(value, ensure_ascii=False))
    return value


def entry_to_dict(entry: MemoryEntry) -> dict[str, Any]:
    """The dataclass as a JSON-able dict (nested dataclasses too; tuples become lists)."""
    return _jsonable(entry)


def entry_from_dict(memory_type: MemoryType, data: dict[str, Any]) -> MemoryEntry:
    data = dict(data)
    data["source"] = MemorySource(**data["source"])
    if memory_type == "wf":
        data["functions"] = tuple(data["functions"])
        return WorkflowMemory(**data)
    if memory_type == "st":
        data["steps"] = tuple(SegmentStep(**s) for s in data["steps"])
        return SubtaskSegment(**data)
    if memory_type == "fn":
        return FunctionRecord(**data)
    raise ValueError(f"unknown memory type {memory_type!r}")


def entry_payload(entry: MemoryEntry) -> dict[str, Any]:
    """The point payload: flat, indexed provenance fields + the whole entry."""
    payload: dict[str, Any] = {
        "memory_type": memory_type_of(entry),
        "memory_id": entry.memory_id,
        "source_task_id": entry.source.task_id,
        "source_group_id": entry.source.group_id,
        "split": entry.source.split,
        "teacher": entry.source.teacher,
        "episode_id": entry.source.episode_id,
        "payload_version": PAYLOAD_VERSION,
        "entry": entry_to_dict(entry),
    }
    if isinstance(entry, SubtaskSegment):
        payload["label"] = entry.label
    if isinstance(entry, FunctionRecord):
        payload["function"] = entry.function
    return payload


def entry_from_payload(payload: dict[str, Any]) -> MemoryEntry:
    data = payload["entry"]
    if isinstance(data, str):  # payload version 1
        data = json.loads(data)
    return entry_from_dict(payload["memory_type"], data)


def flat_row(entry: MemoryEntry) -> dict[str, Any]:
    """One Parquet row: provenance and scalar fields flat, nested parts as JSON."""
    payload = entry_payload(entry)
    row: dict[str, Any] = {k: v for k, v in payload.items() if k != "entry"}
    row.setdefault("label", None)
    row.setdefault("function", None)
    for key, value in payload["entry"].items():
        if key in ("source", "memory_id", "label", "function"):
            continue
        if isinstance(value, dict | list):
            row[f"{key}_json"] = json.dumps(value, ensure_ascii=False)
        else:
            row[key] = value
    row["key_text"] = entry.key_text
    row["code"] = entry.code
    row["entry_json"] = json.dumps(payload["entry"], ensure_ascii=False)
    return row


class MemoryStore:
    """Qdrant collections of memory banks, embedded (default) or on a server."""

    def __init__(
        self, path: str | None = None, url: str | None = None, api_key_env: str | None = None
    ) -> None:
        from qdrant_client import QdrantClient

        if url:
            if path and path != ":memory:":
                raise ValueError("give MemoryStore either path= (embedded) or url= (server)")
            api_key = None
            if api_key_env:
                api_key = os.environ.get(api_key_env)
                if not api_key:
                    raise ValueError(f"environment variable {api_key_env} (api_key_env) is unset")
            self.client = QdrantClient(url=url, api_key=api_key)
            self.location = url
            self.mode = "server"
            return
        location = path or ":memory:"
        if location == ":memory:":
            self.client = QdrantClient(location=":memory:")
            self.mode = "memory"
        else:
            Path(location).mkdir(parents=True, exist_ok=True)
            try:
                self.client = QdrantClient(path=location)
            except RuntimeError as exc:
                if "already accessed" not in str(exc):
                    raise
                raise RuntimeError(
                    f"the embedded Qdrant store {location} is open in another process or "
                    "client; only one may own it (in a Ray run, the memory service actor). "
                    "Use a Qdrant server (memory.store.url) to share a store."
                ) from exc
            self.mode = "embedded"
        self.location = location

    @property
    def embedded(self) -> bool:
        """True when the collections live in this process (not on a server)."""
        return self.mode != "server"

    # -- banks and collections --------------------------------------------------

    def collections(self) -> list[str]:
        return sorted(
            c.name
            for c in self.client.get_collections().collections
            if parse_collection_name(c.name)
        )

    def create_bank(
        self, bank_id: str, memory_type: MemoryType, dim: int, *, recreate: bool = True
    ) -> str:
        """Create the (empty) collection of one memory type of a bank; its name.

        An existing collection is dropped first (`recreate`), else kept as it is.
        """
        from qdrant_client import models

        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        name = collection_name(bank_id, memory_type)
        if self.client.collection_exists(name):
            if not recreate:
                return name
            self.client.delete_collection(name)
        self.client.create_collection(
            name,
            vectors_config=models.VectorParams(size=int(dim), distance=models.Distance.COSINE),
            metadata={
                "bank_id": bank_id,
                "memory_type": memory_type,
                "complete": False,
                "payload_version": PAYLOAD_VERSION,
            },
        )
        with warnings.catch_warnings():
            # Local mode ignores payload indexes (and says so); a server uses them.
            warnings.simplefilter("ignore", UserWarning)
            for field_name in INDEXED_FIELDS:
                self.client.create_payload_index(
                    name, field_name=field_name, field_schema=models.PayloadSchemaType.KEYWORD
                )
        return name

    def upsert(
        self,
        collection: str,
        entries: Sequence[MemoryEntry],
        vectors: np.ndarray,
        batch_size: int = 512,
    ) -> int:
        """Write entries (payload) with their vectors; marks the collection complete."""
        from qdrant_client import models

        parsed = parse_collection_name(collection)
        if parsed is None:
            raise ValueError(f"{collection!r} is not a memory bank collection")
        vectors = np.asarray(vectors, dtype=np.float32)
        if entries and (vectors.ndim != 2 or vectors.shape[0] != len(entries)):
            raise ValueError(f"{len(entries)} entries but vectors of shape {vectors.shape}")
        dim = self.dim(collection)
        if entries and vectors.shape[1] != dim:
            raise ValueError(f"{collection} holds {dim}-d vectors, got {vectors.shape[1]}-d")
        for entry in entries:
            if memory_type_of(entry) != parsed[0]:
                raise ValueError(
                    f"{entry.memory_id} is a {memory_type_of(entry)} entry; "
                    f"{collection} holds {parsed[0]}"
                )
        metadata = self._metadata(collection)
        self._set_metadata(collection, {**metadata, "complete": False})
        with self._bulk_writes(collection):
            for start in range(0, len(entries), batch_size):
                chunk = entries[start : start + batch_size]
                rows = vectors[start : start + len(chunk)].tolist()
                self.client.upsert(
                    collection,
                    points=[
                        models.PointStruct(
                            id=point_id(e.memory_id), vector=row, payload=entry_payload(e)
                        )
                        for e, row in zip(chunk, rows, strict=True)
                    ],
                    wait=True,
                )
        count = self.count(collection)
        self._set_metadata(collection, {**metadata, "complete": True, "count": count})
        return len(entries)

    def write(
        self,
        bank_id: str,
        memory_type: MemoryType,
        entries: Sequence[MemoryEntry],
        vectors: np.ndarray,
        batch_size: int = 512,
    ) -> str:
        """(Re)create the collection of one memory type and fill it; its name."""
        vectors = np.asarray(vectors, dtype=np.float32)
        dim = int(vectors.shape[-1]) if vectors.ndim == 2 else 0
        if not entries:
            dim = max(1, dim)  # an empty type of a bank still gets its (empty) collection
        name = self.create_bank(bank_id, memory_type, dim)
        self.upsert(name, entries, vectors, batch_size=batch_size)
        return name

    def is_complete(self, collection: str) -> bool:
        """The collection exists, its last write finished, and it still holds the
        number of entries that write left (points deleted since: damaged)."""
        if not self.client.collection_exists(collection):
            return False
        metadata = self._metadata(collection)
        # Collections written before the marker existed carry no metadata: complete.
        if metadata.get("complete", True) is False:
            return False
        expected = metadata.get("count")
        return not isinstance(expected, int) or self.count(collection) == expected

    def has_bank(self, bank_id: str, types: Sequence[MemoryType] = MEMORY_TYPES) -> bool:
        """Every listed type's collection exists and its last write finished."""
        return all(self.is_complete(collection_name(bank_id, t)) for t in types)

    def count(self, collection: str) -> int:
        return int(self.client.count(collection, exact=True).count)

    def dim(self, collection: str) -> int:
        vectors = self.client.get_collection(collection).config.params.vectors
        return int(vectors.size)  # type: ignore[union-attr]

    def list_banks(self) -> dict[str, dict[str, int]]:
        """bank id prefix -> {memory type: number of entries}."""
        banks: dict[str, dict[str, int]] = {}
        for name in self.collections():
            memory_type, prefix = parse_collection_name(name)  # type: ignore[misc]
            banks.setdefault(prefix, {})[memory_type] = self.count(name)
        return banks

    def delete_bank(self, bank_id: str, types: Sequence[MemoryType] = MEMORY_TYPES) -> list[str]:
        """Drop a bank's collections (bank id or its 16-character prefix); their names."""
        deleted = []
        for memory_type in types:
            name = collection_name(bank_id, memory_type)
            if self.client.collection_exists(name):
                self.client.delete_collection(name)
                deleted.append(name)
        return deleted

    # -- reading ------------------------------------------------------------------

    def _scroll(self, collection: str, with_vectors: bool) -> Iterator[Any]:
        offset = None
        while True:
            points, offset = self.client.scroll(
                collection,
                limit=4096,
                offset=offset,
                with_payload=True,
                with_vectors=with_vectors,
            )
            yield from points
            if offset is None:
                return

    def load_entries(self, collection: str) -> list[MemoryEntry]:
        """Every entry of a collection, rebuilt as dataclasses, in memory_id order."""
        entries = [entry_from_payload(p.payload) for p in self._scroll(collection, False)]
        return sorted(entries, key=lambda e: e.memory_id)

    def load_with_vectors(self, collection: str) -> tuple[list[MemoryEntry], np.ndarray]:
        """Entries in memory_id order and their (unit) vectors as a float32 matrix."""
        points = list(self._scroll(collection, True))
        if not points:
            return [], np.zeros((0, self.dim(collection)), dtype=np.float32)
        entries = [entry_from_payload(p.payload) for p in points]
        order = sorted(range(len(entries)), key=lambda i: entries[i].memory_id)
        matrix = np.empty((len(points), len(points[0].vector)), dtype=np.float32)
        for row, i in enumerate(order):
            matrix[row] = points[i].vector
        return [entries[i] for i in order], matrix

    def load(self, bank_id: str, memory_type: MemoryType) -> tuple[list[MemoryEntry], np.ndarray]:
        """`load_with_vectors` of one type of a bank."""
        return self.load_with_vectors(collection_name(bank_id, memory_type))

    def export_parquet(
        self, collection: str, path_or_type: str | Path, path: str | Path | None = None
    ) -> Path:
        """One row per entry: payload fields flat, nested parts and the entry as JSON.

        `export_parquet(collection, path)`, or `export_parquet(bank_id, type, path)`.
        """
        import pyarrow as pa
        import pyarrow.parquet as pq

        if path is None:
            target = Path(path_or_type)
        else:
            collection = collection_name(collection, str(path_or_type))  # type: ignore[arg-type]
            target = Path(path)
        rows = [flat_row(e) for e in self.load_entries(collection)]
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), target)
        return target

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> MemoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------

    def _metadata(self, collection: str) -> dict[str, Any]:
        return dict(self.client.get_collection(collection).config.metadata or {})

    def _set_metadata(self, collection: str, metadata: dict[str, Any]) -> None:
        self.client.update_collection(collection, metadata=metadata)

    @contextlib.contextmanager
    def _bulk_writes(self, collection: str) -> Iterator[None]:
        """Embedded folder mode commits (and fsyncs) SQLite once per point: ~800
        points/s. During a bulk write, switch that collection's SQLite file to WAL with
        synchronous=NORMAL (no fsync per commit; a process crash loses nothing, the
        file stays consistent) and checkpoint it to disk before the write is marked
        complete: ~6x faster. Reaches into qdrant-client's local internals, so any
        surprise falls back to the library's own path."""
        connection = None
        if self.mode == "embedded":
            try:
                local = self.client._client  # QdrantLocal
                connection = local.collections[collection].storage.storage
                connection.execute("PRAGMA journal_mode=WAL")
                connection.execute("PRAGMA synchronous=NORMAL")
            except Exception:  # an optimisation only
                connection = None
        try:
            yield
        finally:
            if connection is not None:
                connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                connection.execute("PRAGMA synchronous=FULL")
