"""The memory service without Ray: generic over a method's collections, a stored bank
found by its id alone (its method by the collections' store prefix)."""

from __future__ import annotations

import asyncio

import pytest

from distillery.workers.memory.amd.bank import amd_bank
from distillery.workers.memory.amd.records import STORE_PREFIX
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.config import EmbedderConfig, StoreConfig
from distillery.workers.memory.retrieval import Isolation
from distillery.workers.memory.store import collection_name
from distillery.workers.memory_service import BankSearch, MemoryJob, MemoryServiceImpl
from tests.workers.memory.test_store_retrieval import FNS, SEGS, WFS, WordHashEmbedder

BANK = "d" * 64


@pytest.fixture
def service(tmp_path):
    impl = MemoryServiceImpl(StoreConfig(path=str(tmp_path / "q")), EmbedderConfig(), "")
    impl.embedder = WordHashEmbedder()  # the test double: no model download
    yield impl
    impl.close()


def test_write_has_counts_load_and_drop_a_bank(service):
    bank = amd_bank(WFS, SEGS, FNS)
    counts = service.write_bank(BANK, bank)
    assert counts == {
        "wf": 3,
        "st": 3,
        "fn": 3,
        "embedded_chars": sum(len(e.key_text) for e in [*WFS, *SEGS, *FNS]),
    }
    assert service.has_bank(BANK) and service.has_bank(BANK[:16])
    assert service.bank_counts(BANK) == {"wf": 3, "st": 3, "fn": 3}
    loaded = service.load_bank(BANK)
    assert isinstance(loaded, BuiltBank) and loaded.prefix == STORE_PREFIX
    assert loaded.collections["fn"] == sorted(FNS, key=lambda e: e.memory_id)
    assert [s.name for s in loaded.specs] == ["wf", "st", "fn"]
    assert not service.has_bank("0" * 64)
    dropped = service.drop_bank(BANK)
    assert sorted(dropped) == sorted(collection_name(BANK, t, "amd") for t in ("wf", "st", "fn"))
    assert not service.has_bank(BANK)


def test_a_bank_missing_a_collection_of_its_method_is_not_whole(service):
    """Judged by the method's collections (the registry, by the store prefix), so a
    bank written before collections named their siblings is judged as well."""
    embedder = WordHashEmbedder()
    spec = amd_bank().spec("wf")
    service.store.write(
        BANK, spec, WFS, embedder.embed([e.key_text for e in WFS]), prefix=STORE_PREFIX
    )
    assert service.store.has_bank(BANK)  # the store alone sees one whole collection
    assert not service.has_bank(BANK)  # AMD's bank has three
    assert service.bank_counts(BANK) == {"wf": 3, "st": 0, "fn": 0}


def test_search_over_an_opened_bank_is_isolated_and_generic(service):
    service.write_bank(BANK, amd_bank(WFS, SEGS, FNS))
    isolation = Isolation("self_excluded")
    assert service.open_bank(BANK, isolation) == {"wf": 3, "st": 3, "fn": 3}
    (hits,) = service.search(BANK, isolation, "wf", ["move the report file"], "a", 1, None)
    assert [h.entry.source.task_id for h in hits] == ["c"]  # a's own is never returned
    (fn_hits,) = service.search(BANK, isolation, "fn", ["move it"], "z", 5, None, "mv")
    assert {h.entry.function for h in fn_hits} == {"mv"}
    two = service.search(BANK, isolation, "st", ["move the log", "post a tweet"], "z", 1, None)
    assert len(two) == 2 and all(len(h) == 1 for h in two)
    with pytest.raises(ValueError, match="grouped by function"):
        service.search(BANK, isolation, "fn", ["move it"], "z", 1, None)


def test_bank_search_awaits_the_service_actor(service):
    """`BankSearch` is what a method's hooks get inside an episode worker."""
    service.write_bank(BANK, amd_bank(WFS, SEGS, FNS))
    isolation = Isolation("main")
    service.open_bank(BANK, isolation)

    class Remote:  # the actor handle's `.search.remote(...)`, awaitable
        def __init__(self, impl):
            self.search = self
            self._impl = impl

        async def remote(self, *args):
            return self._impl.search(*args)

    job = MemoryJob(Remote(service), BANK, isolation, None, "amd")
    hits = asyncio.run(BankSearch(job).search("wf", ["move the log file"], "z", 1, None))
    assert [h.entry.memory_id for h in hits[0]] == ["wf:c"]


def test_export_bank_writes_one_file_per_collection(service, tmp_path):
    import pyarrow.parquet as pq

    service.write_bank(BANK, amd_bank(WFS, SEGS, FNS))
    paths = service.export_bank(BANK, str(tmp_path / "out"))
    assert [p.rsplit("/", 1)[1] for p in paths] == ["wf.parquet", "st.parquet", "fn.parquet"]
    assert pq.read_table(paths[1]).column("code").to_pylist()[0].startswith("cd(")


def test_a_bank_stored_before_collections_named_their_method_is_found_again(service):
    """Collections written by the AMD-only store (metadata without prefix, entry type
    or siblings; the same names and payloads) are read as before."""
    service.write_bank(BANK, amd_bank(WFS, SEGS, FNS))
    store = service.store
    for name in store.bank_collections(BANK):  # Qdrant merges metadata: null the new keys
        store.client.update_collection(
            name, metadata=dict.fromkeys(("prefix", "entry_type", "bank_collections"))
        )
        assert not store.metadata(name).get("bank_collections")
    assert service.has_bank(BANK) and service.bank_counts(BANK) == {"wf": 3, "st": 3, "fn": 3}
    assert service.load_bank(BANK).collections["st"] == sorted(SEGS, key=lambda e: e.memory_id)
    isolation = Isolation("main")
    service.open_bank(BANK, isolation)
    (hits,) = service.search(BANK, isolation, "wf", ["post a tweet"], "z", 1, None)
    assert [h.entry.memory_id for h in hits] == ["wf:b"]
    store.client.delete_collection(collection_name(BANK, "fn", STORE_PREFIX))
    assert not service.has_bank(BANK)  # AMD's layout still says a bank has three


def test_a_bank_written_with_a_methods_own_embedder_is_searched_with_it(service):
    """A method's own embedder (ExpeL's original's, `ExpelSettings.embedder`) embeds
    its bank's keys and its queries; the sweep's is not asked, nor for a live view."""
    own = EmbedderConfig(model="sentence-transformers/all-mpnet-base-v2")
    mpnet = WordHashEmbedder()
    service.set_embedder_for(own, mpnet)
    sweeps = service.embedder
    before = sweeps.calls
    service.write_bank(BANK, amd_bank(WFS, SEGS, FNS), own)
    assert mpnet.calls == len(WFS) + len(SEGS) + len(FNS) and sweeps.calls == before
    isolation = Isolation("self_excluded")
    service.open_bank(BANK, isolation, own)
    (hits,) = service.search(BANK, isolation, "wf", ["move the report file"], "a", 1, None)
    assert [h.entry.source.task_id for h in hits] == ["c"]
    assert mpnet.calls > len(WFS) + len(SEGS) + len(FNS) and sweeps.calls == before
    service.put_view("view-1", amd_bank(WFS, SEGS, FNS), isolation, own)
    assert sweeps.calls == before
    # The sweep's own model named as a method's: the sweep's embedder, one instance.
    assert service.embedder_for(EmbedderConfig()) is sweeps
    assert service.embedder_for(None) is sweeps
