import json

import pyarrow.parquet as pq

from distillery.orchestrator.cli.memory_cli import main
from distillery.workers.memory.store import MemoryStore
from tests.workers.memory.test_store_retrieval import FNS, SEGS, WFS, WordHashEmbedder, write_amd


def _listed(out: str) -> dict[str, list[str]]:
    """bank -> its row of `memory list` (the header and notes left out)."""
    rows = [
        line.split() for line in out.splitlines() if line[:16].isalnum() and line[16:18] == "  "
    ]
    return {row[0]: row[1:] for row in rows if row[0] != "bank"}


def test_list_show_export(tmp_path, capsys):
    path = str(tmp_path / "qdrant")
    store = MemoryStore(path=path)
    embedder = WordHashEmbedder()
    for kind, entries in (("wf", WFS), ("st", SEGS), ("fn", FNS)):
        write_amd(store, "f" * 64, kind, entries, embedder)
    store.close()

    assert main(["--store", path, "list"]) == 0
    assert _listed(capsys.readouterr().out)["f" * 16][-3:] == ["wf=3", "st=3", "fn=3"]
    assert main(["--store", path, "show", "f" * 64, "--type", "fn", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("== fn: 3 entries") and '"function":' in out
    assert main(["--store", path, "export", "f" * 16, "--out", str(tmp_path / "x")]) == 0
    assert pq.read_table(tmp_path / "x" / "st.parquet").num_rows == 3
    assert main(["--store", path, "show", "nope"]) == 2


def test_store_option_goes_before_or_after_the_subcommand(tmp_path, capsys):
    path = str(tmp_path / "qdrant")
    store = MemoryStore(path=path)
    embedder = WordHashEmbedder()
    write_amd(store, "e" * 64, "wf", WFS, embedder)
    store.close()
    expected = {"e" * 16: ["amd", "?", "?", "?", "?", "wf=3", "st=0", "fn=0"]}
    assert main(["list", "--store", path]) == 0
    assert _listed(capsys.readouterr().out) == expected
    assert main(["--store", path, "list"]) == 0
    assert _listed(capsys.readouterr().out) == expected
    assert main(["show", "e" * 16, "--store", path, "--type", "wf", "--limit", "1"]) == 0
    assert capsys.readouterr().out.startswith("== wf: 3 entries")
    # after the subcommand wins over before it
    assert main(["--store", str(tmp_path / "none"), "list", "--store", path]) == 0
    assert _listed(capsys.readouterr().out) == expected


def test_list_says_where_each_bank_came_from(tmp_path, capsys):
    """The output root's ledger names each bank's method, whose trajectories, its
    benchmark, how many memory tasks and the stage it was built from."""
    root = tmp_path / "runs"
    store = MemoryStore(path=str(root / "qdrant"))
    write_amd(store, "e" * 64, "wf", WFS, WordHashEmbedder())
    store.close()
    collect = root / "stages" / "collect" / ("c" * 16)
    build = root / "stages" / "build" / ("b" * 16)
    for folder, record in (
        (collect, {"key": "c" * 64, "label": "collect teacher=gpt-5-mini bfcl_multi_turn_base",
                   "upstream": [], "identity": {"benchmark": "bfcl_multi_turn_base"}}),
        (build, {"key": "b" * 64, "label": "build amd from teacher=gpt-5-mini "
                 "bfcl_multi_turn_base (140 tasks)", "upstream": [f"collect:{'c' * 16}"],
                 "identity": {}}),
    ):  # fmt: skip
        folder.mkdir(parents=True)
        (folder / "stage.json").write_text(json.dumps(record))
    (build / "output.json").write_text(json.dumps({"bank_id": "e" * 64, "counts": {"wf": 3}}))
    assert main(["list", "--store", str(root / "qdrant")]) == 0  # its root: the parent
    out = capsys.readouterr().out
    assert _listed(out)["e" * 16] == [
        "amd", "teacher=gpt-5-mini", "bfcl_multi_turn_base", "140", f"collect:{'c' * 16}",
        "wf=3", "st=0", "fn=0",
    ]  # fmt: skip
    assert out.splitlines()[0].split() == [
        "bank", "method", "from", "benchmark", "memory", "tasks", "source", "stage", "entries",
    ]  # fmt: skip
