"""SASM through the whole pipeline: the oracle teacher's collection on real BFCL tasks,
SASM's bank built once (deterministic: the oracle is no model) and read by two catalog
entries (k=1, k=2) under self_excluded, the scripted student decomposing each turn,
MLflow child runs tagged with the method and the isolation audit logged."""

from __future__ import annotations

import json

import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.memory.sasm import prompts
from distillery.workers.trajectories import read_episodes
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

pytestmark = pytest.mark.slow

TASKS = [f"multi_turn_base_{n}" for n in (120, 124, 127, 146)]  # TradingBot


@pytest.fixture(scope="module")
def ray_local():
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    yield
    ray.shutdown()


def test_one_collection_one_build_two_reads_isolated(tmp_path, ray_local):
    script = "tests.workers.memory.sasm.scripts:decompose_then_replay"

    def config(url: str):
        return _config(
            tmp_path,
            f"benchmark.task_ids=[{','.join(TASKS)}]",
            "benchmark.limit=null",
            "+method_catalog.sasm_k2={kind: sasm, retrieval: {k: 2}}",
            "methods=[teacher,zero_shot,sasm,sasm_k2]",
            "protocol=self_excluded",
            *_student(url),
        )

    with run_stub_server(script=script) as url:
        cfg = config(url)
        kinds = [key.kind for key in plan_sweep([cfg]).stages]
        assert kinds.count("collect") == 1 and kinds.count("build") == 1
        assert kinds.count("render") == 0 and kinds.count("evaluate") == 3
        sweep = run_sweep([cfg], progress=False)
    # collect, zero-shot, ONE build, the two SASM reads: nothing twice
    assert (sweep.stages_run, sweep.stages_cached) == (5, 0)
    result = sweep.points[0]

    assert sorted(result.task_ids) == TASKS
    assert result.method("teacher").metrics["success_rate"] == 1.0
    for name, k in (("sasm", 1), ("sasm_k2", 2)):
        method = result.method(name)
        assert method.metrics["isolation_violations"] == 0, name
        assert method.metrics["isolation_checked"] > 0, name
        assert method.metrics["off_category"] == 0, name
        assert method.metrics["decomposition_fallbacks"] == 0, name
        records = {r.task_id: r for r in read_episodes(method.episodes_dir)}
        assert sorted(records) == TASKS
        for task_id, record in records.items():
            log = json.loads(record.extra_json)
            assert len(log["decompositions"]) == record.n_turns  # every turn decomposed
            assert log["retrievals"], task_id
            for event in log["retrievals"]:
                assert event["allowed"] and event["source_task_id"] != task_id
                assert event["source_task_id"] in TASKS
                assert event["category"] in ("query", "execute")
            per_turn = {}
            for event in log["retrievals"]:
                key = (event["turn"], event["category"])
                per_turn[key] = per_turn.get(key, 0) + 1
            assert max(per_turn.values()) <= k
            system = json.loads(record.messages_json)[0]["content"]
            assert system.startswith(prompts.MEMORY_HEADER)

    client = MlflowClient(cfg.tracking_uri)
    children = {
        r.data.tags["method"]: r
        for r in client.search_runs(
            [client.get_experiment_by_name("distillery").experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'",
        )
    }
    assert set(children) == {"teacher", "zero_shot", "sasm", "sasm_k2"}
    assert children["sasm_k2"].data.tags["sasm_k"] == "2"
    assert children["sasm"].data.metrics["isolation_violations"] == 0

    # The same sweep again reuses every stage: nothing collected, built or asked.
    with run_stub_server(script=script) as url:
        again = run_sweep([config(url)], progress=False)
        assert stub_stats(url).get("requests", 0) == 0
    assert (again.stages_run, again.stages_cached) == (0, 5)
