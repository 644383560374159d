"""The `brew` stage kind: AgentBrew's brew on the memory split, an outcome-driven stage
(`orchestrator/execution/ordered_stage.py`) whose program is `program.BrewProgram`.

Its identity holds the memory split (benchmark, split options with the data digest,
the task ids, their order), the brew student, teacher and curator models, every prompt
text (`code()`), every brew setting, how its plays read the notes, the embedder and the
memory bounds. Its report is the AgentBrew paper's Table 3 (`statistics.py`) with its
cost rows (the student's first plays and re-plays, the teacher's drafts and revisions,
the curator's calls) and an MLflow run of its own: the figures as metrics, the event log
and the final notes as artifacts, a trace per play.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.core.protocols import ids_sha
from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, stage_events
from distillery.orchestrator.stages.stage import StageFigure, StageReport
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.agentbrew.program import BrewProgram, StudentProfile
from distillery.workers.memory.agentbrew.settings import AgentBrewSettings
from distillery.workers.memory.agentbrew.statistics import brew_figures, final_notes

if TYPE_CHECKING:
    from distillery.orchestrator.state.ledger import Ledger

TITLE = "Table 3: brew statistics (AgentBrew paper, training phase)"
# Protocols under which a task would read notes certified on itself: its own plays'
# outcomes, test labels by another name (the paper: "train and test streams are
# strictly separated").
REFUSED_PROTOCOLS = ("main", "self_excluded")


@dataclass(frozen=True, kw_only=True)
class BrewStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "brew"
    # 2: the leakage guard reads a stated answer as the grader does (leakage.py): a brew
    # refuses drafts the first version kept, so its notes differ.
    code_version: ClassVar[str] = "2"

    def program(self) -> BrewProgram:
        settings = self.settings
        assert isinstance(settings, AgentBrewSettings)
        student = self.extra.get("student", {})
        profile = StudentProfile(
            model=str(student.get("model", "")),
            params_b=student.get("params_b"),
            weaknesses=student.get("weaknesses"),
        )
        return BrewProgram(settings, profile, self.truths, self.same_answer)

    def truths(self, task_id: str) -> tuple[str, ...]:
        """The brew task's ground truth as texts (the leakage guard), read on the
        driver from the benchmark (`ground_truth_texts`); never shown to a model."""
        options = json.dumps(self.extra.get("options") or {}, sort_keys=True)
        return _truths(str(self.identity["benchmark"]), options, task_id)

    def same_answer(self, gold: str, answer: str) -> bool | None:
        """The benchmark's equivalence of a gold and a stated answer (the leakage
        guard: "1/2" states \\frac{1}{2} on MATH); None: compare the texts."""
        options = json.dumps(self.extra.get("options") or {}, sort_keys=True)
        return _same(str(self.identity["benchmark"]), options, gold, answer)

    def report(self, ledger: Ledger, needs: set[str]) -> StageReport | None:
        records = stage_events(ledger, self.key)
        if not records:
            return None
        settings = self.settings
        assert isinstance(settings, AgentBrewSettings)
        figures = brew_figures(records, self.truths, settings.brew.gold_min_chars, self.same_answer)
        files = tuple(
            r["summary"]["file"]
            for r in records
            if r.get("kind") == "played" and r["summary"].get("file")
        )
        return StageReport(
            TITLE,
            tuple(StageFigure(f.metric, f.label, f.value, f.unit) for f in figures),
            documents={"events.json": records, "notes.json": final_notes(records)},
            episode_files=files,
        )

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> BrewStage:
        from distillery.workers.memory.registry import memory_method

        cfg = planner.cfg
        name = planner.method_name
        kind = inputs["memory_kind"]
        if cfg.protocol.name in REFUSED_PROTOCOLS:
            raise ConfigError(
                f"invalid config at protocol.name: methods {name}: AgentBrew brews on its "
                "tasks' own outcomes, so under protocol="
                f"{cfg.protocol.name} a task would read notes certified on itself; brew on "
                "a memory split kept apart: protocol=split (e.g. protocol.memory_split=train, "
                "or agentbrew_brew for MATH, GSM8K and MBPP) or protocol=cross_split "
                "(benchmarks without splits, e.g. BFCL)"
            )
        # A composite method (agentbrew_amd) hands its AgentBrew part's settings.
        settings = inputs.get("settings") or cfg.retrieval_for(name)
        assert isinstance(settings, AgentBrewSettings)
        brew = settings.brew
        student = _model(cfg, brew.student, name, "student")
        teacher = _model(cfg, brew.teacher, name, "teacher")
        curator = _model(cfg, brew.curator, name, "curator")
        for role, model in (("teacher", teacher), ("curator", curator)):
            if model.backend == "oracle":
                raise ConfigError(
                    f"invalid config at method_catalog.{name}.retrieval.brew.{role}: "
                    f"{model.name} is the oracle, which replays ground truth and writes no "
                    f"note; set {role}= a model (teacher=gpt5_mini, teacher=external, ...)"
                )
        plays = settings.for_brew_plays()
        memory = set(planner.split.memory_ids)
        method = memory_method(kind)
        identity: dict[str, Any] = {
            "teacher": planner.model_identity(teacher),
            "curator": planner.model_identity(curator),
            # The brew's order (the memory split as planned: the benchmark's order, or a
            # seeded shuffle of it) decides what each task reads.
            "order": ids_sha([t for t in planner.graph.tasks if t in memory]),
            # Who plays, teaches and curates is in identity as the models themselves.
            "brew": brew.model_dump(mode="json", exclude={"student", "teacher", "curator"}),
            "read": method.read_identity(plays),
        }
        # Who the teacher writes for (student-aware prompts): the model's size and known
        # weaknesses are not part of its own identity (they do not change its answers)
        # but change the teacher's prompts here. The catalog's weaknesses override the
        # model config's.
        profile = {
            "model": student.model or student.name,
            "params_b": student.params_b,
            "weaknesses": brew.student_weaknesses or student.known_weaknesses,
        }
        if brew.student_aware and (profile["params_b"] or profile["weaknesses"]):
            identity["student_profile"] = {k: v for k, v in profile.items() if v}
        options = planner.memory_options
        played = f" ({options['split']} split)" if options else ""
        return cls.plan_on_memory_split(
            planner,
            student,
            identity,
            f"brew student={student.name} teacher={teacher.name} {cfg.benchmark.name}{played}",
            bounds_key="memory_bounds",
            other_models={"teacher": teacher, "curator": curator},
            memory_kind=kind,
            settings=plays,
            wave_size=brew.wave_size,
            order_seed=brew.order_seed,
            sweep_seed=0,  # every seed's evaluation reads the same brewed memory
            extra={
                "student": profile,
                "options": dict(options if options is not None else cfg.benchmark.options),
            },
        )


def _model(cfg: Any, choice: str, name: str, role: str) -> ModelConfig:
    if choice == "student":
        return cfg.student
    if choice == "teacher":
        return cfg.teacher
    if choice in cfg.builder_models:
        return cfg.builder_models[choice]
    known = ", ".join(["student", "teacher", *sorted(cfg.builder_models)])
    raise ConfigError(
        f"invalid config at method_catalog.{name}.retrieval.brew.{role}: {choice!r} is no "
        f"model of this config; use one of {known} (define others under builder_models)"
    )


@functools.lru_cache(maxsize=4096)
def _same(benchmark: str, options: str, gold: str, answer: str) -> bool | None:
    from distillery.workers.envs.registry import same_answer

    return same_answer(benchmark, json.loads(options), gold, answer)


@functools.lru_cache(maxsize=4096)
def _truths(benchmark: str, options: str, task_id: str) -> tuple[str, ...]:
    """One task's ground truth (memoized: the brew and its report both ask)."""
    from distillery.workers.envs.registry import ground_truth_texts

    return ground_truth_texts(benchmark, json.loads(options), [task_id])[task_id]
