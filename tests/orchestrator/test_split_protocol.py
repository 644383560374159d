"""protocol=split: memory from the benchmark's own training split, evaluation on its
test split (AppWorld train -> test_normal), the memory split's size a setting, task ids
unique across splits, the isolation audit by split; BFCL (no splits) is told to use
cross_split. Planned on task listings shaped like AppWorld's (no data folder)."""

from __future__ import annotations

import json

import pytest

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.core.protocols import ids_sha
from distillery.orchestrator.planning import tasks as tasks_module
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.stages.stage import BuildStage, CollectStage, EvaluateStage
from distillery.workers.envs.base import Task
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.retrieval import Isolation

SPLITS = {"train": 90, "test_normal": 168, "test_challenge": 417}


@pytest.fixture
def appworld_splits(monkeypatch):
    """AppWorld's listing by split: `<split>_<i>` in scenarios of three."""
    real = tasks_module._load_tasks

    def load(name, options, limit, task_ids, environment):
        if name != "appworld":
            return real(name, options, limit, task_ids, environment)
        split = json.loads(options).get("split", "test_normal")
        tasks = tuple(
            Task(f"{split}_{i}", "appworld", (f"{split} task {i}",), (), (), f"{split}_{i // 3}")
            for i in range(SPLITS[split])
        )
        return tasks if limit is None else tasks[:limit]

    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    monkeypatch.setattr(tasks_module, "_load_tasks", load)


def graph_of(*overrides: str):
    # The default experiment (quickstart) takes 2 tasks: these read whole splits.
    argv = ["benchmark.limit=null", *overrides]
    points = sweep_points(rewrite_role_overrides(argv), False)
    return plan_sweep(validate_sweep(points))


def test_memory_comes_from_the_training_split_and_evaluation_from_the_test_split(
    appworld_splits,
):
    graph = graph_of(
        "benchmark=appworld",
        "protocol=split",
        "protocol.memory_limit=12",
        "teacher=gpt5_mini",
        "methods=[teacher,zero_shot,amd_wf]",
    )
    points = {p.method_name: p for p in graph.points.values()}
    split = points["amd_wf"].split
    # The first 12 train tasks in the benchmark's order; all 168 test_normal tasks.
    assert split.memory_ids == tuple(f"train_{i}" for i in range(12))
    assert split.eval_ids == tuple(f"test_normal_{i}" for i in range(168))
    assert split.memory_split == "train"
    # Two collections: the memory split's (played with split=train, its own key) for
    # the bank, the evaluated split's for the teacher's own score.
    collects = [s for s in graph.stages.values() if isinstance(s, CollectStage)]
    assert len(collects) == 2
    (memory,) = [s for s in collects if s.options is not None]
    assert memory.options["split"] == "train"
    assert memory.identity["benchmark_options"]["split"] == "train"
    assert graph.needs[memory.key] == set(split.memory_ids)
    (evaluated,) = [s for s in collects if s.options is None]
    assert graph.needs[evaluated.key] == set(split.eval_ids)
    (build,) = [s for s in graph.stages.values() if isinstance(s, BuildStage)]
    assert build.upstream == (memory.key,)
    assert build.identity["memory_task_ids"] == ids_sha(sorted(split.memory_ids))
    assert build.identity["split"] == "train"
    # The evaluation reads the bank under the split's isolation, recorded in its key.
    read = graph.stages[points["amd_wf"].stage]
    assert isinstance(read, EvaluateStage) and read.memory is not None
    assert read.memory.isolation == Isolation("split", ("train",))
    assert read.identity["protocol"] == {
        "name": "split",
        "memory_split": "train",
        "memory_limit": 12,
    }
    # The memory split's size is a setting: another limit is another bank.
    other = graph_of(
        "benchmark=appworld",
        "protocol=split",
        "protocol.memory_limit=30",
        "teacher=gpt5_mini",
        "methods=[amd_wf]",
    )
    (build30,) = [s for s in other.stages.values() if isinstance(s, BuildStage)]
    assert build30.key != build.key


def test_the_isolation_audit_tells_the_splits_apart():
    isolation = Isolation("split", ("train",))
    train = MemorySource("train_1", None, "train", "t", "e1")
    test = MemorySource("test_normal_1", None, "test_normal", "t", "e2")
    assert isolation.allows(train, "test_normal_5")
    assert not isolation.allows(test, "test_normal_5")
    with pytest.raises(ValueError, match="split isolation needs allowed_splits"):
        Isolation("split")


def test_a_split_shared_with_the_evaluation_or_missing_is_refused(appworld_splits):
    with pytest.raises(ValueError, match="are in both the memory split 'test_normal'"):
        graph_of("benchmark=appworld", "protocol=split", "protocol.memory_split=test_normal")
    with pytest.raises(ConfigError, match="'nope' is no split of appworld"):
        graph_of("benchmark=appworld", "protocol=split", "protocol.memory_split=nope")
    with pytest.raises(ConfigError, match="has no splits of its own.*protocol=cross_split"):
        graph_of("benchmark.limit=4", "protocol=split", "methods=[zero_shot]")


def test_a_benchmarks_splits_are_its_split_options_values():
    from distillery.workers.envs.registry import benchmark_splits

    assert {"train", "test_normal", "test_challenge"} <= set(benchmark_splits("appworld"))
    assert {"train", "test"} <= set(benchmark_splits("mbpp"))  # `Literal[...] | None`
    assert benchmark_splits("bfcl_multi_turn_base") == ()
