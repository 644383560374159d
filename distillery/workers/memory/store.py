"""Memory banks in Qdrant: one collection per memory type of a bank, named by the
bank's content hash, with indexed provenance payload.

Embedded (local) mode by default: qdrant-client takes an exclusive lock on its folder,
so exactly one process (the memory service actor) opens it. A server URL is the
cluster path; the code is otherwise the same.
"""

from __future__ import annotations

import json
import os
import uuid
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from distillery.workers.memory.records import (
    FunctionRecord,
    MemoryEntry,
    MemorySource,
    MemoryType,
    SegmentStep,
    SubtaskSegment,
    WorkflowMemory,
)

_KIND = {WorkflowMemory: "wf", SubtaskSegment: "st", FunctionRecord: "fn"}
INDEXED_FIELDS = (
    "memory_type",
    "source_task_id",
    "source_group_id",
    "split",
    "teacher",
    "label",
    "function",
)
_ID_NAMESPACE = uuid.UUID("6f1c2f55-6a53-4c5e-9a2e-4b1b8f0d1a77")


def collection_name(bank_id: str, memory_type: MemoryType) -> str:
    return f"amd_{memory_type}_{bank_id[:16]}"


def entry_payload(entry: MemoryEntry) -> dict[str, Any]:
    memory_type = _KIND[type(entry)]
    return {
        "memory_type": memory_type,
        "memory_id": entry.memory_id,
        "source_task_id": entry.source.task_id,
        "source_group_id": entry.source.group_id,
        "split": entry.source.split,
        "teacher": entry.source.teacher,
        "label": getattr(entry, "label", None),
        "function": getattr(entry, "function", None),
        "entry": json.dumps(asdict(entry), ensure_ascii=False),
    }


def entry_from_payload(payload: dict[str, Any]) -> MemoryEntry:
    data = json.loads(payload["entry"])
    data["source"] = MemorySource(**data["source"])
    kind = payload["memory_type"]
    if kind == "wf":
        data["functions"] = tuple(data["functions"])
        return WorkflowMemory(**data)
    if kind == "st":
        data["steps"] = tuple(SegmentStep(**s) for s in data["steps"])
        return SubtaskSegment(**data)
    return FunctionRecord(**data)


class MemoryStore:
    def __init__(
        self, path: str | None = None, url: str | None = None, api_key_env: str | None = None
    ) -> None:
        from qdrant_client import QdrantClient

        if url:
            api_key = os.environ.get(api_key_env) if api_key_env else None
            self.client = QdrantClient(url=url, api_key=api_key)
            self.location = url
        else:
            location = path or ":memory:"
            if location != ":memory:":
                Path(location).mkdir(parents=True, exist_ok=True)
                self.client = QdrantClient(path=location)
            else:
                self.client = QdrantClient(location=":memory:")
            self.location = location

    def has_bank(self, bank_id: str, types: tuple[MemoryType, ...] = ("wf", "st", "fn")) -> bool:
        names = {c.name for c in self.client.get_collections().collections}
        return all(collection_name(bank_id, t) in names for t in types)

    def write(
        self,
        bank_id: str,
        memory_type: MemoryType,
        entries: list[MemoryEntry],
        vectors: np.ndarray,
        batch_size: int = 512,
    ) -> str:
        """(Re)create the collection of one memory type and fill it."""
        from qdrant_client import models

        name = collection_name(bank_id, memory_type)
        dim = int(vectors.shape[1]) if len(entries) else 1
        if self.client.collection_exists(name):
            self.client.delete_collection(name)
        self.client.create_collection(
            name, vectors_config=models.VectorParams(size=dim, distance=models.Distance.COSINE)
        )
        with warnings.catch_warnings():
            # Local mode ignores payload indexes (and says so); a server uses them.
            warnings.simplefilter("ignore", UserWarning)
            for field_name in INDEXED_FIELDS:
                self.client.create_payload_index(
                    name, field_name=field_name, field_schema=models.PayloadSchemaType.KEYWORD
                )
        for start in range(0, len(entries), batch_size):
            chunk = entries[start : start + batch_size]
            self.client.upsert(
                name,
                points=[
                    models.PointStruct(
                        id=str(uuid.uuid5(_ID_NAMESPACE, e.memory_id)),
                        vector=vectors[start + i].tolist(),
                        payload=entry_payload(e),
                    )
                    for i, e in enumerate(chunk)
                ],
                wait=True,
            )
        return name

    def load(self, bank_id: str, memory_type: MemoryType) -> tuple[list[MemoryEntry], np.ndarray]:
        """Every entry of one memory type with its vector, in memory_id order."""
        name = collection_name(bank_id, memory_type)
        entries: list[MemoryEntry] = []
        vectors: list[list[float]] = []
        offset = None
        while True:
            points, offset = self.client.scroll(
                name, limit=1024, offset=offset, with_payload=True, with_vectors=True
            )
            for point in points:
                entries.append(entry_from_payload(point.payload))
                vectors.append(point.vector)
            if offset is None:
                break
        if not entries:
            dim = self.client.get_collection(name).config.params.vectors.size
            return [], np.zeros((0, dim), dtype=np.float32)
        order = sorted(range(len(entries)), key=lambda i: entries[i].memory_id)
        matrix = np.array([vectors[i] for i in order], dtype=np.float32)
        return [entries[i] for i in order], matrix

    def list_banks(self) -> dict[str, dict[str, int]]:
        """bank id prefix -> {memory type: number of entries}."""
        banks: dict[str, dict[str, int]] = {}
        for collection in self.client.get_collections().collections:
            parts = collection.name.split("_", 2)
            if len(parts) == 3 and parts[0] == "amd":
                count = self.client.count(collection.name, exact=True).count
                banks.setdefault(parts[2], {})[parts[1]] = count
        return banks

    def export_parquet(self, bank_id: str, memory_type: MemoryType, path: str | Path) -> Path:
        import pyarrow as pa
        import pyarrow.parquet as pq

        entries, _ = self.load(bank_id, memory_type)
        rows = [entry_payload(e) for e in entries]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), path)
        return path

    def close(self) -> None:
        self.client.close()
