"""`experiment=bfcl_table1` (paper table 1): the teacher collects ONCE, each memory
method's bank is built ONCE from that collection, and every student and seed reads
the one bank of its method; `--plan` says so before anything runs."""

from __future__ import annotations

import re
from collections import Counter

from distillery.orchestrator.cli.app import run_cli, validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.stages.stage import BuildStage, EvaluateStage

STUDENTS = 4  # the paper's table 1: Qwen3-4B, Gemma4-E4B, Qwen3-8B, Llama3.1-8B
MEMORY = ["reasoning_bank", "memp", "sasm", "trajectory_rag", "amd_wf_st_fn"]


def _graph(*overrides: str):
    points = sweep_points(rewrite_role_overrides(["experiment=bfcl_table1", *overrides]), False)
    return plan_sweep(validate_sweep(points))


def test_one_teacher_collection_and_one_build_per_method():
    graph = _graph()
    cfg = graph.configs[0]
    assert list(cfg.methods) == ["teacher", "zero_shot", *MEMORY]
    assert cfg.teacher.name == "gpt-5-mini" and cfg.protocol.name == "main"
    students = {c.student.name for c in graph.configs}
    assert students == {"qwen3-4b", "gemma4-e4b", "qwen3-8b", "llama3.1-8b"}
    assert {c.seed for c in graph.configs} == {0, 1}  # the paper's two runs

    kinds = Counter(key.kind for key in graph.stages)
    assert kinds["collect"] == 1  # the one shared teacher collection
    builds = {k: s for k, s in graph.stages.items() if isinstance(s, BuildStage)}
    (collect,) = [k for k in graph.stages if k.kind == "collect"]
    assert all(s.upstream == (collect,) for s in builds.values())
    # One bank per memory method, built from that collection (AMD's text renderings,
    # if any, are derived from its one build).
    built_kinds = sorted(s.source.kind for s in builds.values())
    assert built_kinds == sorted(["reasoning_bank", "memp", "sasm", "trajectory_rag", "amd"])

    evaluations = [s for s in graph.stages.values() if isinstance(s, EvaluateStage)]
    # zero-shot + 5 memory methods, per student and seed (2): no stage is duplicated
    assert len(evaluations) == STUDENTS * 2 * (1 + len(MEMORY))
    for stage in evaluations:
        if stage.memory is not None:
            (bank,) = [u for u in stage.upstream if u.kind in ("build", "render")]
            if bank.kind == "build":  # each method reads its own method's bank
                assert builds[bank].source.kind == stage.identity["method"]


def test_plan_shows_one_collection_and_one_build_per_method(capsys, plan_offline):
    assert run_cli(["experiment=bfcl_table1", "--plan"]) == 0
    out = capsys.readouterr().out
    assert len(re.findall(r"^  collect:", out, re.M)) == 1
    assert len(re.findall(r"^  build:", out, re.M)) == len(MEMORY)
    for method in ["zero_shot", *MEMORY]:
        assert f"student=qwen3-4b {method}" in out
