"""The memory service: one Ray actor that owns the Qdrant store and the embedder.

Embedded Qdrant takes an exclusive lock on its folder, so one process must own it; the
episode workers reach it through `ServiceLookup`. Banks are written once (by content
hash) and loaded into an in-process index for fast, exactly isolated retrieval.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from distillery.workers.memory.amd.bank import BuiltBank
from distillery.workers.memory.amd.lookup import BankRetriever
from distillery.workers.memory.amd.records import MEMORY_TYPES
from distillery.workers.memory.config import EmbedderConfig, StoreConfig
from distillery.workers.memory.embedding import make_embedder
from distillery.workers.memory.retrieval import Hit, Isolation
from distillery.workers.memory.store import MemoryStore, collection_name


class MemoryServiceImpl:
    def __init__(self, store: StoreConfig, embedder: EmbedderConfig, default_path: str) -> None:
        import os

        from distillery import redaction

        redaction.register_secrets(redaction.secrets_in([store, embedder]))
        redaction.install()
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # A Qdrant server (url) replaces the embedded default folder of a local root.
        path = store.path or (None if store.url else default_path)
        self.store = MemoryStore(path=path, url=store.url, api_key_env=store.api_key_env)
        self.embedder = make_embedder(embedder)
        self._retrievers: dict[tuple[str, Isolation], BankRetriever] = {}

    def ready(self) -> dict[str, Any]:
        return {"store": self.store.location, "embedder": self.embedder.name}

    def has_bank(self, bank_id: str) -> bool:
        return self.store.has_bank(bank_id)

    def bank_counts(self, bank_id: str) -> dict[str, int]:
        """Entries per memory type of a stored bank (for a bank reused, not rebuilt)."""
        return {t: self.store.count(collection_name(bank_id, t)) for t in MEMORY_TYPES}

    def drop_bank(self, bank_id: str) -> list[str]:
        """Delete a (damaged) bank's collections and forget its loaded indexes."""
        self._forget(bank_id)
        return self.store.delete_bank(bank_id)

    def _forget(self, bank_id: str) -> None:
        for key in [k for k in self._retrievers if k[0] == bank_id]:
            del self._retrievers[key]

    def write_bank(self, bank_id: str, bank: BuiltBank) -> dict[str, int]:
        """Embed each entry's key text and store the three collections."""
        self._forget(bank_id)
        keyed = {
            "wf": (bank.workflows, [e.key_text for e in bank.workflows]),
            "st": (bank.segments, [e.key_text for e in bank.segments]),
            "fn": (bank.functions, [e.key_text for e in bank.functions]),
        }
        counts = {}
        for memory_type, (entries, texts) in keyed.items():
            vectors = self.embedder.embed(texts) if texts else np.zeros((0, 1), np.float32)
            self.store.write(bank_id, memory_type, list(entries), vectors)
            counts[memory_type] = len(entries)
        # What embedding cost: the report prices it (about 4 characters per token).
        counts["embedded_chars"] = sum(len(t) for _, texts in keyed.values() for t in texts)
        return counts

    def load_bank(self, bank_id: str) -> BuiltBank:
        """The stored entries of a bank (e.g. to add text renderings to a copy)."""
        loaded = {t: self.store.load(bank_id, t)[0] for t in MEMORY_TYPES}
        return BuiltBank(
            workflows=loaded["wf"],  # type: ignore[arg-type]
            segments=loaded["st"],  # type: ignore[arg-type]
            functions=loaded["fn"],  # type: ignore[arg-type]
        )

    def open_bank(self, bank_id: str, isolation: Isolation) -> dict[str, int]:
        key = (bank_id, isolation)
        if key not in self._retrievers:
            self._retrievers[key] = BankRetriever.from_store(
                self.store, bank_id, self.embedder, isolation
            )
        return self._retrievers[key].sizes()

    def workflow(
        self,
        bank_id: str,
        isolation: Isolation,
        query: str,
        task_id: str,
        k: int,
        threshold: float | None,
    ) -> list[Hit]:
        return self._retrievers[(bank_id, isolation)].workflow(query, task_id, k, threshold)

    def subtasks(
        self,
        bank_id: str,
        isolation: Isolation,
        queries: list[str],
        task_id: str,
        k: int,
        threshold: float | None,
    ) -> list[Hit]:
        return self._retrievers[(bank_id, isolation)].subtasks(queries, task_id, k, threshold)

    def functions(
        self,
        bank_id: str,
        isolation: Isolation,
        function: str,
        instruction: str,
        task_id: str,
        k: int,
        threshold: float | None,
    ) -> list[Hit]:
        return self._retrievers[(bank_id, isolation)].functions(
            function, instruction, task_id, k, threshold
        )

    def export_bank(self, bank_id: str, directory: str) -> list[str]:
        from pathlib import Path

        return [
            str(self.store.export_parquet(bank_id, t, Path(directory) / f"{t}.parquet"))
            for t in MEMORY_TYPES
        ]

    def close(self) -> None:
        self.store.close()


