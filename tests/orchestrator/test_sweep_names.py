"""Sweeps say what they vary: stage identities read only what a method reads, each
point's lines name what tells it apart, the paper's experiments carry their grids, and
the oracle teacher is never combined with protocol=main (no Ray)."""

from __future__ import annotations

import pytest

from distillery.orchestrator.cli.app import run_cli, validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides
from distillery.orchestrator.core.compose import sweep_points as _sweep_points
from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.planning.descriptors import name_sweep
from distillery.orchestrator.planning.plan import plan_sweep
from tests.orchestrator.test_stages import config


def sweep_points(overrides: list[str], multirun: bool):
    return _sweep_points(rewrite_role_overrides(overrides), multirun)


def _graph(experiment: str, *overrides: str):
    return plan_sweep(validate_sweep(sweep_points([f"experiment={experiment}", *overrides], False)))


def _kinds(graph) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in graph.stages:
        out[key.kind] = out.get(key.kind, 0) + 1
    return out


# -- #8.4 no leakage by construction ----------------------------------------------------


def test_oracle_teacher_with_protocol_main_is_refused_naming_both_keys():
    # Refused when planned (which --cfg, --plan and a run all do): whether a memory
    # method's bank comes from the teacher's collection is the method's answer to the
    # planner.
    with pytest.raises(ConfigError) as err:
        plan_sweep([config("protocol=main")])
    message = str(err.value)
    assert message.startswith("invalid config at protocol.name:")
    assert "teacher=oracle" in message and "protocol=main" in message
    # memory methods are what reads the oracle's memory; without one it is allowed
    assert plan_sweep([config("protocol=main", "methods=[teacher,zero_shot]")]).points
    assert config("protocol=main", "teacher=gpt5_mini").teacher.name == "gpt-5-mini"


def test_the_refusal_is_the_same_for_cfg_plan_and_run(capsys):
    for flag in ("--cfg", "--plan", None):
        argv = ["protocol=main", "benchmark.limit=2", *([flag] if flag else [])]
        assert run_cli(argv) == 2
        err = capsys.readouterr()
        assert "invalid config at protocol.name" in err.err and not err.out


@pytest.mark.parametrize(
    "experiment", ["bfcl_ablation", "bfcl_representation", "bfcl_k_curve", "bfcl_repeated_runs"]
)
def test_main_protocol_experiments_declare_a_model_teacher(experiment):
    for cfg in validate_sweep(sweep_points([f"experiment={experiment}"], False)):
        assert cfg.protocol.name == "main"
        assert cfg.teacher.backend != "oracle" and cfg.teacher.name == "gpt-5-mini"


def test_quickstart_still_runs_offline_with_the_oracle():
    (cfg,) = validate_sweep(sweep_points([], False))
    assert cfg.teacher.backend == "oracle" and cfg.protocol.name == "self_excluded"


# -- #8.5 sweeps say what they vary -------------------------------------------------


def test_a_method_s_stage_ignores_retrieval_settings_it_does_not_read():
    wf_only = ["methods=[amd_wf]"]
    base = plan_sweep([config(*wf_only)])
    for knob in (
        "memory.retrieval.k_st=3",
        "memory.retrieval.k_fn=4",
        "memory.retrieval.threshold_st=0.3",
        "memory.retrieval.representation_fn=text",
        "memory.retrieval.subtask_query=decompose",
        "memory.retrieval.max_subtasks=3",
    ):
        assert set(plan_sweep([config(*wf_only, knob)]).stages) == set(base.stages), knob
    assert set(plan_sweep([config(*wf_only, "memory.retrieval.k_wf=2")]).stages) != set(base.stages)
    # max_subtasks is read only when the student decomposes
    st = ["methods=[amd_wf_st]", "memory.retrieval.subtask_query=decompose"]
    assert set(plan_sweep([config(*st)]).stages) != set(
        plan_sweep([config(*st, "memory.retrieval.max_subtasks=3")]).stages
    )


