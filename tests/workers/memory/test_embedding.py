"""Embedders: the packaged MiniLM offline, OpenAI-compatible retries, and the cache."""

from __future__ import annotations

import hashlib

import httpx
import numpy as np
import openai
import pytest

from distillery.workers.llm.types import InfraError
from distillery.workers.memory.config import EmbedderConfig
from distillery.workers.memory.embedding import (
    CachingEmbedder,
    Embedder,
    OpenAIEmbedder,
    make_embedder,
    normalise_rows,
    packaged_minilm_path,
)


class WordHashEmbedder:
    """Test double: a bag of hashed words, so shared words mean similar vectors.

    Counts every text it embeds (`calls`) and every call (`batches`)."""

    name = "word-hash"
    dim = 64

    def __init__(self) -> None:
        self.calls = 0
        self.batches = 0
        self.seen: list[str] = []

    def embed(self, texts):
        self.calls += len(texts)
        self.batches += 1
        self.seen.extend(texts)
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1
        return normalise_rows(out)


def test_word_hash_double_satisfies_the_protocol():
    assert isinstance(WordHashEmbedder(), Embedder)
    assert isinstance(CachingEmbedder(WordHashEmbedder()), Embedder)


def test_caching_embedder_never_embeds_a_text_twice():
    inner = WordHashEmbedder()
    cache = CachingEmbedder(inner)
    first = cache.embed(["a b", "c d", "a b", "a b"])
    assert inner.calls == 2 and inner.seen == ["a b", "c d"]  # deduplicated within a call
    again = cache.embed(["c d", "a b", "e f", "e f"])
    assert inner.seen == ["a b", "c d", "e f"]  # and across calls
    assert cache.embedded == 3 and cache.served == 8 and len(cache) == 3
    np.testing.assert_array_equal(first[0], again[1])
    np.testing.assert_array_equal(first[0], first[2])
    assert first.dtype == np.float32 and first.shape == (4, 64)
    cache.embed(["a b", "c d"])  # all cached: the inner embedder is not called at all
    assert inner.batches == 2
    assert cache.embed([]).shape == (0, 64)


def test_normalise_rows_gives_unit_float32_rows():
    out = normalise_rows([[3.0, 4.0], [0.0, 0.0]])
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, [[0.6, 0.8], [0.0, 0.0]])


def test_packaged_minilm_is_found_without_network():
    path = packaged_minilm_path()
    assert (path / "modules.json").exists() and (path / "model.safetensors").exists()


def test_real_minilm_embedder_from_the_package(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    embedder = make_embedder(EmbedderConfig())
    assert embedder.dim == 384 and embedder.name == "sentence_transformers:all-MiniLM-L6-v2"
    vectors = embedder.embed(
        ["move a file to a folder", "relocate the file into the directory", "post a tweet"]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]


# -- OpenAI-compatible endpoint ---------------------------------------------------------


class _Item:
    def __init__(self, index, embedding):
        self.index = index
        self.embedding = embedding


class _Response:
    def __init__(self, data):
        self.data = data


class FakeEmbeddingsAPI:
    """Stands in for `client.embeddings`: fails as scripted, then answers (shuffled)."""

    def __init__(self, failures):
        self.failures = list(failures)
        self.inputs = []

    def create(self, model, input):
        self.inputs.append(list(input))
        if self.failures:
            raise self.failures.pop(0)
        vectors = WordHashEmbedder().embed(input)
        items = [_Item(i, (2 * v).tolist()) for i, v in enumerate(vectors)]
        return _Response(items[::-1])  # out of order: must be sorted by index


def _request():
    return httpx.Request("POST", "http://embed.test/v1/embeddings")


def _server_error():
    return openai.InternalServerError(
        "boom", response=httpx.Response(503, request=_request()), body=None
    )


def _bad_request():
    return openai.BadRequestError(
        "too long", response=httpx.Response(400, request=_request()), body=None
    )


def _openai_embedder(failures, monkeypatch, **kwargs):
    monkeypatch.setenv("EMBED_TEST_KEY", "sk-test")
    sleeps = []
    embedder = OpenAIEmbedder(
        "http://embed.test/v1",
        api_key_env="EMBED_TEST_KEY",
        sleep=sleeps.append,
        **kwargs,
    )
    api = FakeEmbeddingsAPI(failures)
    embedder._client.embeddings = api  # type: ignore[attr-defined]
    return embedder, api, sleeps


def test_openai_embedder_batches_orders_and_normalises(monkeypatch):
    embedder, api, _ = _openai_embedder([], monkeypatch, batch_size=2)
    texts = ["move the file", "post a tweet", "move file"]
    vectors = embedder.embed(texts)
    assert api.inputs == [["move the file", "post a tweet"], ["move file"]]
    np.testing.assert_allclose(vectors, WordHashEmbedder().embed(texts), rtol=1e-6)
    assert embedder.dim == 64 and embedder.requests == 2
    assert embedder._client.api_key == "sk-test"


def test_openai_embedder_retries_transport_and_5xx(monkeypatch):
    failures = [openai.APIConnectionError(request=_request()), _server_error()]
    embedder, api, sleeps = _openai_embedder(failures, monkeypatch, backoff_s=0.5)
    assert embedder.embed(["a b"]).shape == (1, 64)
    assert len(api.inputs) == 3 and sleeps == [0.5, 1.0]


def test_openai_embedder_gives_up_with_an_infra_error(monkeypatch):
    embedder, api, _ = _openai_embedder([_server_error()] * 3, monkeypatch, max_retries=2)
    with pytest.raises(InfraError, match="failed 3 times"):
        embedder.embed(["a"])
    assert len(api.inputs) == 3


def test_openai_embedder_does_not_retry_a_bad_request(monkeypatch):
    embedder, api, _ = _openai_embedder([_bad_request()], monkeypatch)
    with pytest.raises(openai.BadRequestError):
        embedder.embed(["a"])
    assert len(api.inputs) == 1


def test_openai_embedder_reads_the_key_from_the_environment_only(monkeypatch):
    monkeypatch.delenv("EMBED_MISSING_KEY", raising=False)
    with pytest.raises(InfraError, match="EMBED_MISSING_KEY"):
        OpenAIEmbedder("http://embed.test/v1", api_key_env="EMBED_MISSING_KEY")
    keyless = OpenAIEmbedder("http://embed.test/v1", api_key_env=None)  # e.g. local vLLM
    assert keyless._client.api_key == "EMPTY"


def test_make_embedder_openai_kind_is_cached(monkeypatch):
    monkeypatch.setenv("EMBED_TEST_KEY", "sk-test")
    cfg = EmbedderConfig(
        kind="openai",
        model="text-embedding-3-small",
        base_url="http://embed.test/v1",
        api_key_env="EMBED_TEST_KEY",
    )
    embedder = make_embedder(cfg)
    assert isinstance(embedder, CachingEmbedder)
    assert isinstance(embedder.inner, OpenAIEmbedder)
    assert embedder.name == "openai:text-embedding-3-small"
    api = FakeEmbeddingsAPI([])
    embedder.inner._client.embeddings = api  # type: ignore[attr-defined]
    embedder.embed(["x y", "x y"])
    embedder.embed(["x y"])
    assert api.inputs == [["x y"]]
