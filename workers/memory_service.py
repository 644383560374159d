"""The memory service: one Ray actor that owns the Qdrant store and the embedder.

Embedded Qdrant takes an exclusive lock on its folder, so one process must own it; the
episode workers reach it through `BankSearch`. Banks are written once (by content
hash) and loaded into an in-process index for fast, exactly isolated retrieval.

Generic over memory methods: a bank is a `BuiltBank` (the method's collections and its
store prefix); a stored bank is found by its id alone, and the method whose prefix its
collections carry (the registry) says which collections a whole bank has and which
dataclass each holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel

from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.config import EmbedderConfig, StoreConfig
from distillery.workers.memory.embedding import make_embedder
from distillery.workers.memory.entries import CollectionSpec
from distillery.workers.memory.retrieval import BankRetriever, Combine, Hit, Isolation
from distillery.workers.memory.store import MemoryStore, collection_name

if TYPE_CHECKING:
    from ray.actor import ActorProxy

    from distillery.workers.envs.base import Task
    from distillery.workers.llm.config import ModelConfig
    from distillery.workers.memory.config import BuilderConfig
    from distillery.workers.trajectories import EpisodeRecord


def method_layouts() -> dict[str, tuple[CollectionSpec, ...]]:
    """store prefix -> collection specs, of every registered method that loads (a
    broken plugin is named when a config uses it, not here)."""
    from distillery.workers.memory.registry import (
        MemoryMethodLoadError,
        known_methods,
        memory_method,
    )

    layouts: dict[str, tuple[CollectionSpec, ...]] = {}
    for kind in known_methods():
        try:
            method = memory_method(kind)
        except MemoryMethodLoadError:
            continue
        if method.store_prefix and method.collections:
            layouts.setdefault(method.store_prefix, tuple(method.collections))
    return layouts


class MemoryServiceImpl:
    def __init__(self, store: StoreConfig, embedder: EmbedderConfig, default_path: str) -> None:
        import os

        from distillery import redaction

        redaction.protect([store, embedder])
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # A Qdrant server (url) replaces the embedded default folder of a local root.
        path = store.path or (None if store.url else default_path)
        self.store = MemoryStore(path=path, url=store.url, api_key_env=store.api_key_env)
        # Loaded when something is first embedded (a bank written, a bank opened for
        # search): the model and its framework are most of this actor's memory, and
        # checking a cached bank in the store needs neither.
        self._embedder_config = embedder
        self._embedder: Any = None
        # A method's own embedder (`MemoryMethod.embedder`, e.g. ExpeL's original's),
        # by (kind, model), loaded on first use as the sweep's is.
        self._own: dict[tuple[str, str], Any] = {}
        self._retrievers: dict[tuple[str, Isolation], BankRetriever] = {}
        self._layouts: dict[str, tuple[CollectionSpec, ...]] | None = None
        # key text -> vector (live views), per embedder ((kind, model); None: the sweep's)
        self._embedded: dict[tuple[str, str] | None, dict[str, np.ndarray]] = {}

    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            self._embedder = make_embedder(self._embedder_config)
        return self._embedder

    @embedder.setter
    def embedder(self, value: Any) -> None:
        self._embedder = value

    @staticmethod
    def _key(config: EmbedderConfig | None) -> tuple[str, str] | None:
        return None if config is None else (config.kind, config.model)

    def embedder_for(self, config: EmbedderConfig | None) -> Any:
        """The embedder of a bank: `config` (a method's own), or the sweep's (None, or
        `config` naming the sweep's model)."""
        if config is None or self._key(config) == self._key(self._embedder_config):
            return self.embedder
        key = (config.kind, config.model)
        if key not in self._own:
            self._own[key] = make_embedder(config)
        return self._own[key]

    def set_embedder_for(self, config: EmbedderConfig, value: Any) -> None:
        """Use `value` as the embedder of `config` (a test double)."""
        self._own[(config.kind, config.model)] = value

    def ready(self) -> dict[str, Any]:
        config = self._embedder_config
        return {"store": self.store.location, "embedder": f"{config.kind}:{config.model}"}

    # -- which method's bank ------------------------------------------------------

    def layout(self, bank_id: str) -> tuple[str, tuple[CollectionSpec, ...]] | None:
        """(store prefix, collection specs) of a stored bank (None: no collection of
        it is stored, or its method is not installed)."""
        prefixes = {parsed.prefix for parsed in self.store.bank_collections(bank_id).values()}
        if len(prefixes) != 1:
            return None
        (prefix,) = prefixes
        if self._layouts is None or prefix not in self._layouts:
            self._layouts = method_layouts()
        specs = self._layouts.get(prefix)
        return None if specs is None else (prefix, specs)

    def _layout(self, bank_id: str) -> tuple[str, tuple[CollectionSpec, ...]]:
        layout = self.layout(bank_id)
        if layout is None:
            raise KeyError(
                f"bank {bank_id[:16]}: not in {self.store.location}, or written by a memory "
                "method that is not installed"
            )
        return layout

    # -- banks --------------------------------------------------------------------

    def has_bank(self, bank_id: str) -> bool:
        """Every collection of the bank's method is stored and complete."""
        layout = self.layout(bank_id)
        if layout is None:
            return False
        prefix, specs = layout
        names = [s.name for s in specs]
        return self.store.has_bank(bank_id, names, prefix=prefix) and self.store.has_bank(bank_id)

    def bank_counts(self, bank_id: str) -> dict[str, int]:
        """Entries per collection of a stored bank (for a bank reused, not rebuilt)."""
        prefix, specs = self._layout(bank_id)
        counts = {}
        for spec in specs:
            name = collection_name(bank_id, spec.name, prefix)
            counts[spec.name] = self.store.count(name) if self._exists(name) else 0
        return counts

    def drop_bank(self, bank_id: str) -> list[str]:
        """Delete a (damaged) bank's collections and forget its loaded indexes."""
        self._forget(bank_id)
        return self.store.delete_bank(bank_id)

    def _forget(self, bank_id: str) -> None:
        for key in [k for k in self._retrievers if k[0] == bank_id]:
            del self._retrievers[key]

    def _exists(self, name: str) -> bool:
        return self.store.client.collection_exists(name)

    def write_bank(
        self, bank_id: str, bank: BuiltBank, embedder: EmbedderConfig | None = None
    ) -> dict[str, int]:
        """Embed each entry's key text (under `embedder`, a method's own; None: the
        sweep's) and store one collection per spec."""
        self._forget(bank_id)
        model = self.embedder_for(embedder)
        names = [s.name for s in bank.specs]
        counts: dict[str, int] = {}
        embedded = 0
        for spec in bank.specs:
            entries = list(bank.collections[spec.name])
            texts = [e.key_text for e in entries]
            vectors = model.embed(texts) if texts else np.zeros((0, 1), np.float32)
            self.store.write(bank_id, spec, entries, vectors, prefix=bank.prefix, siblings=names)
            counts[spec.name] = len(entries)
            embedded += sum(len(t) for t in texts)
        # What embedding cost: the report prices it (about 4 characters per token).
        counts["embedded_chars"] = embedded
        return counts

    def load_bank(self, bank_id: str) -> BuiltBank:
        """The stored entries of a bank (e.g. for a derived bank built from it)."""
        prefix, specs = self._layout(bank_id)
        collections = {
            spec.name: self.store.load(bank_id, spec, prefix=prefix)[0]
            if self._exists(collection_name(bank_id, spec.name, prefix))
            else []
            for spec in specs
        }
        return BuiltBank(prefix, specs, collections)

    # -- live views (a bank an outcome-driven stage is still writing) --------------

    def put_view(
        self,
        view_id: str,
        bank: BuiltBank,
        isolation: Isolation,
        embedder: EmbedderConfig | None = None,
    ) -> dict[str, int]:
        """Make `bank` searchable as `view_id` (never stored): the memory an
        outcome-driven stage's play reads, its committed entries plus what it staged
        for the task. Key texts are embedded once per text (the cache lives as long as
        the service)."""
        key = (view_id, isolation)
        if key not in self._retrievers:
            entries = {}
            for spec in bank.specs:
                items = list(bank.collections[spec.name])
                texts = [e.key_text for e in items]
                entries[spec.name] = (items, self._embed_cached(texts, embedder))
            self._retrievers[key] = BankRetriever.from_entries(
                self.embedder_for(embedder), isolation, bank.specs, entries
            )
        return self._retrievers[key].sizes()

    def similarities(self, queries: list[str], keys: list[str]) -> list[list[float]]:
        """Cosine of each query to each key under the service's embedder (an
        outcome-driven program's de-duplication: `TaskContext.similarities`)."""
        if not queries or not keys:
            return [[] for _ in queries]
        from distillery.workers.memory.embedding import normalise_rows

        q = normalise_rows(self._embed_cached(list(queries)))
        k = normalise_rows(self._embed_cached(list(keys)))
        return [[round(float(v), 6) for v in row] for row in q @ k.T]

    def drop_views(self, prefix: str) -> None:
        """Forget the live views whose ids start with `prefix` (a finished wave's)."""
        for key in [k for k in self._retrievers if k[0].startswith(prefix)]:
            del self._retrievers[key]

    def _embed_cached(self, texts: list[str], embedder: EmbedderConfig | None = None) -> np.ndarray:
        cache = self._embedded.setdefault(self._key(embedder), {})
        new = [t for t in dict.fromkeys(texts) if t not in cache]
        if new:
            model = self.embedder_for(embedder)
            for text, vector in zip(new, model.embed(new), strict=True):
                cache[text] = vector
        if not texts:
            return np.zeros((0, 1), np.float32)
        return np.stack([cache[t] for t in texts])

    # -- retrieval ----------------------------------------------------------------

    def open_bank(
        self, bank_id: str, isolation: Isolation, embedder: EmbedderConfig | None = None
    ) -> dict[str, int]:
        """Open a stored bank for search; `embedder`: the one it was written with (a
        method's own; None: the sweep's), which embeds the queries."""
        key = (bank_id, isolation)
        if key not in self._retrievers:
            prefix, specs = self._layout(bank_id)
            model = self.embedder_for(embedder)
            self._retrievers[key] = BankRetriever.from_store(
                self.store, bank_id, specs, model, isolation, prefix=prefix
            )
        return self._retrievers[key].sizes()

    def search(
        self,
        bank_id: str,
        isolation: Isolation,
        collection: str,
        queries: list[str],
        task_id: str,
        k: int,
        threshold: float | None,
        group: str | None = None,
        combine: Combine = "each",
    ) -> list[list[Hit]]:
        """Top-k allowed hits per query of one collection of an opened bank (`combine`:
        see `BankRetriever.search`)."""
        retriever = self._retrievers[(bank_id, isolation)]
        return retriever.search(collection, queries, task_id, k, threshold, group, combine=combine)

    def export_bank(self, bank_id: str, directory: str) -> list[str]:
        from pathlib import Path

        prefix, specs = self._layout(bank_id)
        return [
            str(
                self.store.export_parquet(
                    collection_name(bank_id, spec.name, prefix),
                    spec,
                    Path(directory) / f"{spec.name}.parquet",
                )
            )
            for spec in specs
        ]

    def close(self) -> None:
        self.store.close()


@dataclass(frozen=True)
class MemoryJob:
    """What an episode worker needs to let its student read a bank (`bank_id` None: a
    method whose memory needs no bank; its hooks get no search)."""

    service: ActorProxy[MemoryServiceImpl] | None
    bank_id: str | None
    isolation: Isolation
    retrieval: BaseModel  # the memory method's validated read settings
    kind: str  # the memory method, whose hooks the episode runs
    # What one hook call may inject (`memory.bounds.max_injected_chars`, ours).
    max_injected_chars: int = 32_000
    # An outcome-driven stage's play: which play of the task it is (1: the first) and
    # what the stage staged for this task's re-plays (its provisional slot, searchable
    # in `bank_id` too): the hooks read both from their search (`BankSearch`).
    attempt: int = 1
    staged: tuple[Any, ...] = ()


class BankSearch:
    """The generic search of one opened bank over the memory service actor, awaitable
    from async workers; what a method's hooks get (`MemoryMethod.hooks`), with which
    play of the task the episode is (`attempt`, 1: the first) and what an
    outcome-driven stage staged for the task's re-plays (`staged`). A method whose
    memory needs no bank gets one too (`has_bank` False: `search` refuses)."""

    def __init__(self, job: MemoryJob) -> None:
        self._service: Any = job.service  # its remote methods are awaited
        self._bank = job.bank_id
        self._isolation = job.isolation
        self._kind = job.kind
        self.attempt = job.attempt
        self.staged = job.staged

    @property
    def has_bank(self) -> bool:
        return self._service is not None and self._bank is not None

    async def search(
        self,
        collection: str,
        queries: list[str],
        task_id: str,
        k: int,
        threshold: float | None,
        group: str | None = None,
        combine: Combine = "each",
    ) -> list[list[Hit]]:
        if self._service is None or self._bank is None:
            raise ValueError(f"memory method {self._kind!r} reads no bank: nothing to search")
        return await self._service.search.remote(
            self._bank, self._isolation, collection, queries, task_id, k, threshold, group, combine
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


def builder_llm(model: ModelConfig | None, endpoints: list[str]) -> RoutedBuilderLLM | None:
    """The LLM a bank's builders call: `model` over its replicas (None: no model, the
    builders write deterministic entries only)."""
    if model is None:
        return None
    from distillery.workers.llm.router import RoutedChat

    routed = RoutedChat.from_config(model, endpoints)
    cap = None if model.max_tokens is None else max(model.max_tokens, 512)
    return RoutedBuilderLLM(routed, model.temperature, cap, model.top_p)


async def render_task(
    kind: str,
    bank: BuiltBank,
    builder: BuilderConfig,
    model: ModelConfig | None,
    endpoints: list[str],
) -> BuiltBank:
    """Body of a derived (render) stage's Ray task: the memory method's `render`."""
    from distillery.workers.memory.registry import memory_method

    return await memory_method(kind).render(bank, builder, builder_llm(model, endpoints))


async def build_task(
    kind: str,
    episodes: list[EpisodeRecord],
    tasks: list[Task],
    split: str,
    builder: BuilderConfig,
    model: ModelConfig | None,
    endpoints: list[str],
) -> BuiltBank:
    """Body of the build stage's Ray task: the memory method's `build` (its LLM calls
    run concurrently)."""
    from distillery.workers.memory.registry import memory_method

    llm = builder_llm(model, endpoints)
    return await memory_method(kind).build(episodes, tasks, builder, llm, split)
