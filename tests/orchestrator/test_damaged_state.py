"""State on disk is checked, not trusted: damaged ledger files and a bank emptied in
the store are reported with their paths and rebuilt or ignored, never fatal; an
episode written but not recorded (a kill in between) is not played again."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.stages.stage import StageKey
from distillery.orchestrator.state.ledger import BankOutput, Ledger
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.episodes import EpisodeSummary
from distillery.workers.trajectories import EpisodeRecord, write_episode
from tests.support.records import episode_record


def _record(task_id: str, success: bool | None) -> EpisodeRecord:
    return episode_record(
        task_id,
        success,
        action_format="native",
        steps_per_turn=[1],
        total_steps=1,
        n_llm_calls=1,
        tokens_in=5,
        tokens_out=2,
        llm_latency_s=0.1,
    )


def test_ledger_adopts_written_but_unrecorded_episodes_and_ignores_damage(tmp_path, caplog):
    ledger = Ledger(tmp_path)
    key = StageKey("evaluate", "ab" * 32)
    episodes = ledger.episodes_dir(key)
    recorded = write_episode(episodes, _record("t_0", True))
    ledger.record_episode(key, EpisodeSummary.of(_record("t_0", True), recorded))
    write_episode(episodes, _record("t_1", False))  # killed before its record
    write_episode(episodes, _record("t_2", None))  # an infra failure is not adopted
    (episodes / "t_3.parquet").write_bytes(b"PAR1 cut short")  # a damaged file
    done = ledger.stage_dir(key) / "done"
    (done / "garbage.json").write_bytes(b"")
    (done / "list.json").write_json([1, 2])
    (ledger.stage_dir(key) / "runs" / "x.json").write_bytes(b"{not json")

    with caplog.at_level(logging.WARNING):
        finished = ledger.episodes(key)
        runs = ledger.runs(key)
    assert sorted(finished) == ["t_0", "t_1"] and finished["t_1"].success is False
    assert ledger.intact(finished["t_1"])
    assert (done / "t_1.parquet.json").exists()  # recorded now: the next call reads the record
    assert runs == []
    for path in ("garbage.json", "list.json", "t_3.parquet", "runs/x.json"):
        assert path.split("/")[-1] in caplog.text
    assert sorted(ledger.all_records(key)) == ["t_0", "t_1"]


def test_a_ledger_record_not_named_after_its_task_is_reported_and_ignored(tmp_path, caplog):
    ledger = Ledger(tmp_path)
    key = StageKey("evaluate", "cd" * 32)
    episodes = ledger.episodes_dir(key)
    for task_id in ("t_0", "t_1"):
        written = write_episode(episodes, _record(task_id, True))
        ledger.record_episode(key, EpisodeSummary.of(_record(task_id, True), written))
    done = ledger.stage_dir(key) / "done"
    assert ledger.record_path(key, "t_0") == done / "t_0.parquet.json"
    # t_1's record replaced by a copy of t_0's (a hand edit, a bad copy): it must not
    # stand in for t_1, nor count twice.
    (done / "t_1.parquet.json").write_bytes((done / "t_0.parquet.json").read_bytes())
    (done / "stray.json").write_bytes((done / "t_0.parquet.json").read_bytes())

    with caplog.at_level(logging.WARNING):
        records = ledger.all_records(key)
    assert sorted(records) == ["t_0", "t_1"]
    assert records["t_1"].task_id == "t_1"  # adopted again from its own episode file
    for name in ("t_1.parquet.json", "stray.json"):
        assert f"ignoring ledger record {done / name}" in caplog.text
    assert "written but not recorded" in caplog.text


def test_the_stage_cost_row_counts_only_the_tasks_the_sweep_needs(tmp_path, caplog):
    """A record of a task outside the split (an earlier, larger sweep's, or planted)
    is reported with its path and not counted: it used to inflate the stage's tokens."""
    from types import SimpleNamespace

    from distillery.orchestrator.stages.stage import EvaluateStage
    from distillery.orchestrator.tracking.results import stage_rows
    from distillery.workers.llm.config import ModelConfig

    ledger = Ledger(tmp_path)
    model = ModelConfig(name="m", backend="external", model="m", base_url="http://h/v1")
    stage = EvaluateStage(
        identity={"benchmark": "bfcl_multi_turn_base"}, upstream=(), label="evaluate", model=model
    )
    key = stage.key
    for task_id in ("t_0", "t_1", "t_150"):
        written = write_episode(ledger.episodes_dir(key), _record(task_id, True))
        ledger.record_episode(key, EpisodeSummary.of(_record(task_id, True), written))
    graph = SimpleNamespace(stages={key: stage}, needs={key: {"t_0", "t_1"}})
    sweep = SimpleNamespace(graph=graph, ledger=ledger)

    with caplog.at_level(logging.WARNING):
        (row,) = stage_rows(sweep, key)  # type: ignore[arg-type]
    assert (row["tokens_in"], row["tokens_out"], row["n_llm_calls"]) == (10, 4, 2)
    outside = ledger.record_path(key, "t_150")
    assert f"ledger record {outside} is for task 't_150'" in caplog.text
    assert "t_0.parquet.json" not in caplog.text


def _configs(tmp_path: Path, url: str):
    argv = [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "agent.retry_backoff_s=0",
        "benchmark.limit=2",
        "methods=[amd_wf]",
        "student=external",
        f"student.base_url={url}",
        "student.model=scripted",
        "student.max_retries=1",
    ]
    return [to_config(c) for _, c in sweep_points(rewrite_role_overrides(argv), False)]


def _empty_collection(qdrant: Path, bank_id: str, memory_type: str) -> int:
    from qdrant_client import models

    from distillery.workers.memory.store import MemoryStore, collection_name

    with MemoryStore(path=str(qdrant)) as store:
        name = collection_name(bank_id, memory_type, "amd")
        ids = [p.id for p in store.client.scroll(name, limit=10_000)[0]]
        store.client.delete(name, points_selector=models.PointIdsList(points=ids), wait=True)
        return store.count(name)


@pytest.mark.slow
def test_a_damaged_output_root_is_reported_and_rebuilt_never_fatal(tmp_path, ray_local, caplog):
    from distillery.orchestrator.driver.run import run_sweep

    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as url:
        first = run_sweep(_configs(tmp_path, url), progress=False)
        made = stub_stats(url)["requests"]
        point = first.points[0].methods[0]
        assert point.metrics["bank_st"] > 0
        root = tmp_path / "runs"
        bank_id = json.loads(next(root.glob("stages/build/*/output.json")).read_text())["bank_id"]
        assert _empty_collection(root / "qdrant", bank_id, "st") == 0

        sweep_json = Path(first.sweep_dir) / "sweep.json"
        sweep_json.write_bytes(b"")
        runs_json = next(root.glob("stages/collect/*/runs/*.json"))
        runs_json.write_bytes(b"\x00garbage")
        done = next(root.glob("stages/evaluate/*/done"))
        outside = json.loads((done / "multi_turn_base_0.parquet.json").read_text())
        outside["task_id"] = "multi_turn_base_150"  # a task outside the evaluated split
        (done / "multi_turn_base_150.parquet.json").write_text(json.dumps(outside))
        (done / "garbage.json").write_bytes(b"")
        (done / "multi_turn_base_1.parquet.json").unlink()  # killed after the file

        with caplog.at_level(logging.WARNING):
            again = run_sweep(_configs(tmp_path, url), progress=False)
        assert stub_stats(url)["requests"] == made  # no finished episode was replayed

    assert again.stages_run == 1  # the damaged bank, rebuilt; the rest reused
    rebuilt = again.points[0].methods[0]
    assert rebuilt.metrics["bank_st"] == point.metrics["bank_st"]
    assert rebuilt.metrics["success_rate"] == point.metrics["success_rate"]
    assert [s.task_id for s in rebuilt.summaries] == [s.task_id for s in point.summaries]
    from distillery.workers.memory.store import MemoryStore, collection_name

    with MemoryStore(path=str(root / "qdrant")) as store:
        assert store.count(collection_name(bank_id, "st", "amd")) == point.metrics["bank_st"]
    text = caplog.text
    assert f"bank {bank_id[:16]} is damaged" in text
    assert str(sweep_json) in text and str(runs_json) in text
    assert str(done / "garbage.json") in text
    # The out-of-split record: reported with its path, not counted in the stage's cost.
    assert f"ledger record {done / 'multi_turn_base_150.parquet.json'} is for task" in text
    assert "multi_turn_base_1" in text and "written but not recorded" in text
    assert (done / "multi_turn_base_1.parquet.json").exists()
    assert again.parent_run_id == first.parent_run_id  # found again by its sweep id


def test_a_bank_whose_store_counts_differ_from_its_build_record_is_damaged(monkeypatch):
    """The ledger's own check, for a store that cannot tell (a collection recreated
    without our metadata): entry counts against the build record."""
    from types import SimpleNamespace

    from distillery.orchestrator.execution import memory_stage

    class _Call:
        def __init__(self, value):
            self.value = value

        def remote(self, *_):
            return self.value

    stored = {"wf": 2, "st": 0, "fn": 7}
    stage = memory_stage.MemoryStage(None, None, None, {}, print, str)  # type: ignore[arg-type]
    stage._service = SimpleNamespace(has_bank=_Call(True), bank_counts=_Call(stored))
    monkeypatch.setattr(memory_stage, "ray_get", lambda value, timeout_s, what: value)
    recorded = BankOutput("b" * 64, {"wf": 2, "st": 15, "fn": 7, "embedded_chars": 9})
    assert stage.damage(recorded) == "st: 0 entries, the build recorded 15"
    assert stage.damage(BankOutput("b" * 64, stored)) is None
    stage._service = SimpleNamespace(has_bank=_Call(False), bank_counts=_Call(stored))
    assert "missing or incomplete" in stage.damage(recorded)