@dataclass(frozen=True)
class MemoryJob:
    """What an episode worker needs to let its student read a bank."""

    service: Any  # Ray actor handle of MemoryServiceImpl
    bank_id: str
    isolation: Isolation
    retrieval: Any  # the memory method's read settings
    kind: str  # the memory method, whose hooks the episode runs


class ServiceLookup:
    """`MemoryLookup` over the memory service actor (awaitable from async workers)."""

    def __init__(self, job: MemoryJob) -> None:
        self._service = job.service
        self._bank = job.bank_id
        self._isolation = job.isolation

    async def workflow(
        self, query: str, task_id: str, k: int, threshold: float | None
    ) -> list[Hit]:
        return await self._service.workflow.remote(
            self._bank, self._isolation, query, task_id, k, threshold
        )

    async def subtasks(
        self, queries: list[str], task_id: str, k: int, threshold: float | None
    ) -> list[Hit]:
        return await self._service.subtasks.remote(
            self._bank, self._isolation, queries, task_id, k, threshold
        )

    async def functions(
        self, function: str, instruction: str, task_id: str, k: int, threshold: float | None
    ) -> list[Hit]:
        return await self._service.functions.remote(
            self._bank, self._isolation, function, instruction, task_id, k, threshold
        )


class RoutedBuilderLLM:
    """A builder LLM over a model's replicas: each request is its own routing unit."""

    def __init__(
        self,
        routed: Any,
        temperature: float | None,
        max_tokens: int | None,
        top_p: float | None = None,
    ) -> None:
        self._routed = routed
        self._defaults = {"temperature": temperature, "max_tokens": max_tokens, "top_p": top_p}

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> Any:
        import uuid

        request_id = f"build-{uuid.uuid4().hex[:12]}"
        try:
            return await self._routed.chat(request_id, messages, **{**self._defaults, **kwargs})
        finally:
            self._routed.end_episode(request_id)


def builder_llm(model: Any, endpoints: list[str]) -> RoutedBuilderLLM | None:
    """The LLM a bank's builders call: `model` over its replicas (None: no model, the
    builders write deterministic entries only)."""
    if model is None:
        return None
    from distillery.workers.llm.router import RoutedChat

    routed = RoutedChat.from_config(model, endpoints)
    cap = None if model.max_tokens is None else max(model.max_tokens, 512)
    return RoutedBuilderLLM(routed, model.temperature, cap, model.top_p)


async def render_task(kind: str, bank: Any, builder: Any, model: Any, endpoints: list[str]) -> Any:
    """Body of a derived (render) stage's Ray task: the memory method's `render`."""
    from distillery.workers.memory.registry import memory_method

    return await memory_method(kind).render(bank, builder, builder_llm(model, endpoints))


async def build_task(
    kind: str,
    episodes: list[Any],
    tasks: list[Any],
    split: str,
    builder: Any,
    model: Any,
    endpoints: list[str],
) -> Any:
    """Body of the build stage's Ray task: the memory method's `build` (its LLM calls
    run concurrently)."""
    from distillery.workers.memory.registry import memory_method

    llm = builder_llm(model, endpoints)
    return await memory_method(kind).build(episodes, tasks, builder, llm, split)
