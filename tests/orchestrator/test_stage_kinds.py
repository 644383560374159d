"""Stage kinds are plugins: one node type per kind, carrying its inputs, owning its key
(every fingerprint of its code), its runner, its `--plan` status, its progress line and
its cost rows, registered by name (`stage_kinds`: built in, or an entry point of
`distillery.stage_kinds`). A memory method asks the planner for the stage its bank
comes from; here a brew-like kind (plays episodes AND writes a bank, calls a second
model) is registered and asked for by a method, and the sweep plans, reports and runs
it without naming it (no Ray)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import pytest

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.execution import sweep
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.plan_listing import format_plan, stage_status
from distillery.orchestrator.stages import kinds as stage_kinds
from distillery.orchestrator.stages import stage as stages
from distillery.orchestrator.stages.stage import (
    BuildStage,
    CollectStage,
    CostRow,
    EpisodeStage,
    EvaluateStage,
    RenderStage,
    StageStatus,
)
from distillery.orchestrator.state.ledger import BankOutput, Ledger
from distillery.workers.memory import registry
from distillery.workers.memory.method import BaseMemoryMethod
from distillery.workers.plugins import PluginLoadError


def config(tmp_path, *overrides: str):
    base = ["benchmark.limit=3", f"output_dir={tmp_path}"]
    return to_config(compose(rewrite_role_overrides([*base, *overrides])))


def test_each_kind_is_a_node_carrying_its_inputs(tmp_path):
    cfg = config(
        tmp_path, "methods=[zero_shot,amd_wf_st_fn]", "memory.retrieval.representation_st=text"
    )
    graph = plan_sweep([cfg])
    by_kind = {key.kind: stage for key, stage in graph.stages.items()}
    assert [type(s) for s in graph.stages.values()] == [
        EvaluateStage,
        CollectStage,
        BuildStage,
        RenderStage,
        EvaluateStage,
    ]
    collect, build, render = by_kind["collect"], by_kind["build"], by_kind["render"]
    zero_shot, memory_eval = (s for s in graph.stages.values() if isinstance(s, EvaluateStage))
    assert isinstance(build, BuildStage) and isinstance(render, RenderStage)
    # The build reads the collect stage's episodes of the memory split.
    assert build.source.source == collect.key and build.upstream == (collect.key,)
    assert build.source.kind == "amd" and build.source.origin == "teacher"
    assert len(build.source.task_ids) == 3
    # The render layers on its base build, whose source it shares.
    assert render.base == build.key and render.upstream == (build.key,)
    assert render.source is build.source
    # The memory evaluation reads the rendered bank; zero-shot reads none.
    assert zero_shot.memory is None
    assert memory_eval.memory is not None and memory_eval.memory.bank_stage == render.key
    assert memory_eval.memory.kind == "amd" and memory_eval.memory.settings.k_st == 1
    # Roles and what each kind does are facts of its type.
    assert (collect.role, memory_eval.role, build.role) == ("teacher", "student", "builder")
    assert collect.plays_episodes and not collect.writes_bank
    assert build.writes_bank and not build.plays_episodes
    assert graph.bank_sources == {build.key: build.source}
    # The registry knows each kind's node type; a node's key is its own (from its
    # identity, upstream and code), the same for an equal node.
    assert {k: stage_kinds.stage_type(k) for k in ("collect", "evaluate", "build", "render")} == {
        "collect": CollectStage,
        "evaluate": EvaluateStage,
        "build": BuildStage,
        "render": RenderStage,
    }
    again = CollectStage(identity=collect.identity, upstream=(), label="x", model=None)
    assert again.key == collect.key
    assert set(collect.code()) == {"version", "prompts"} and set(build.code()) == {
        "version",
        "builders",
    }
    with pytest.raises(ValueError, match="unknown stage kind 'nope'"):
        stage_kinds.stage_type("nope")


# -- a kind of another package: a brew-like stage, and the method that asks for it --------


@dataclass(frozen=True, kw_only=True)
class BrewStage(EpisodeStage):
    """Plays the memory split's tasks with the student, calls the teacher on failures
    and writes a bank: both fingerprints and the teacher's prompt are in its key."""

    kind: ClassVar[str] = "brew_test"
    code_version: ClassVar[str] = "1"
    writes_bank: ClassVar[bool] = True
    role: ClassVar[str] = "student"
    TEACHER_PROMPT: ClassVar[str] = "Write one note for this failure."

    memory_kind: str  # the method whose collections it writes

    def code(self) -> dict[str, str]:
        return {**super().code(), "teacher_prompt": stages.digest_of(self.TEACHER_PROMPT)}

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> BrewStage:
        cfg = planner.cfg
        identity = {**planner.episode_identity(cfg.student, 0), "rounds": inputs["rounds"]}
        node = cls(
            identity=identity,
            upstream=(),
            label=f"brew student={cfg.student.name}",
            model=planner.served(cfg.student),
            other_models={"teacher": cfg.teacher},
            memory_kind=inputs["memory_kind"],
        )
        planner.add(node, planner.split.memory_ids)
        return node

    def status(self, ledger: Ledger, needs: set[str]) -> StageStatus:
        output = ledger.output(self.key)
        return StageStatus(
            output is not None, "cached" if output else f"brew {len(needs)} tasks", len(needs)
        )

    def cost_rows(self, ledger: Ledger, needs: set[str]) -> list[CostRow]:
        return [CostRow("student", "s", 10, 5, 2), CostRow("teacher", "t", 7, 3, 1)]

    def run(self, sw: sweep.Sweep, prefix: str) -> bool:
        RAN.append(self.kind)
        sw.ledger.record_output(self.key, BankOutput("b" * 64, {"notes": 2}))
        return True


