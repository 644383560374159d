"""The AgentBrew paper's Table 1 as experiment configs (`agentbrew_table1_<benchmark>`):
`--plan` shows one teacher collection and one bank per memory method, on the brew
split, shared by every point that reads it; Reflexion's two rows are test-time stages
of their own; AppWorld's two test splits share the whole memory side; MBPP+ brews on
MBPP's split. The planner is handed task listings shaped like the real splits (no
data needed). AgentBrew's brew plays the brew split too (MBPP+: MBPP's)."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from distillery.orchestrator.cli.app import run_cli, validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning import tasks as tasks_module
from distillery.orchestrator.planning.plan import StageGraph, plan_sweep
from distillery.workers.envs.base import Task

EXPERIMENTS = ("gsm8k", "math", "mbpp", "mbpp_plus", "appworld")
BASELINES = ["zero_shot", "reflexion_k2", "reflexion_k3", "simple_rag", "expel", "ace"]
# (benchmark, variant, split) -> task ids, shaped like the paper's splits (appendix A.2;
# fewer tasks: the structure is what is tested).
SPLITS = {
    ("gsm8k", None, "agentbrew_brew"): [f"train_{i}" for i in range(10)],
    ("gsm8k", None, "agentbrew_test"): [f"test_{i}" for i in range(13)],
    ("math", None, "agentbrew_brew"): [f"train_algebra_{i}" for i in range(10)],
    ("math", None, "agentbrew_test"): [f"test_algebra_{i}" for i in range(50)],
    ("mbpp", None, "agentbrew_brew"): [f"Mbpp/{i}" for i in range(11, 37)],
    ("mbpp", None, "agentbrew_test"): [f"Mbpp/{i}" for i in range(511, 527)],
    ("mbpp", "plus", "agentbrew_test"): [f"Mbpp/{i}" for i in range(511, 526)],
    ("appworld", None, "train"): [f"{s:07x}_{i}" for s in range(30) for i in (1, 2, 3)],
    ("appworld", None, "test_normal"): [f"{s:07x}_{i}" for s in range(100, 156) for i in (1, 2, 3)],
    ("appworld", None, "test_challenge"): [f"{s:07x}_{i}" for s in range(200, 339) for i in (1, 2, 3)],
}  # fmt: skip


@pytest.fixture
def listing(monkeypatch):
    def load(name, options, limit, task_ids, environment):
        opts = json.loads(options)
        variant = opts.get("variant") if opts.get("variant") not in (None, "sanitized") else None
        ids = SPLITS[(name, variant, opts.get("split"))]
        tasks = tuple(
            Task(i, name, (f"task {i}",), (), (), i.split("_")[0] if name == "appworld" else None)
            for i in ids
        )
        return tasks if limit is None else tasks[:limit]

    monkeypatch.setattr(tasks_module, "_load_tasks", load)


def _graph(experiment: str, *overrides: str) -> StageGraph:
    argv = rewrite_role_overrides([f"experiment=agentbrew_table1_{experiment}", *overrides])
    return plan_sweep(validate_sweep(sweep_points(argv, False)))


def _check(graph: StageGraph, methods: list[str], test_splits: int) -> None:
    kinds = Counter(key.kind for key in graph.stages)
    # One teacher collection (Simple RAG's bank is built from it), one bank per method.
    assert kinds["collect"] == 1 and kinds["build"] == 1
    assert kinds["expel"] == 1 and kinds["ace"] == 1
    assert kinds.get("brew", 0) == (1 if "agentbrew" in methods else 0)
    # Per test split: zero-shot and every memory method's evaluation, two Reflexion stages.
    memory = [m for m in methods if m not in ("zero_shot", "reflexion_k2", "reflexion_k3")]
    assert kinds["evaluate"] == test_splits * (1 + len(memory))
    assert kinds["reflexion"] == test_splits * 2
    cfg = graph.configs[0]
    assert cfg.teacher.name == "deepseek-chat-v3.1" and cfg.student.name == "qwen3-14b"
    assert cfg.protocol.name == "split" and cfg.report.groups
    assert list(cfg.report.references) == ["zero_shot", "agentbrew"]
    groups = {p.method_name: (p.uses_teacher, graph.stages[p.stage].test_time())
              for p in graph.points.values()}  # fmt: skip
    assert groups["zero_shot"] == (False, (1, False))
    assert groups["reflexion_k3"] == (False, (3, True))
    assert all(groups[m] == (True, (1, False)) for m in memory)
    # Every memory-side stage plays the brew split only.
    brew_split = {"appworld": "train"}.get(cfg.benchmark.name, "agentbrew_brew")
    for kind in ("collect", "brew"):
        for stage in (s for k, s in graph.stages.items() if k.kind == kind):
            assert stage.options["split"] == brew_split
            assert stage.options.get("variant") in (None, "sanitized")


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_table1_plans_as_configured(listing, experiment):
    graph = _graph(experiment)
    methods = list(graph.configs[0].methods)
    assert methods[-1] == "agentbrew"
    _check(graph, methods, 2 if experiment == "appworld" else 1)


def test_mbpp_plus_brews_on_mbpps_split_and_appworlds_splits_share_the_memory(listing):
    plus = _graph("mbpp_plus", f"methods=[{','.join(BASELINES)}]")
    (collect,) = [s for k, s in plus.stages.items() if k.kind == "collect"]
    assert (
        collect.options["variant"] == "sanitized" and collect.options["split"] == "agentbrew_brew"
    )
    assert plus.configs[0].benchmark.options["variant"] == "plus"
    mbpp = _graph("mbpp", f"methods=[{','.join(BASELINES)}]")
    shared = {k for k in plus.stages if k.kind in ("collect", "build", "expel", "ace")}
    assert shared == {k for k in mbpp.stages if k.kind in ("collect", "build", "expel", "ace")}
    world = _graph("appworld", "methods=[zero_shot,simple_rag,expel]")
    splits = {c.benchmark.options["split"] for c in world.configs}
    assert splits == {"test_normal", "test_challenge"}
    expel = [s for s in world.stages.values() if s.kind == "expel"]
    assert len(expel) == 1 and len(world.points) == 6


def test_plan_says_so_before_anything_runs(listing, plan_offline, capsys):
    assert run_cli(["experiment=agentbrew_table1_gsm8k", f"methods=[{','.join(BASELINES)}]",
                    "--plan"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert len(re.findall(r"^  collect:", out, re.M)) == 1
    assert len(re.findall(r"^  (expel|ace):", out, re.M)) == 2
    assert len(re.findall(r"^  reflexion:", out, re.M)) == 2
