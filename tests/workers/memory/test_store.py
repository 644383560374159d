"""MemoryStore on real local Qdrant collections (embedded folder and :memory:)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from distillery.workers.memory.amd.records import (
    FunctionRecord,
    MemorySource,
    SegmentStep,
    SubtaskSegment,
    WorkflowMemory,
)
from distillery.workers.memory.store import (
    INDEXED_FIELDS,
    MemoryStore,
    collection_name,
    entry_from_payload,
    point_id,
)
from tests.support.qdrant import STORE_MODES, memory_store
from tests.workers.memory.test_embedding import WordHashEmbedder

BANK = "0123456789abcdef" + "f" * 48


def src(task: str, split: str = "all", group: str | None = "G1") -> MemorySource:
    return MemorySource(task, group, split, "gpt-5-mini", f"ep-{task}")


WF = WorkflowMemory(
    "wf:a",
    src("a"),
    "Move report.txt into temp",
    "Use GorillaFileSystem.mv with <FILE_NAME>; check with ls.",
    "mv(source=<FILE_NAME>, destination=<DIR_NAME>)",
    ("GorillaFileSystem.mv", "GorillaFileSystem.ls"),
    fallback=True,
)
ST = SubtaskSegment(
    "st:a:0",
    src("a", group=None),
    0,
    "move the file",
    "Moves the report into the temp folder.",
    (
        SegmentStep("cd(folder=<DIR_NAME>)", "{'current_working_directory': 'temp'}"),
        SegmentStep("mv(source=<FILE_NAME>, destination=<DIR_NAME>)", "ok ünïcode"),
    ),
    "Change directory, then move.",
)
FN = FunctionRecord(
    "fn:a:mv",
    src("a"),
    "mv",
    "mv(source=<FILE_NAME>, destination=<DIR_NAME>)",
    "{'result': 'moved'}",
    "Move report.txt into temp",
    schema={"name": "mv", "parameters": {"type": "dict", "required": ["source"]}},
    text="Moves a file.",
)
ENTRIES = {"wf": [WF], "st": [ST], "fn": [FN]}


@pytest.fixture(params=STORE_MODES)
def store(request, tmp_path):
    with memory_store(request.param, tmp_path, banks=[BANK]) as s:
        yield s


def _fill(store, embedder=None, bank=BANK):
    embedder = embedder or WordHashEmbedder()
    names = {}
    for kind, entries in ENTRIES.items():
        names[kind] = store.create_bank(bank, kind, embedder.dim)
        store.upsert(names[kind], entries, embedder.embed([e.key_text for e in entries]))
    return names


def test_round_trip_of_all_three_entry_types(store):
    names = _fill(store)
    assert names == {t: f"amd_{t}_{BANK[:16]}" for t in ("wf", "st", "fn")}
    for kind, entries in ENTRIES.items():
        assert store.load_entries(names[kind]) == entries  # nested source, steps, schema
        loaded, vectors = store.load(BANK, kind)
        assert loaded == entries and vectors.shape == (1, 64) and vectors.dtype == np.float32
    assert store.has_bank(BANK)
    assert store.list_banks() == {BANK[:16]: {"wf": 1, "st": 1, "fn": 1}}


def test_payload_is_flat_indexed_and_representation_independent(store):
    names = _fill(store)
    (point,) = store.client.retrieve(names["st"], [point_id(ST.memory_id)], with_payload=True)
    payload = point.payload
    assert payload["memory_type"] == "st" and payload["source_task_id"] == "a"
    assert payload["source_group_id"] is None and payload["split"] == "all"
    assert payload["teacher"] == "gpt-5-mini" and payload["label"] == "move the file"
    assert isinstance(payload["entry"], dict)  # a nested JSON-able dict, not a string
    assert payload["entry"]["steps"][1]["observation"] == "ok ünïcode"
    assert payload["entry"]["text"] and payload["entry"]["steps"]  # text and code both kept
    (fn_point,) = store.client.retrieve(names["fn"], [point_id(FN.memory_id)], with_payload=True)
    assert fn_point.payload["function"] == "mv" and "label" not in fn_point.payload
    assert set(INDEXED_FIELDS) <= set(payload) | {"function"}


def test_point_ids_are_deterministic_so_rewrites_are_idempotent(store):
    names = _fill(store)
    store.upsert(names["wf"], [WF], WordHashEmbedder().embed([WF.key_text]))
    assert store.count(names["wf"]) == 1
    assert point_id("wf:a") == point_id("wf:a") != point_id("wf:b")


def test_legacy_string_payload_still_loads():
    from dataclasses import asdict

    payload = {"memory_type": "fn", "entry": json.dumps(asdict(FN))}
    assert entry_from_payload(payload) == FN


def test_an_interrupted_write_is_not_a_bank(store):
    embedder = WordHashEmbedder()
    _fill(store)
    store.create_bank(BANK, "fn", embedder.dim)  # recreated, never filled: a crash
    assert not store.has_bank(BANK)
    assert store.has_bank(BANK, types=("wf", "st"))
    name = collection_name(BANK, "fn")
    store.upsert(name, [FN], embedder.embed([FN.key_text]))
    assert store.has_bank(BANK)


def test_a_bank_emptied_behind_our_back_is_not_a_bank(store):
    """Points deleted after the write finished (a collection emptied by hand or by
    another tool): the count no longer matches the one the write recorded."""
    from qdrant_client import models

    names = _fill(store)
    assert store.has_bank(BANK)
    store.client.delete(
        names["st"], points_selector=models.PointIdsList(points=[point_id(ST.memory_id)])
    )
    assert store.count(names["st"]) == 0
    assert not store.is_complete(names["st"]) and not store.has_bank(BANK)


def test_empty_types_get_an_empty_complete_collection(store):
    store.write(BANK, "st", [], np.zeros((0, 1), np.float32))
    assert store.is_complete(collection_name(BANK, "st"))
    assert store.load(BANK, "st")[0] == []


def test_upsert_validates_its_input(store):
    embedder = WordHashEmbedder()
    name = store.create_bank(BANK, "wf", embedder.dim)
    with pytest.raises(ValueError, match="entries but vectors"):
        store.upsert(name, [WF], np.zeros((2, 64), np.float32))
    with pytest.raises(ValueError, match="64-d"):
        store.upsert(name, [WF], np.zeros((1, 8), np.float32))
    with pytest.raises(ValueError, match="holds wf"):
        store.upsert(name, [FN], embedder.embed([FN.key_text]))
    with pytest.raises(ValueError, match="not a memory bank collection"):
        store.upsert("other", [WF], embedder.embed([WF.key_text]))


def test_delete_bank_and_count(store):
    _fill(store)
    _fill(store, bank="9" * 64)
    assert store.count(collection_name(BANK, "fn")) == 1
    assert len(store.delete_bank(BANK[:16])) == 3
    assert set(store.list_banks()) == {"9" * 16}
    assert not store.has_bank(BANK)


def test_export_parquet(store, tmp_path):
    import pyarrow.parquet as pq

    names = _fill(store)
    table = pq.read_table(store.export_parquet(names["fn"], tmp_path / "fn.parquet"))
    (row,) = table.to_pylist()
    assert row["function"] == "mv" and row["source_task_id"] == "a" and row["split"] == "all"
    assert row["instruction"] == FN.instruction and row["key_text"] == FN.instruction
    assert json.loads(row["schema_json"]) == FN.schema
    assert entry_from_payload({"memory_type": "fn", "entry": row["entry_json"]}) == FN
    # the (bank id, type, path) form
    st = pq.read_table(store.export_parquet(BANK, "st", tmp_path / "st.parquet")).to_pylist()
    assert st[0]["label"] == "move the file" and len(json.loads(st[0]["steps_json"])) == 2
    assert st[0]["code"] == ST.code


def test_embedded_folder_persists_and_is_locked_to_one_client(tmp_path):
    path = str(tmp_path / "qdrant")
    with MemoryStore(path=path) as first:
        _fill(first)
        with pytest.raises(RuntimeError, match="only one may own it"):
            MemoryStore(path=path)
        first.create_bank("c" * 64, "wf", 64)  # never filled
    with MemoryStore(path=path) as reopened:
        assert reopened.has_bank(BANK)
        assert reopened.load_entries(collection_name(BANK, "st")) == [ST]
        assert not reopened.has_bank("c" * 64, types=("wf",))  # the marker persists


def test_in_memory_store():
    with MemoryStore() as store:
        assert store.mode == "memory" and store.embedded
        _fill(store)
        assert store.has_bank(BANK)


def test_server_mode_constructs_the_client_with_url(monkeypatch):
    import qdrant_client

    made = []

    class RecordingClient:
        def __init__(self, **kwargs):
            made.append(kwargs)

    monkeypatch.setattr(qdrant_client, "QdrantClient", RecordingClient)
    monkeypatch.setenv("QDRANT_TEST_KEY", "secret")
    store = MemoryStore(url="http://qdrant:6333", api_key_env="QDRANT_TEST_KEY")
    assert made == [{"url": "http://qdrant:6333", "api_key": "secret"}]
    assert store.mode == "server" and not store.embedded and store.location == "http://qdrant:6333"
    MemoryStore(url="http://qdrant:6333")
    assert made[-1] == {"url": "http://qdrant:6333", "api_key": None}
    monkeypatch.delenv("QDRANT_TEST_KEY")
    with pytest.raises(ValueError, match="QDRANT_TEST_KEY"):
        MemoryStore(url="http://qdrant:6333", api_key_env="QDRANT_TEST_KEY")
    with pytest.raises(ValueError, match="either path"):
        MemoryStore(path="/tmp/x", url="http://qdrant:6333")