RAN: list[str] = []


class BrewMethod(BaseMemoryMethod):
    kind = "brew_memory"
    settings_model = None  # type: ignore[assignment]  # set below
    code_version = "1"

    def bank_stage(self, planner: Any) -> Any:
        return planner.stage("brew_test", rounds=2, memory_kind=self.kind)

    def hooks(self, task, search, settings, allows, ask_model):  # noqa: ANN001
        raise NotImplementedError


class _Settings(__import__("pydantic").BaseModel):
    k: int = 1


BrewMethod.settings_model = _Settings


@pytest.fixture
def brew_registered(monkeypatch):
    monkeypatch.setitem(stage_kinds.STAGE_KINDS, "brew_test", f"{__name__}:BrewStage")
    monkeypatch.setitem(registry.MEMORY_METHODS, "brew_memory", f"{__name__}:BrewMethod")
    yield
    registry._load.cache_clear()
    stage_kinds._load.cache_clear()
    RAN.clear()


def test_a_method_asks_the_planner_for_a_stage_of_its_own_kind(
    tmp_path, monkeypatch, brew_registered
):
    cfg = config(
        tmp_path,
        "teacher=gpt5_mini",
        "methods=[zero_shot,brew]",
        "+method_catalog.brew={kind: brew_memory}",
    )
    graph = plan_sweep([cfg])
    (brew,) = [s for s in graph.stages.values() if isinstance(s, BrewStage)]
    (point,) = [p for p in graph.points.values() if p.method_name == "brew"]
    # Planned by its node type from what the method asked; its bank is the point's.
    assert point.bank_stage == brew.key and point.memory_source == "brew_test"
    assert graph.needs[brew.key] == set(point.split.memory_ids)
    evaluate = graph.stages[point.stage]
    assert isinstance(evaluate, EvaluateStage) and evaluate.upstream == (brew.key,)
    # No collect or build: nothing asked for them.
    assert {k.kind for k in graph.stages} == {"evaluate", "brew_test"}
    # Its key holds both of its fingerprints and its teacher's prompt.
    assert set(brew.code()) == {"version", "prompts", "teacher_prompt"}
    assert brew.models == {"student": cfg.student, "teacher": cfg.teacher}
    assert brew.key.kind == "brew_test"
    # `--plan` says what its own type says.
    statuses = stage_status(graph, Ledger(tmp_path))
    (brew_status,) = [s for s in statuses if s.stage is brew]
    assert brew_status.state == "brew 3 tasks" and not brew_status.is_cached
    assert "brew 3 tasks" in format_plan(graph, statuses)

    # The sweep runs each stage through its own node type (Ray-free runners here).
    calls: list[str] = []

    def played(self, sw, prefix):  # noqa: ANN001
        calls.append(self.kind)
        return False

    monkeypatch.setattr(EvaluateStage, "run", played)
    run_sweep = sweep.Sweep(graph, progress=False)
    run_sweep.run_stages()
    assert RAN == ["brew_test"] and calls == ["evaluate", "evaluate"]
    assert (run_sweep.stages_run, run_sweep.stages_cached) == (1, 2)
    ledger = Ledger(tmp_path)
    assert len(ledger.runs(brew.key)) == 1
    assert ledger.output(brew.key) == BankOutput("b" * 64, {"notes": 2})
    assert stage_status(graph, ledger)[list(graph.stages).index(brew.key)].is_cached

    # Its cost rows: one per model and role, wall time on the first.
    from distillery.orchestrator.tracking.results import stage_rows

    rows = stage_rows(run_sweep, brew.key)
    assert [(r["role"], r["model"], r["tokens_in"]) for r in rows] == [
        ("student", "s", 10),
        ("teacher", "t", 7),
    ]
    assert rows[0]["wall_s"] >= 0 and rows[1]["wall_s"] == 0


def test_a_kind_that_is_no_node_type_is_refused_by_name(monkeypatch):
    monkeypatch.setitem(stage_kinds.STAGE_KINDS, "not_a_stage", f"{__name__}:RAN")
    monkeypatch.setitem(stage_kinds.STAGE_KINDS, "wrong_kind", f"{__name__}:BrewStage")
    with pytest.raises(PluginLoadError, match="RAN is not a stage node type"):
        stage_kinds.stage_type("not_a_stage")
    with pytest.raises(PluginLoadError, match="says its kind is 'brew_test'"):
        stage_kinds.stage_type("wrong_kind")
    stage_kinds._load.cache_clear()
