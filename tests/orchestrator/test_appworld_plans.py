"""The paper's AppWorld (and ToolSandbox) experiments as configs: `--plan` shows which
stages they share — one teacher collection per teacher, one bank per (teacher, memory
method, protocol), read by every student, seed, k and representation.

Planning lists the benchmark's tasks (stage keys hash the task ids, cross_split splits
AppWorld's scenarios), and AppWorld lists them from the user's data folder through a
worker in its own venv. The structure tests below hand the planner a task listing
shaped like the real one instead (`listing`: 168 test_normal tasks in 56 scenarios of
three, ToolSandbox's 129 base scenarios), so they run in a second; the slow
test plans one experiment through the real adapter on the synthetic data folder of
tests/workers/envs/appworld, and a missing data folder is refused with the fix."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from distillery.orchestrator.cli.app import run_cli, validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning import tasks as tasks_module
from distillery.orchestrator.planning.plan import StageGraph, plan_sweep
from distillery.orchestrator.stages.stage import BuildStage, EvaluateStage
from distillery.workers.envs.base import Task
from distillery.workers.memory.registry import memory_method
from tests.workers.envs.appworld.conftest import appworld_data, appworld_ready  # noqa: F401
from tests.workers.envs.conftest import appworld_envs  # noqa: F401  (fixtures)

APPWORLD_SCENARIOS = 56  # test_normal: 168 tasks, three per scenario
TOOLSANDBOX_BASE = 129  # the base scenarios, the RapidAPI ones included (network=true)


def _appworld_tasks() -> tuple[Task, ...]:
    return tuple(
        Task(f"{s:07x}_{i}", "appworld", (f"task {i} of scenario {s}",), (), (), f"{s:07x}")
        for s in range(APPWORLD_SCENARIOS)
        for i in (1, 2, 3)
    )


def _toolsandbox_tasks() -> tuple[Task, ...]:
    return tuple(
        Task(f"scenario_{i}", "toolsandbox", (f"request {i}",), (), ())
        for i in range(TOOLSANDBOX_BASE)
    )


# Split sizes of the benchmarks listed without their data (the releases'): AppWorld's
# train (90 tasks in 30 scenarios), MATH's and GSM8K's train and test (their AgentBrew
# partitions: the first 1,000 of train, all of test).
ANSWER_SPLITS = {"math": (7500, 5000), "gsm8k": (7473, 1319)}
BREW_SPLITS = ("agentbrew_brew", "agentbrew_train")  # MATH's brew orders (of train)


def _appworld_train_tasks() -> tuple[Task, ...]:
    return tuple(
        Task(f"t{s:06x}_{i}", "appworld", (f"train task {i} of scenario {s}",), (), (), f"t{s:06x}")
        for s in range(30)
        for i in (1, 2, 3)
    )


def _answer_tasks(name: str, split: str) -> tuple[Task, ...]:
    train, test = ANSWER_SPLITS[name]
    source, size = ("train", train) if split in ("train", *BREW_SPLITS) else ("test", test)
    size = min(size, 1000) if split == "agentbrew_brew" else size
    return tuple(Task(f"{source}_{i}", name, (f"problem {i}",), (), ()) for i in range(size))


# MBPP's AgentBrew partitions (docs/benchmarks/code.md): the sanitized brew split (257 of
# ids 11-510), its test split (163 above 510) and MBPP+'s test split (154), by id.
MBPP_SPLITS = {
    ("sanitized", "agentbrew_brew"): range(11, 11 + 257),
    ("sanitized", "agentbrew_test"): range(511, 511 + 163),
    ("plus", "agentbrew_test"): range(511, 511 + 154),
}


def _mbpp_tasks(options: dict) -> tuple[Task, ...]:
    variant = options.get("variant") or "sanitized"
    ids = MBPP_SPLITS[(variant, options.get("split") or "agentbrew_test")]
    return tuple(Task(f"Mbpp/{i}", "mbpp", (f"problem {i}",), (), ()) for i in ids)


def use_listing(monkeypatch) -> dict[str, tuple[Task, ...]]:
    """Hands the planner a task listing shaped like the real benchmarks' (no data, no
    venv); also used by tests/orchestrator/test_readme_commands.py for the command
    lines of these experiments' configs. AppWorld's train split, the math benchmarks
    and MBPP(+) (without a data_path) are listed by split."""
    listings = {"appworld": _appworld_tasks(), "toolsandbox": _toolsandbox_tasks()}
    real = tasks_module._load_tasks

    def load(name, options, limit, task_ids, environment):
        split = json.loads(options).get("split")
        if name in ANSWER_SPLITS and not json.loads(options).get("data_path"):
            tasks = _answer_tasks(name, split or "test")
        elif name == "mbpp" and not json.loads(options).get("data_path"):
            tasks = _mbpp_tasks(json.loads(options))
        elif name not in listings:  # another benchmark (BFCL): its own listing
            return real(name, options, limit, task_ids, environment)
        else:
            tasks = (
                _appworld_train_tasks()
                if (name, split) == ("appworld", "train")
                else (listings[name])
            )
        if task_ids is not None:
            tasks = tuple(t for t in tasks if t.task_id in set(task_ids))
        return tasks if limit is None else tasks[:limit]

    monkeypatch.setattr(tasks_module, "_load_tasks", load)
    answers = {name: _answer_tasks(name, "test") for name in ANSWER_SPLITS}
    return {**listings, **answers, "mbpp": _mbpp_tasks({})}


@pytest.fixture
def listing(monkeypatch):
    return use_listing(monkeypatch)


def _graph(experiment: str, *overrides: str) -> StageGraph:
    points = sweep_points(rewrite_role_overrides([f"experiment={experiment}", *overrides]), False)
    return plan_sweep(validate_sweep(points))


def _kinds(graph: StageGraph) -> dict[str, int]:
    return dict(Counter(key.kind for key in graph.stages))


def _builds(graph: StageGraph) -> dict:
    return {k: s for k, s in graph.stages.items() if isinstance(s, BuildStage)}


def _evaluations(graph: StageGraph) -> list[EvaluateStage]:
    return [s for s in graph.stages.values() if isinstance(s, EvaluateStage)]


def _bank_of(stage: EvaluateStage):
    (bank,) = [u for u in stage.upstream if u.kind in ("build", "render")]
    return bank


@pytest.mark.parametrize(
    ("experiment", "benchmark", "tasks"),
    [("appworld_table1", "appworld", 168), ("toolsandbox_table1", "toolsandbox", 129)],
)
def test_table1_one_collection_and_one_build_per_memory_method(
    listing, experiment, benchmark, tasks
):
    graph = _graph(experiment)
    cfg = graph.configs[0]
    assert cfg.benchmark.name == benchmark and len(graph.tasks) == tasks
    assert cfg.teacher.name == "gpt-5-mini" and cfg.protocol.name == "main"
    assert {c.student.name for c in graph.configs} == {
        "qwen3-4b",
        "gemma4-e4b",
        "qwen3-8b",
        "llama3.1-8b",
    }
    assert {c.seed for c in graph.configs} == {0, 1}
    memory = [m for m in cfg.methods if m not in ("teacher", "zero_shot")]
    assert len(memory) == 5 and memory[-1] == "amd_wf_st_fn"
    # the AMD authors' ports of the baselines on that benchmark (the paper's "adapted")
    assert {f"reasoning_bank_amd_{benchmark}", f"memp_amd_{benchmark}"} <= set(memory)

    (collect,) = [k for k in graph.stages if k.kind == "collect"]
    builds = _builds(graph)
    assert all(s.upstream == (collect,) for s in builds.values())
    assert sorted(s.source.kind for s in builds.values()) == sorted(
        ["reasoning_bank", "memp_amd", "sasm", "trajectory_rag", "amd"]
    )
    # zero-shot + 5 memory methods per student (4) and seed (2): nothing duplicated
    evaluations = _evaluations(graph)
    assert len(evaluations) == 4 * 2 * 6
    for stage in evaluations:
        if stage.memory is not None and _bank_of(stage).kind == "build":
            # each method reads its own method's bank (the identity names the kind)
            assert builds[_bank_of(stage)].source.kind == stage.identity["method"]
    assert _kinds(graph) == {"collect": 1, "build": 5, "evaluate": 48}


def test_table1_plan_prints_one_collection_and_one_build_per_method(listing, capsys, plan_offline):
    assert run_cli(["experiment=appworld_table1", "--plan"]) == 0
    out = capsys.readouterr().out
    assert "benchmark=appworld tasks=168" in out
    assert len(re.findall(r"^  collect:", out, re.M)) == 1
    assert len(re.findall(r"^  build:", out, re.M)) == 5


def test_ablation_one_amd_bank_for_every_variant_and_student_memory_per_student(listing):
    graph = _graph("appworld_ablation")
    assert {c.student.name for c in graph.configs} == {
        "qwen3-4b",
        "qwen3-8b",
        "llama3.1-8b",
        "gemma4-e4b",
    }
    builds = _builds(graph)
    amd = [k for k, s in builds.items() if s.source.kind == "amd"]
    assert len(amd) == 1  # WF, WF+FN, WF+ST, WF+ST+FN read the same bank
    for stage in _evaluations(graph):
        if stage.identity.get("method", "").startswith("amd_"):
            assert _bank_of(stage) == amd[0]
    # the teacher once, AMD's bank once, one student-memory bank per student
    assert _kinds(graph) == {"collect": 1, "build": 1 + 4, "evaluate": 4 * 6}


def test_teacher_sweep_one_collection_and_one_bank_per_teacher(listing, capsys, plan_offline):
    graph = _graph("appworld_teachers")
    teachers = {"gpt-5.5", "deepseek-v4-pro", "gpt-5-mini", "qwen3-32b"}
    assert {c.teacher.name for c in graph.configs} == teachers
    assert {c.student.name for c in graph.configs} == {"qwen3-4b", "qwen3-8b"}
    collects = {k: s for k, s in graph.stages.items() if k.kind == "collect"}
    assert {s.model.name for s in collects.values()} == teachers  # each teacher once
    builds = _builds(graph)
    assert len(builds) == 4 and {s.upstream for s in builds.values()} == {(k,) for k in collects}
    # each (teacher, student) reads its teacher's bank: 8 AMD evaluations on 4 banks,
    # two students each; zero-shot once per student, whatever the teacher
    amd = [s for s in _evaluations(graph) if s.memory is not None]
    assert len(amd) == 8 and Counter(_bank_of(s) for s in amd) == {k: 2 for k in builds}
    assert len([s for s in _evaluations(graph) if s.memory is None]) == 2
    assert _kinds(graph) == {"collect": 4, "build": 4, "evaluate": 8 + 2}

    assert run_cli(["experiment=appworld_teachers", "--plan"]) == 0
    out = capsys.readouterr().out
    for teacher in teachers:
        assert len(re.findall(rf"^  collect:.*teacher={teacher} appworld", out, re.M)) == 1


def test_student_sizes_share_one_collection_and_one_bank(listing):
    graph = _graph("appworld_student_sizes")
    assert {c.student.name for c in graph.configs} == {
        "qwen3-1.7b",
        "qwen3-4b",
        "qwen3-8b",
        "qwen3-14b",
    }
    assert {c.teacher.name for c in graph.configs} == {"gpt-5-mini"}
    # four sizes x two seeds, zero-shot and AMD each, on one bank
    assert _kinds(graph) == {"collect": 1, "build": 1, "evaluate": 4 * 2 * 2}


def test_representation_builds_once_and_renders_text_on_that_bank(listing):
    graph = _graph("appworld_representation")
    ((build, _),) = _builds(graph).items()
    renders = [k for k in graph.stages if k.kind == "render"]
    assert len(renders) == 1 and graph.stages[renders[0]].upstream == (build,)
    shown = {
        p.method_name: (
            p.retrieval.representation_wf,
            p.retrieval.representation_st,
            p.retrieval.representation_fn,
        )
        for p in graph.points.values()
        if p.retrieval is not None
    }
    assert shown == {
        "rep_tcc": ("text", "code", "code"),
        "rep_ccc": ("code", "code", "code"),
        "rep_ttc": ("text", "text", "code"),
        "rep_tct": ("text", "code", "text"),
        "rep_ttt": ("text", "text", "text"),
    }
    # the all-code row reads the build itself, the others its text rendering
    for stage in _evaluations(graph):
        if stage.memory is not None:
            assert _bank_of(stage) in (build, renders[0])
    assert _kinds(graph) == {"collect": 1, "build": 1, "render": 1, "evaluate": 1 + 5}


def test_k_curve_one_bank_read_by_every_k(listing):
    graph = _graph("appworld_k_curve")
    settings = {
        (p.retrieval.k_wf, p.retrieval.k_st, p.retrieval.k_fn)
        for p in graph.points.values()
        if p.retrieval is not None
    }
    expected = {(1, 1, 1)} | {(k, 1, 1) for k in range(2, 6)}
    expected |= {(1, k, 1) for k in range(2, 6)} | {(1, 1, k) for k in range(2, 6)}
    assert settings == expected
    ((build, _),) = _builds(graph).items()
    assert all(_bank_of(s) == build for s in _evaluations(graph) if s.memory is not None)
    assert _kinds(graph) == {"collect": 1, "build": 1, "evaluate": 1 + 13}


@pytest.mark.parametrize(
    ("experiment", "tasks"), [("appworld_protocols", 168), ("toolsandbox_protocols", 129)]
)
def test_protocols_zero_shot_on_each_protocol_s_tasks_and_a_bank_per_split(
    listing, experiment, tasks
):
    graph = _graph(experiment)
    by_protocol: dict[str, dict] = {}
    for p in graph.points.values():
        by_protocol.setdefault(p.cfg.protocol.name, {})[p.method_name] = p
    assert set(by_protocol) == {"main", "self_excluded", "cross_split"}
    for protocol, methods in by_protocol.items():
        assert set(methods) == {"zero_shot", "amd_wf", "amd_wf_st", "amd_wf_st_fn"}
        assert len({m.split.eval_ids for m in methods.values()}) == 1, protocol
    held_out = by_protocol["cross_split"]["zero_shot"].split
    assert 0 < len(held_out.eval_ids) < tasks
    assert not set(held_out.eval_ids) & set(held_out.memory_ids)
    if experiment == "appworld_protocols":  # a scenario's tasks stay on one side
        group = {t.task_id: t.group_id for t in listing["appworld"]}
        assert not {group[i] for i in held_out.eval_ids} & {group[i] for i in held_out.memory_ids}
        assert len(held_out.eval_ids) % 3 == 0
    # the teacher once and zero-shot once (each protocol scores it on its own tasks);
    # main and self_excluded share a bank, cross_split builds its own
    assert _kinds(graph) == {"collect": 1, "build": 2, "evaluate": 1 + 9}


def test_plan_without_appworld_data_is_refused_with_the_fix(monkeypatch, capsys):
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    assert run_cli(["experiment=appworld_k_curve", "--plan"]) == 2
    err = capsys.readouterr().err
    assert "AppWorld's data folder is not set" in err
    assert "appworld download data" in err and "+benchmark.options.root=" in err


@pytest.mark.slow
def test_plan_through_the_real_adapter_on_synthetic_data(
    appworld_ready,  # noqa: F811
    capsys,
    plan_offline,
    monkeypatch,
):
    """The real listing (a worker in AppWorld's venv reads the data folder): the
    teacher sweep of table 3 on the synthetic folder's tasks; the listing is not
    reused once the data folder is gone from the environment."""
    assert run_cli(["experiment=appworld_teachers", "--plan"]) == 0
    out = capsys.readouterr().out
    (count,) = re.findall(r"benchmark=appworld tasks=(\d+)", out)
    assert int(count) > 0
    assert len(re.findall(r"^  collect:", out, re.M)) == 4
    assert len(re.findall(r"^  build:", out, re.M)) == 4
    monkeypatch.delenv("APPWORLD_ROOT")
    assert run_cli(["experiment=appworld_teachers", "--plan"]) == 2
    assert "AppWorld's data folder is not set" in capsys.readouterr().err


def test_amd_builds_on_appworld_are_keyed_by_its_profile_and_bfcls_are_not(listing):
    # AMD builds with the paper's AppWorld prompts (figures 13-14) there: a change of
    # them must be a new build, while BFCL's build identity stays as it was.
    (appworld,) = [
        s for s in _builds(_graph("appworld_student_sizes")).values() if s.source.kind == "amd"
    ]
    profile = appworld.identity["builder_profile"]
    assert re.fullmatch(r"appworld:[0-9a-f]{16}", profile)
    # BFCL (planned in tests/orchestrator/test_table1_plan.py) gets no such entry.
    assert memory_method("amd").build_profile("bfcl_multi_turn_base") is None
