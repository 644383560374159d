"""Stage identities, the sweep's stage graph, the ledger and sweep expansion (no Ray)."""

from __future__ import annotations

import pytest

from distillery.orchestrator.core.compose import (
    compose,
    expand_grid,
    rewrite_role_overrides,
    sweep_points,
)
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.plan_listing import format_plan, stage_status
from distillery.orchestrator.stages import stage as stages
from distillery.orchestrator.state.ledger import BankOutput, Ledger
from distillery.workers.episodes import EpisodeSummary
from distillery.workers.trajectories import write_episode
from tests.workers.test_trajectories import _record

BASE = ["benchmark.limit=3", "methods=[teacher,zero_shot,amd_wf_st_fn]"]


def config(*overrides: str):
    return to_config(compose(rewrite_role_overrides([*BASE, *overrides])))


def keys(cfg) -> dict[str, set[str]]:
    graph = plan_sweep([cfg])
    out: dict[str, set[str]] = {}
    for key in graph.stages:
        out.setdefault(key.kind, set()).add(key.digest)
    return out


def test_same_config_same_keys():
    assert keys(config()) == keys(config())


@pytest.mark.parametrize(
    "knob",
    [
        "cluster.num_workers=7",
        "cluster.episodes_per_worker=3",
        "student.replicas=3",
        "student.max_concurrency_per_server=2",
        "student.request_timeout_s=5",
        "student.max_response_bytes=1000",
        "student.name=renamed",
        "memory.builder.concurrency=2",
        "output_dir=/elsewhere",
        "tracking.experiment=other",
        "agent.episode_timeout_s=9",
        "run_name=another",
    ],
)
def test_runtime_knobs_keep_every_key(knob):
    assert keys(config(knob)) == keys(config())


def test_prompt_change_renews_agent_stages(monkeypatch):
    before = keys(config())
    from distillery.workers.envs import bfcl

    monkeypatch.setattr(bfcl, "NATIVE_SYSTEM_PROMPT", bfcl.NATIVE_SYSTEM_PROMPT + " Be brief.")
    after = keys(config())
    assert after["collect"] != before["collect"]
    assert after["evaluate"].isdisjoint(before["evaluate"])


@pytest.mark.parametrize(
    "option",
    ["native_system_prompt", "positional_args", "report_invalid_calls", "json_schema_tools"],
)
def test_a_deviation_from_bfcl_renews_agent_stages_and_is_tagged(option):
    _renews_and_is_tagged(option)
    # The key they had as agent options names where they went.
    with pytest.raises(ConfigError) as err:
        config(f"agent.{option}=true")
    assert str(err.value) == (
        f"invalid config at agent.{option}: moved to benchmark.options.{option} (a deviation "
        f"from the benchmark's own pipeline is the benchmark's option): set "
        f"+benchmark.options.{option}=true"
    )


@pytest.mark.parametrize(
    "option",
    [
        "strip_think_blocks",
        "empty_arguments_as_object",
        "refuse_arithmetic",
        "rebuild_assistant_message",
        "model_sampling",
    ],
)
def test_a_former_repair_of_bfcl_replies_renews_agent_stages_and_is_tagged(option):
    _renews_and_is_tagged(option)


def _renews_and_is_tagged(option: str) -> None:
    from distillery.orchestrator.tracking.results import point_descriptors
    from distillery.workers.envs.registry import known_deviations

    on = f"+benchmark.options.{option}=true"  # BFCL's deviations are BFCL's options
    before, after = keys(config()), keys(config(on))
    assert after["collect"] != before["collect"]
    assert after["evaluate"].isdisjoint(before["evaluate"])
    cfg = config(on)
    assert cfg.benchmark.deviations() == (option,)
    collect = next(s for s in plan_sweep([cfg]).stages.values() if s.key.kind == "collect")
    # Identified by name as when they were agent options: the same keys as before.
    assert collect.identity["deviations"] == [option]
    assert "benchmark_options" not in collect.identity
    point = next(iter(plan_sweep([cfg]).points.values()))
    # Recorded after the deviations BFCL's adapter has whatever the options.
    known = ",".join(known_deviations("bfcl_multi_turn_base"))
    assert point_descriptors(point)["deviations"] == f"{known},{option}"
    default = next(iter(plan_sweep([config()]).points.values()))
    assert point_descriptors(default)["deviations"] == known