def test_k_curve_is_figure_5_one_type_at_a_time():
    graph = _graph("bfcl_k_curve")
    settings = {
        (p.retrieval.k_wf, p.retrieval.k_st, p.retrieval.k_fn)
        for p in graph.points.values()
        if p.retrieval is not None
    }
    expected = {(1, 1, 1)} | {(k, 1, 1) for k in range(2, 6)}
    expected |= {(1, k, 1) for k in range(2, 6)} | {(1, 1, k) for k in range(2, 6)}
    assert settings == expected
    assert all(
        p.retrieval.types == ("wf", "st", "fn") for p in graph.points.values() if p.retrieval
    )
    # one collection, one bank, zero-shot once, one evaluation per distinct setting
    assert _kinds(graph) == {"collect": 1, "build": 1, "evaluate": 1 + 13}


def test_the_old_k_grid_no_longer_multiplies_a_workflow_only_method():
    cfgs = validate_sweep(
        sweep_points(
            [
                "teacher=gpt5_mini",
                "methods=[amd_wf]",
                "memory.retrieval.k_wf=1,2,3,5",
                "memory.retrieval.k_st=1,3",
                "memory.retrieval.k_fn=1,3",
            ],
            True,
        )
    )
    assert len(cfgs) == 16
    assert _kinds(plan_sweep(cfgs))["evaluate"] == 4  # was 16 stages for 4 settings


def test_repeated_runs_is_table_5_and_its_seed_reaches_the_sampler():
    graph = _graph("bfcl_repeated_runs")
    students = [p for p in graph.points.values() if p.role == "student"]
    assert {p.method_name for p in students} == {"zero_shot", "amd_wf_st_fn"}
    assert sorted({p.cfg.seed for p in students}) == [0, 1, 2, 3, 4]
    assert {p.model.name for p in students} == {"qwen3-4b"}
    assert all(p.model.temperature > 0 for p in students)  # the runs can differ
    # each run is its own evaluation with its own request seed; collection shared
    assert _kinds(graph) == {"collect": 1, "build": 1, "evaluate": 10}
    seeds = {graph.stages[p.stage].identity["agent"]["seed"] for p in students}
    assert len(seeds) == 5


# -- #13.3 a paper table carries its whole grid --------------------------------------


def test_protocols_experiment_plans_every_protocol_with_zero_shot_on_the_same_tasks():
    graph = _graph("bfcl_protocols")
    by_protocol: dict[str, dict[str, object]] = {}
    for p in graph.points.values():
        by_protocol.setdefault(p.cfg.protocol.name, {})[p.method_name] = p
    assert set(by_protocol) == {"main", "self_excluded", "cross_split"}
    for protocol, methods in by_protocol.items():
        assert set(methods) == {"zero_shot", "amd_wf", "amd_wf_st", "amd_wf_st_fn"}, protocol
        evaluated = {m.split.eval_ids for m in methods.values()}
        assert len(evaluated) == 1, f"{protocol}: zero-shot and memory on other tasks"
    assert len(next(iter({m.split.eval_ids for m in by_protocol["cross_split"].values()}))) == 60
    # zero-shot runs once (its stage is shared by the three protocols' points)
    assert len({m["zero_shot"].stage for m in by_protocol.values()}) == 1
    assert _kinds(graph) == {"collect": 1, "build": 2, "evaluate": 1 + 9}


# -- #13.1 points say what they are --------------------------------------------------


