"""One paper setup across the experiments that reproduce the paper's tables: the same
teacher, student sampling (temperature 0, Table 5 alone samples), embedder
(text-embedding-3-small) and benchmark setup everywhere, so the cells two tables share
are one stage each, which `--plan` shows by key. The quickstart keeps the offline
MiniLM embedder. Planning only (the listing of tests/orchestrator/test_appworld_plans.py
for AppWorld and ToolSandbox, BFCL's own tasks)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from distillery.orchestrator.cli.app import run_cli
from distillery.orchestrator.cli.app import validate_sweep as validate
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning.plan import StageGraph, plan_sweep
from distillery.orchestrator.planning.preflight import PreflightError, check_benchmark_environment
from tests.orchestrator.test_appworld_plans import use_listing

EXPERIMENTS = Path(__file__).resolve().parents[2] / "conf" / "experiment"
PAPER_EMBEDDER = "text-embedding-3-small"
# Experiments and the method names of their WF+ST+FN point (representation's design
# row, the k curve's k = 1 point).
APPWORLD = {
    "appworld_table1": "amd_wf_st_fn",
    "appworld_ablation": "amd_wf_st_fn",
    "appworld_representation": "rep_tcc",
    "appworld_student_sizes": "amd_wf_st_fn",
    "appworld_k_curve": "amd_wf_st_fn",
    "appworld_teachers": "amd_wf_st_fn",
    "appworld_protocols": "amd_wf_st_fn",
}
BFCL = {
    "bfcl_table1": "amd_wf_st_fn",
    "bfcl_ablation": "amd_wf_st_fn",
    "bfcl_representation": "rep_tcc",
    "bfcl_k_curve": "amd_wf_st_fn",
    "bfcl_protocols": "amd_wf_st_fn",
}
TOOLSANDBOX = {"toolsandbox_table1": "amd_wf_st_fn", "toolsandbox_protocols": "amd_wf_st_fn"}
REPEATED = ("appworld_repeated_runs", "bfcl_repeated_runs", "toolsandbox_repeated_runs")


# Each experiment narrowed to the cell the tables share (Qwen3-4B, seed 0, GPT-5-mini,
# protocol main; the k curves keep their 13 points): a point's stages do not depend on
# the sweep's other points, and planning one point takes a fraction of the grid's time.
NARROW = {
    "sweep.student": "[qwen3_4b]",
    "sweep.seed": "[0]",
    "sweep.teacher": "[gpt5_mini]",
    "sweep.protocol": "[main]",
}
REPEATED_SEEDS = "[0,1,2,3,4]"


@pytest.fixture(scope="module")
def graphs():
    """Every paper experiment planned once, narrowed (the listing of
    test_appworld_plans.py for AppWorld and ToolSandbox; BFCL's own tasks)."""
    with pytest.MonkeyPatch.context() as patch:
        use_listing(patch)
        planned = {}
        for name in [*APPWORLD, *BFCL, *TOOLSANDBOX, *REPEATED, *TABLE1_OF_REPEATED]:
            if name in planned:
                continue
            planned[name] = _graph(name, *_narrowed(name))
        yield planned


def _narrowed(name: str) -> list[str]:
    """The overrides narrowing `name`'s sweep to the shared cell (Table 5 keeps its
    five seeds)."""
    swept = yaml.safe_load((EXPERIMENTS / f"{name}.yaml").read_text()).get("sweep", {})
    narrow = [f"{k}={v}" for k, v in NARROW.items() if k.removeprefix("sweep.") in swept]
    return [o for o in narrow if not (name in REPEATED and o.startswith("sweep.seed"))]


TABLE1_OF_REPEATED = tuple(name.replace("repeated_runs", "table1") for name in REPEATED)


def _graph(experiment: str, *overrides: str) -> StageGraph:
    points = sweep_points(rewrite_role_overrides([f"experiment={experiment}", *overrides]), False)
    return plan_sweep(validate(points))


def _cell(graph: StageGraph, method: str, student: str = "qwen3-4b", seed: int = 0):
    """The stage of the (student, seed) point of `method` with GPT-5-mini teaching
    under protocol main (the cell tables share); of a k curve, its k = 1 point (the
    fewest entries read)."""
    points = [
        p
        for p in graph.points.values()
        if p.method_name == method
        and p.cfg.student.name == student
        and p.cfg.seed == seed
        and (method == "zero_shot" or p.cfg.teacher.name == "gpt-5-mini")
        and p.cfg.protocol.name == "main"
    ]

    def entries(point) -> int:
        r = point.retrieval
        return sum(getattr(r, f"k_{t}", 0) for t in ("wf", "st", "fn")) if r else 0

    fewest = min(entries(p) for p in points)
    (stage,) = {p.stage for p in points if entries(p) == fewest}
    return stage


def _upstream(graph: StageGraph, key, kind: str) -> set:
    return {
        up
        for point in graph.points.values()
        if point.stage == key
        for up in point.upstream
        if up.kind == kind
    }


@pytest.mark.parametrize(
    "experiments", [APPWORLD, BFCL, TOOLSANDBOX], ids=["appworld", "bfcl", "toolsandbox"]
)
def test_the_tables_share_their_cells(graphs, experiments):
    planned = {name: graphs[name] for name in experiments}
    for name, graph in planned.items():
        for cfg in graph.configs:
            assert cfg.memory.embedder.model == PAPER_EMBEDDER, name
            assert cfg.student.temperature == 0.0, name
    zero_shot = {name: _cell(g, "zero_shot") for name, g in planned.items()}
    amd = {name: _cell(g, experiments[name]) for name, g in planned.items()}
    assert len(set(zero_shot.values())) == 1, zero_shot
    assert len(set(amd.values())) == 1, amd
    # ... and so one teacher collection and one AMD bank under them
    builds = {name: frozenset(_upstream(g, amd[name], "build")) for name, g in planned.items()}
    assert len(set(builds.values())) == 1


def test_table5_samples_and_shares_the_teacher_and_the_bank(graphs):
    for name in REPEATED:
        graph, table1 = graphs[name], graphs[name.replace("repeated_runs", "table1")]
        assert {c.student.temperature for c in graph.configs} == {0.7}, name
        assert {c.seed for c in graph.configs} == {0, 1, 2, 3, 4}
        assert {c.memory.embedder.model for c in graph.configs} == {PAPER_EMBEDDER}
        (collect,) = [k for k in graph.stages if k.kind == "collect"]
        assert collect in table1.stages  # the same teacher collection as table 1's
        (amd_build,) = [k for k in graph.stages if k.kind == "build"]
        assert amd_build in table1.stages  # and the same AMD bank
        # sampled, so none of its student cells is table 1's
        assert _cell(graph, "zero_shot") not in table1.stages


def test_the_quickstart_keeps_the_offline_embedder():
    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config

    cfg = to_config(compose(rewrite_role_overrides([])))
    assert cfg.experiment.name == "quickstart"
    assert cfg.memory.embedder.model == "all-MiniLM-L6-v2"


def test_appworld_experiments_play_the_authors_text_react(graphs):
    for name in [*APPWORLD, "appworld_repeated_runs"]:
        for cfg in graphs[name].configs:
            assert cfg.student.action_format == "prompt" and cfg.teacher.action_format == "prompt"
            assert cfg.student.extra_body["stop"] == [
                "<|endoftext|>",
                "<|eot_id|>",
                "<|start_header_id|>",
            ]
            assert cfg.student.max_model_len == 40960  # Qwen3, as the authors serve it


def test_toolsandbox_experiments_run_all_129_scenarios_with_the_papers_user(graphs, monkeypatch):
    for name in [*TOOLSANDBOX, "toolsandbox_repeated_runs"]:
        graph = graphs[name]
        assert len(graph.tasks) == 129
        for cfg in graph.configs:
            options = cfg.benchmark.options
            assert options["user_model"] == "gpt-5-mini" and options.get("network", True)
            assert cfg.benchmark.deviations() == ()
    # Before a run starts: no RapidAPI key, no run (the fix named).
    monkeypatch.delenv("RAPID_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with pytest.raises(PreflightError, match="RAPID_API_KEY is not set.*network=false"):
        check_benchmark_environment(graph.configs)
    monkeypatch.setenv("RAPID_API_KEY", "key")
    check_benchmark_environment(graph.configs)


def test_the_plans_print_the_stages_two_tables_share(graphs, monkeypatch, capsys, plan_offline):
    use_listing(monkeypatch)
    printed = {}
    for name in ("appworld_table1", "appworld_ablation"):
        assert run_cli([f"experiment={name}", *_narrowed(name), "--plan"]) == 0
        printed[name] = capsys.readouterr().out
    graph = graphs["appworld_table1"]
    shared = [
        next(k for k in graph.stages if k.kind == "collect"),
        _cell(graph, "zero_shot"),
        _cell(graph, "amd_wf_st_fn"),
    ]
    for key in shared:
        for name, out in printed.items():
            assert re.search(rf"^  {key.kind}:{key.digest[:16]} ", out, re.M), (name, key)