def test_deviations_are_off_by_default():
    assert config().benchmark.deviations() == ()


def test_code_version_change_renews_stage_and_downstream(monkeypatch):
    before = keys(config())
    monkeypatch.setattr(stages.BuildStage, "code_version", "2")
    after = keys(config())
    assert after["collect"] == before["collect"]
    assert after["build"] != before["build"]
    # evaluate stages reading the new bank change too; zero-shot does not
    assert len(after["evaluate"] & before["evaluate"]) == 1


def test_retrieval_change_only_renews_the_memory_evaluation():
    before, after = keys(config()), keys(config("memory.retrieval.k_st=3"))
    assert after["collect"] == before["collect"] and after["build"] == before["build"]
    assert len(after["evaluate"] - before["evaluate"]) == 1


def test_seed_renews_student_stages_only():
    llm_teacher = "teacher=gpt5_mini"
    before, after = keys(config(llm_teacher)), keys(config(llm_teacher, "seed=1"))
    assert after["collect"] == before["collect"]  # every seed reads the same memory
    assert after["build"] == before["build"]
    assert after["evaluate"].isdisjoint(before["evaluate"])


def test_sweep_shares_stages():
    cfgs = [
        config(f"memory.retrieval.k_wf={k}", f"memory.retrieval.representation_st={r}")
        for k in (1, 2, 3)
        for r in ("code", "text")
    ]
    graph = plan_sweep(cfgs)
    kinds = [k.kind for k in graph.stages]
    assert kinds.count("collect") == 1
    assert kinds.count("build") == 1
    assert kinds.count("render") == 1  # text renderings layered once on the bank
    assert kinds.count("evaluate") == 1 + 6  # zero-shot once, one per memory point
    # teacher and zero-shot points are the same in every sweep point: logged once
    assert len(graph.points) == 2 + 6


def test_shared_runtime_is_enforced():
    with pytest.raises(ValueError, match="output_dir"):
        plan_sweep([config("output_dir=a"), config("output_dir=b")])


def test_plan_reports_cached_and_partial_stages(tmp_path):
    cfg = config(f"output_dir={tmp_path}")
    graph = plan_sweep([cfg])
    ledger = Ledger(tmp_path)
    collect = next(k for k in graph.stages if k.kind == "collect")
    summary = _write_done(ledger, collect, "multi_turn_base_0")
    text = format_plan(graph, stage_status(graph, ledger))
    assert "run 2 of 3 episodes (1 cached)" in text
    assert "0 stage(s) cached, 4 to run" in text
    assert summary.finished


def _write_done(ledger: Ledger, key, task_id: str, success: bool = True) -> EpisodeSummary:
    record = _record(task_id, success=success)
    written = write_episode(ledger.episodes_dir(key), record)
    summary = EpisodeSummary.of(record, written)
    ledger.record_episode(key, summary)
    return summary


def test_ledger_detects_corrupted_and_missing_files(tmp_path):
    ledger = Ledger(tmp_path)
    key = stages.StageKey("collect", "ab" * 32)
    good = _write_done(ledger, key, "t1")
    bad = _write_done(ledger, key, "t2")
    gone = _write_done(ledger, key, "t3")
    _write_done(ledger, key, "t4", success=None)  # an infra failure: re-run on resume
    from pathlib import Path

    Path(bad.file).write_bytes(Path(bad.file).read_bytes()[:-20])  # cut short
    Path(gone.file).unlink()
    assert set(ledger.episodes(key)) == {good.task_id}
    assert set(ledger.all_records(key)) == {"t1", "t2", "t3", "t4"}


