"""AgentBrew's baselines under BFCL's cross_split protocol (issue 25, item 5): ExpeL's
and ACE's banks are written by the teacher on the memory side only, Simple RAG reads the
one teacher collection of that side, and every student stage (zero-shot, Reflexion's
re-plays, the memory methods' evaluations) plays the other side only. Planned, not run
(the protocol split and the stages' task sets are what is checked; the sweep end to end
is test_end_to_end.py, under protocol=split)."""

from __future__ import annotations

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning.plan import plan_sweep

METHODS = "zero_shot,reflexion_k2,simple_rag,expel,ace"


def test_banks_on_the_memory_side_students_on_the_other():
    argv = rewrite_role_overrides([
        "benchmark=bfcl_multi_turn_base", "benchmark.limit=20", "protocol=cross_split",
        "teacher=oracle", f"methods=[{METHODS}]",
    ])  # fmt: skip
    graph = plan_sweep(validate_sweep(sweep_points(argv, False)))
    by_kind: dict[str, list[set[str]]] = {}
    for key in graph.stages:
        by_kind.setdefault(key.kind, []).append(set(graph.needs.get(key, set())))
    (collect,) = by_kind["collect"]
    (expel,) = by_kind["expel"]
    (ace,) = by_kind["ace"]
    assert expel == ace == collect and len(collect) == 14  # 7:3 of 20
    students = by_kind["evaluate"] + by_kind["reflexion"]
    assert len(by_kind["reflexion"]) == 1 and len(by_kind["evaluate"]) == 4
    evaluated = students[0]
    assert len(evaluated) == 6 and not evaluated & collect
    assert all(plays == evaluated for plays in students)
    # Simple RAG's bank is the build stage over the same teacher collection.
    (build,) = [s for k, s in graph.stages.items() if k.kind == "build"]
    assert [u.kind for u in build.upstream] == ["collect"]