def test_every_point_line_names_what_varies(capsys, plan_offline):
    graph = _graph("bfcl_k_curve")
    names = name_sweep(graph)
    amd = [p for p in graph.points.values() if p.retrieval is not None]
    shown = {names.point(p.point_id) for p in amd}
    assert len(shown) == len(amd) == 13  # no two lines alike
    k3 = next(p for p in amd if p.retrieval.k_st == 3)
    assert names.point(k3.point_id) == "k_wf=1 k_st=3 k_fn=1"
    assert "teacher=gpt-5-mini" in names.shared and "protocol=main" in names.shared

    assert run_cli(["experiment=bfcl_k_curve", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "every point: student=qwen3-4b teacher=gpt-5-mini protocol=main" in out
    assert "amd_wf_st_fn (wf+st+fn) k_wf=1 k_st=3 k_fn=1" in out  # the stage line
    assert "k_wf=5 k_st=1 k_fn=1" in out


def test_protocol_and_seed_and_student_are_named_when_they_vary():
    names = name_sweep(_graph("bfcl_protocols"))
    assert {"protocol=main tasks=200", "protocol=cross_split tasks=60"} <= set(
        names.points.values()
    )
    seeds = name_sweep(_graph("bfcl_repeated_runs"))
    assert {v for v in seeds.points.values()} == {f"seed={s}" for s in range(5)}
    sizes = name_sweep(_graph("bfcl_student_sizes"))
    assert "student=qwen3-1.7b seed=2" in set(sizes.points.values())
    temps = validate_sweep(
        sweep_points(["methods=[zero_shot]", "student.temperature=0.0,0.7"], True)
    )
    assert set(name_sweep(plan_sweep(temps)).points.values()) == {
        "student.temperature=0.0",
        "student.temperature=0.7",
    }


def test_cfg_and_plan_refuse_a_bad_task_id_with_the_same_message(capsys):
    messages = []
    for flag in ("--cfg", "--plan"):
        assert run_cli(["benchmark.task_ids=[no_such_task]", flag]) == 2
        captured = capsys.readouterr()
        assert not captured.out
        messages.append(captured.err)
    assert messages[0] == messages[1] and "no_such_task" in messages[0]


def test_summary_names_each_point_once_with_its_descriptor(capsys):
    from distillery.orchestrator.core.protocols import TaskSplit
    from distillery.orchestrator.driver.run import print_summary
    from distillery.orchestrator.tracking.results import MethodResult, RunResult, SweepResult

    metrics = {
        "success_rate": 0.5,
        "success_rate_ci_low": 0.1,
        "success_rate_ci_high": 0.9,
        "n_scored": 2,
        "mean_steps": 3.0,
        "tokens_in": 10,
        "tokens_out": 2,
        "infra_errors": 0,
    }
    cfg = config()

    def method(name, pid, descriptor):
        return MethodResult(
            name,
            cfg.method(name),
            "student",
            cfg.student,
            "d",
            [],
            metrics,
            None,
            pid,
            "",
            descriptor,
        )

    split = TaskSplit(("t1", "t2"), ("t1", "t2"), "all")
    zero = method("zero_shot", "z", "")
    points = [
        RunResult("s", "dir", split, [zero, method("amd_wf_st_fn", f"a{k}", f"k_st={k}")], None, "")
        for k in (1, 3)
    ]
    print_summary(SweepResult("s", "dir", points, 3, 0, None, "sqlite:///x.db"))
    out = capsys.readouterr().out
    assert out.count("zero_shot ") == 1  # shared by both sweep points: shown once
    assert "k_st=1 success" in out and "k_st=3 success" in out


def test_ablation_sweeps_the_paper_students_unless_the_command_line_names_one():
    graph = _graph("bfcl_ablation")
    students = {p.model.name for p in graph.points.values() if p.role == "student"}
    assert students == {"qwen3-4b", "qwen3-8b", "llama3.1-8b", "gemma4-e4b"}  # paper table 2
    methods = {p.method_name for p in graph.points.values()}
    assert {"zero_shot", "amd_wf", "amd_wf_fn", "amd_wf_st", "amd_wf_st_fn"} <= methods
    only = _graph("bfcl_ablation", "student=qwen3_8b")
    assert {p.model.name for p in only.points.values() if p.role == "student"} == {"qwen3-8b"}
    assert (
        len(validate_sweep(sweep_points(["experiment=bfcl_repeated_runs", "seed=3"], False))) == 1
    )
