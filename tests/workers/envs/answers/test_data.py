"""Where the answer benchmarks' data comes from: a folder in the release's layout or
the hub through `datasets` (here, a local folder laid out as the hub repository); a
digest of the split's records in episode identity; missing or malformed data refused
before anything starts, naming what is wrong."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distillery.workers.envs.answer_data import DataProblem
from distillery.workers.envs.base import BenchmarkUnavailable
from distillery.workers.envs.registry import identity_options, make_benchmark

HUB_README = """---
configs:
- config_name: main
  data_files:
  - split: train
    path: main/train-*
  - split: test
    path: main/test-*
---
"""


def _hub_folder(root, rows_by_split):
    """A folder laid out as the hub's openai/gsm8k repository (parquet per split)."""
    (root / "main").mkdir(parents=True)
    (root / "README.md").write_text(HUB_README)
    for split, rows in rows_by_split.items():
        table = pa.Table.from_pylist(rows)
        pq.write_table(table, root / "main" / f"{split}-00000-of-00001.parquet")
    return root


def _rows(path, n):
    return [json.loads(line) for line in path.read_text().splitlines()[:n]]


def test_the_hub_path_loads_through_datasets(gsm8k_dir, tmp_path):
    test, train = _rows(gsm8k_dir / "test.jsonl", 20), _rows(gsm8k_dir / "train.jsonl", 5)
    hub = _hub_folder(tmp_path / "hub", {"test": test, "train": train})
    folder = tmp_path / "folder"
    folder.mkdir()
    for name, rows in (("test", test), ("train", train)):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_hub = make_benchmark("gsm8k", {"hub_id": str(hub)})
    from_folder = make_benchmark("gsm8k", {"data_path": str(folder)})
    assert from_hub.load_tasks() == from_folder.load_tasks()
    assert len(from_hub.load_tasks()) == 20
    # The same data from either source is the same episodes: one identity.
    assert identity_options("gsm8k", {"hub_id": str(hub)}) == identity_options(
        "gsm8k", {"data_path": str(folder)}
    )


def test_mbpp_plus_through_datasets_reads_the_release_file(mbpp_plus_dir):
    from_hub = make_benchmark("mbpp", {"variant": "plus", "hub_id": str(mbpp_plus_dir)})
    from_folder = make_benchmark("mbpp", {"variant": "plus", "data_path": str(mbpp_plus_dir)})
    assert [t.task_id for t in from_hub.load_tasks()] == [
        t.task_id for t in from_folder.load_tasks()
    ]


def test_identity_holds_the_data_not_its_place(gsm8k_dir, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(gsm8k_dir, copy)
    original = identity_options("gsm8k", {"data_path": str(gsm8k_dir)})
    assert identity_options("gsm8k", {"data_path": str(copy)}) == original
    assert "data_path" not in original and len(original["data"]) == 16
    lines = (copy / "test.jsonl").read_text().splitlines()
    row = json.loads(lines[7])
    row["answer"] = row["answer"].replace("####", "#### 1") + "0"
    lines[7] = json.dumps(row)
    (copy / "test.jsonl").write_text("\n".join(lines) + "\n")
    assert identity_options("gsm8k", {"data_path": str(copy)}) != original
    # Another split is another set of tasks.
    brew = identity_options("gsm8k", {"data_path": str(gsm8k_dir), "split": "agentbrew_brew"})
    assert brew["data"] != original["data"]


@pytest.mark.parametrize(
    "name, files, options, said",
    [
        ("gsm8k", {}, {}, "no test.jsonl in"),
        ("gsm8k", {"test.jsonl": '{"question": "q"}\n'}, {}, "has no 'answer' field"),
        ("gsm8k", {"test.jsonl": "not json\n"}, {}, "line 1: not JSON"),
        ("gsm8k", {"test.jsonl": '{"question": "q", "answer": "no marker"}\n'}, {}, "####"),
        ("math", {}, {}, "no test/ folder"),
        ("math", {"test/algebra/1.json": '{"problem": "p"}'}, {}, "has no 'solution' field"),
        ("math", {"test.jsonl": '{"problem": "p"}\n'}, {"variant": "math500"}, "'solution'"),
        ("mbpp", {}, {}, "no sanitized-mbpp.json"),
        ("mbpp", {"sanitized-mbpp.json": '{"a": 1}'}, {}, "not a JSON list"),
        ("mbpp", {}, {"variant": "plus"}, "none of MbppPlus.jsonl.gz"),
        ("mbpp", {"MbppPlus.jsonl": '{"task_id": "Mbpp/2"}\n'}, {"variant": "plus"}, "'prompt'"),
        ("humaneval", {"HumanEval.jsonl": '{"task_id": "x"}\n'}, {}, "'prompt'"),
    ],
)
def test_missing_or_malformed_data_is_refused_naming_it(tmp_path, name, files, options, said):
    for relative, text in files.items():
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with pytest.raises(DataProblem) as caught:
        make_benchmark(name, {**options, "data_path": str(tmp_path)})
    assert said in str(caught.value)
    assert isinstance(caught.value, BenchmarkUnavailable) and "data_path" in caught.value.fix


def test_no_data_and_no_network_says_where_to_get_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataProblem) as caught:
        make_benchmark("gsm8k", {"hub_id": "openai/gsm8k-not-cached"})
    assert "through `datasets`" in str(caught.value)
    assert "grade-school-math" in caught.value.fix


def test_the_cli_stops_before_anything_starts(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "distillery.orchestrator.cli.app", "benchmark=gsm8k",
         f"+benchmark.options.data_path={tmp_path}", "methods=[zero_shot]", "--plan"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert f"gsm8k: no test.jsonl in {tmp_path}" in done.stderr
    assert "Traceback" not in done.stderr