def test_ledger_on_a_filesystem_uri():
    ledger = Ledger("memory://bucket/root")
    key = stages.StageKey("evaluate", "cd" * 32)
    _write_done(ledger, key, "t1")
    assert set(ledger.episodes(key)) == {"t1"}
    ledger.record_output(key, BankOutput("x", {"wf": 2}, {"wf.requests": 3}))
    assert ledger.output(key) == BankOutput("x", {"wf": 2}, {"wf.requests": 3}, reused=False)


def test_expand_grid_and_errors():
    assert expand_grid(["a=1,2", "b=x"], multirun=True) == [["a=1", "b=x"], ["a=2", "b=x"]]
    with pytest.raises(ConfigError, match="-m"):
        expand_grid(["a=1,2"], multirun=False)


def test_sweep_list_in_config_times_command_line_grid():
    points = sweep_points(
        ["benchmark.limit=2", "+sweep.seed=[0,1]", "memory.retrieval.k_wf=1,2"],
        multirun=True,
    )
    pairs = {(int(c.seed), int(c.memory.retrieval["k_wf"])) for _, c in points}
    assert pairs == {(0, 1), (0, 2), (1, 1), (1, 2)}


def test_sweep_list_selects_models_by_group():
    points = sweep_points(["+sweep.student=[qwen3_4b,qwen3_8b]"], multirun=False)
    assert [c.student.name for _, c in points] == ["qwen3-4b", "qwen3-8b"]


def test_cli_plan_prints_the_graph_and_runs_nothing(tmp_path, capsys):
    from distillery.orchestrator.cli.app import run_cli

    code = run_cli(["benchmark.limit=2", f"output_dir={tmp_path}", "--plan"])
    out = capsys.readouterr().out
    assert code == 0
    assert "plan: 1 sweep point(s), 3 evaluation point(s), 4 stage(s)" in out
    assert "Nothing ran" in out
    assert not (tmp_path / "stages").exists()


def test_cli_rejects_a_grid_without_multirun(capsys):
    from distillery.orchestrator.cli.app import run_cli

    assert run_cli(["seed=0,1", "--plan"]) == 2
    assert "distillery -m seed=0,1" in capsys.readouterr().err


def test_server_pool_starts_each_model_once_and_stops_it_after_its_last_stage(monkeypatch):
    from distillery.orchestrator.execution.server_pool import ServerPool
    from distillery.orchestrator.planning.plan import server_key
    from distillery.workers.llm import pool as pools
    from distillery.workers.storage import Location

    launched: list[str] = []
    stopped: list[str] = []

    class Pool:
        def __init__(self, model):
            self.name = model.name
            self.endpoints = [f"http://{model.name}/v1"]
            self.directory = None
            self.nodes = ["n1"]

        def stats(self):
            return {"replica_restarts": 0}

        def shutdown(self):
            stopped.append(self.name)

    def fake_start(model, log_dir, on_event, node_address, placement_timeout_s=None):
        launched.append(model.name)
        return Pool(model)

    monkeypatch.setattr(pools, "start_pool", fake_start)
    cfgs = [config("teacher=qwen3_8b", f"memory.retrieval.k_wf={k}") for k in (1, 2)]
    graph = plan_sweep(cfgs)
    pool = ServerPool(graph, Location.of("/tmp/logs"), print)
    order = sorted(graph.stages, key=graph.depth)
    for i, key in enumerate(order):
        model = graph.stages[key].model
        if model is not None:
            pool.endpoints(model)
        pool.release_unused(order[i + 1 :])
    # the teacher (collect, build) and the student (zero-shot, 2 memory stages) each
    # started once; the teacher stopped before the students' memory stages ended
    assert sorted(launched) == ["qwen3-8b", "smollm2-135m"]
    assert stopped == ["qwen3-8b", "smollm2-135m"]
    assert server_key(cfgs[0].student) == server_key(cfgs[1].student)
