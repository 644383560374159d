import pyarrow.parquet as pq

from distillery.orchestrator.memory_cli import main
from distillery.workers.memory.store import MemoryStore
from tests.workers.memory.test_store_retrieval import FNS, SEGS, WFS, WordHashEmbedder


def test_list_show_export(tmp_path, capsys):
    path = str(tmp_path / "qdrant")
    store = MemoryStore(path=path)
    embedder = WordHashEmbedder()
    for kind, entries in (("wf", WFS), ("st", SEGS), ("fn", FNS)):
        store.write("f" * 64, kind, entries, embedder.embed([e.key_text for e in entries]))
    store.close()

    assert main(["--store", path, "list"]) == 0
    assert capsys.readouterr().out.strip() == f"{'f' * 16} wf=3 st=3 fn=3"
    assert main(["--store", path, "show", "f" * 64, "--type", "fn", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== fn: 3 entries") and '"function":' in out
    assert main(["--store", path, "export", "f" * 16, "--out", str(tmp_path / "x")]) == 0
    assert pq.read_table(tmp_path / "x" / "st.parquet").num_rows == 3
    assert main(["--store", path, "show", "nope"]) == 2
