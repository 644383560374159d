"""The memory store tests run on embedded Qdrant and, where a Qdrant server is
reachable, on that server through the same `MemoryStore` calls:

    DISTILLERY_TEST_QDRANT_URL=http://127.0.0.1:6333 \\
    DISTILLERY_TEST_QDRANT_API_KEY=... python -m pytest tests/workers/memory

The server runs only collections the test creates are removed afterwards (and the
test's own bank ids beforehand, should an earlier run have died); nothing else on the
server is touched.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from distillery.workers.memory.store import MemoryStore

QDRANT_URL_ENV = "DISTILLERY_TEST_QDRANT_URL"
QDRANT_KEY_ENV = "DISTILLERY_TEST_QDRANT_API_KEY"  # memory.store.api_key_env names it
STORE_MODES = ["embedded", "server"]


@contextmanager
def memory_store(mode: str, tmp_path: Path, banks: Sequence[str] = ()) -> Iterator[MemoryStore]:
    if mode == "embedded":
        store = MemoryStore(path=str(tmp_path / "qdrant"))
        try:
            yield store
        finally:
            store.close()
        return
    url = os.environ.get(QDRANT_URL_ENV)
    if not url:
        pytest.skip(f"no Qdrant server to test against: set {QDRANT_URL_ENV}=http://HOST:6333")
    key_env = QDRANT_KEY_ENV if os.environ.get(QDRANT_KEY_ENV) else None
    store = MemoryStore(url=url, api_key_env=key_env)
    for bank in banks:
        store.delete_bank(bank)
    before = set(store.collections())
    try:
        yield store
    finally:
        for name in set(store.collections()) - before:
            store.client.delete_collection(name)
        store.close()
