"""The toy plugin's memory method (`toy_plugin.memory`), reached only through the
`distillery.memory_methods` entry point: planned, built, stored and read through
distillery's generic seams (registry, memory service, `BankSearch`) with no file of
the project naming it. End to end through the CLI: test_toy_end_to_end.py."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.memory.config import EmbedderConfig, StoreConfig
from distillery.workers.memory.method import MemoryMethod
from distillery.workers.memory.registry import known_methods, memory_method
from distillery.workers.memory.retrieval import Isolation
from distillery.workers.memory_service import MemoryServiceImpl
from distillery.workers.trajectories import CallRecord, StepRecord
from tests.support.memory_service import open_search
from tests.support.records import episode_record
from tests.workers.memory.test_embedding import WordHashEmbedder

CATALOG = ["+method_catalog.recall={kind: toy_recall, retrieval: {k: 1}}"]


def _episode(task_id: str, calls: list[str], success: bool = True):
    step = StepRecord(
        0,
        0,
        "",
        [CallRecord(c, c.split("(")[0], "ok", None, False) for c in calls],
        1,
        1,
        0.1,
        None,
    )
    return episode_record(task_id, success, [step], benchmark="toy", agent="oracle")


def test_registered_by_its_entry_point_and_loaded_only_when_used(toy_plugin):
    assert "toy_recall" in known_methods()
    assert "toy_plugin.memory" not in sys.modules
    method = memory_method("toy_recall")
    assert isinstance(method, MemoryMethod) and method.store_prefix == "toyrecall"


def test_its_own_settings_and_defaults_are_validated_and_planned(toy_plugin):
    def config(*overrides):
        base = ["benchmark=toy", "benchmark.limit=null", "protocol=self_excluded"]
        return to_config(compose(rewrite_role_overrides([*base, *overrides])))

    cfg = config(*CATALOG, "methods=[zero_shot,recall]")
    graph = plan_sweep([cfg])
    assert sorted(k.kind for k in graph.stages) == ["build", "collect", "evaluate", "evaluate"]
    (evaluate,) = [s for s in graph.stages.values() if s.identity.get("method") == "toy_recall"]
    assert evaluate.identity["method"] == "toy_recall"
    assert evaluate.identity["retrieval"]["k"] == 1  # its default threshold (None) too
    assert evaluate.identity["retrieval"]["threshold"] is None
    with pytest.raises(ConfigError, match=r"method_catalog\.recall\.retrieval\.k"):
        config("+method_catalog.recall={kind: toy_recall, retrieval: {k: 0}}", "methods=[recall]")


def test_build_store_search_and_inject_under_isolation(toy_plugin, tmp_path):
    method = memory_method("toy_recall")
    bench_tasks = {
        "toy_0": "add five to the counter",
        "toy_1": "add five to the counter, then read it",
        "toy_2": "reset the counter",
    }

    class Task:
        def __init__(self, task_id: str) -> None:
            self.task_id = task_id
            self.turns = [bench_tasks[task_id]]

    episodes = [
        _episode("toy_0", ["add(amount=5)"]),
        _episode("toy_1", ["add(amount=5)", "get_value()"]),
        _episode("toy_2", ["reset()"]),
        _episode("toy_2", ["add(amount=1)"], success=False),  # never an entry
    ]
    tasks = [Task(e.task_id) for e in episodes]
    bank = asyncio.run(method.build(episodes, tasks, None, None, "all"))
    assert bank.counts() == {"answers": 3} and bank.stats == {"answers.built": 3}
    bank_id = method.bank_id(episodes, None, "none", "all")
    assert bank_id == method.bank_id(list(reversed(episodes)), None, "none", "all")

    service = MemoryServiceImpl(StoreConfig(path=str(tmp_path / "q")), EmbedderConfig(), "")
    service.embedder = WordHashEmbedder()
    try:
        counts = service.write_bank(bank_id, bank)
        assert counts["answers"] == 3
        assert service.has_bank(bank_id)  # its layout found through the registry
        assert service.bank_counts(bank_id) == {"answers": 3}
        assert service.load_bank(bank_id).collections["answers"][0].calls
        isolation = Isolation("self_excluded")
        search = open_search(service, bank_id, "self_excluded", "toy_recall")
        settings = method.settings({"k_wf": 3}, {}, None)  # AMD's defaults are ignored
        task = Task("toy_1")
        hooks = method.hooks(
            task, search, settings, lambda s: isolation.allows(s, task.task_id), None
        )
        prompt = asyncio.run(hooks.before_turn(0, task.turns[0], "SYSTEM"))
    finally:
        service.close()
    # toy_1's own answer is the best match, yet the one of toy_0 is injected.
    assert prompt.startswith("[Toy recall]") and prompt.endswith("\n\nSYSTEM")
    assert "Calls: add(amount=5)" in prompt and "get_value()" not in prompt
    record = hooks.record()
    assert record["isolation_violations"] == 0 and len(record["recalled"]) == 1
    stored = episode_record("toy_1", extra_json=json.dumps(record))
    assert method.metrics([stored]) == {
        "recalled": 1.0,
        "isolation_checked": 1.0,
        "isolation_violations": 0.0,
    }
