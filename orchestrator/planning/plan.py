"""Sweep points -> one stage graph with shared stages, and the evaluation points on it.

Every method of every sweep point becomes an `EvalPoint` (one MLflow child run) scored
on one episode stage. Points and stages are deduplicated by key, so a 20-point sweep
over k and representation with one teacher has one collect stage, one build stage per
distinct builder config, and one zero-shot stage per student and seed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from distillery.orchestrator.core.config import ConfigError, DistilleryConfig, MethodConfig
from distillery.orchestrator.core.protocols import TaskSplit, ids_sha
from distillery.orchestrator.planning.plan_listing import (  # re-exported: imported from here
    PlannedStatus as PlannedStatus,
)
from distillery.orchestrator.planning.plan_listing import format_plan as format_plan
from distillery.orchestrator.planning.plan_listing import stage_line as stage_line
from distillery.orchestrator.planning.plan_listing import stage_status as stage_status
from distillery.orchestrator.planning.tasks import (
    memory_options,
    resolve_memory_tasks,
    split_for,
)
from distillery.orchestrator.planning.tasks import resolve_tasks as resolve_tasks
from distillery.orchestrator.stages.kinds import stage_type
from distillery.orchestrator.stages.stage import (
    BankSource,
    BuildStage,
    CollectStage,
    EvaluateStage,
    MemoryRead,
    RenderStage,
    Stage,
    StageKey,
    digest_of,
    model_identity,
)
from distillery.workers.envs.base import Task
from distillery.workers.envs.registry import identity_options
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.applicability import refusal
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory.retrieval import Isolation


@dataclass(frozen=True)
class EvalPoint:
    point_id: str
    cfg: DistilleryConfig
    method_name: str
    method: MethodConfig
    role: str  # teacher | student
    model: ModelConfig
    stage: StageKey  # the episode stage whose episodes are scored
    upstream: tuple[StageKey, ...]  # every stage it depends on, its own included
    split: TaskSplit
    bank_stage: StageKey | None = None
    retrieval: BaseModel | None = None  # the memory method's validated read settings
    isolation: Isolation | None = None
    memory_writer: str | None = None  # who wrote the bank it reads (a model, deterministic)
    # Whose episodes its bank comes from: the source stage's role (teacher | student),
    # or the kind of a stage that writes its bank itself (e.g. brew).
    memory_source: str | None = None
    uses_teacher: bool = False  # a stage it depends on plays or calls the teacher


@dataclass
class StageGraph:
    """The typed stage nodes of a sweep (each carries its inputs and upstream keys), the
    tasks each episode stage must play (`needs`: the union over its points) and the
    evaluation points on them."""

    stages: dict[StageKey, Stage] = field(default_factory=dict)  # upstream first
    needs: dict[StageKey, set[str]] = field(default_factory=lambda: defaultdict(set))
    points: dict[str, EvalPoint] = field(default_factory=dict)
    tasks: dict[str, Task] = field(default_factory=dict)
    configs: list[DistilleryConfig] = field(default_factory=list)
    point_ids_of: list[list[str]] = field(default_factory=list)  # per config, in order

    def add(self, stage: Stage) -> StageKey:
        self.stages.setdefault(stage.key, stage)
        return stage.key

    @property
    def bank_sources(self) -> dict[StageKey, BankSource]:
        """Each build stage's source (a view of the nodes, for listing every bank)."""
        return {k: s.source for k, s in self.stages.items() if isinstance(s, BuildStage)}

    def upstream_closure(self, key: StageKey) -> tuple[StageKey, ...]:
        seen: list[StageKey] = []
        todo = [key]
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.append(k)
            todo.extend(self.stages[k].upstream)
        position = {k: i for i, k in enumerate(self.stages)}
        return tuple(sorted(seen, key=position.__getitem__))

    def depth(self, key: StageKey) -> int:
        ups = self.stages[key].upstream
        return 0 if not ups else 1 + max(self.depth(u) for u in ups)


def server_key(model: ModelConfig) -> str:
    """Points that use the same model (however labelled) share its servers."""
    return digest_of(model.model_dump(mode="json", exclude={"name"}))[:16]


def _episode_identity(
    cfg: DistilleryConfig,
    model: ModelConfig,
    sweep_seed: int,
    played: dict[str, Any] | None = None,
) -> dict:
    """What decides `model`'s episodes on the point's benchmark (`played`: the options
    it is played with when not the configured ones, e.g. the memory split's)."""
    identity = {
        "benchmark": cfg.benchmark.name,
        "agent": model_identity(model, sweep_seed),
        "max_steps_per_turn": cfg.benchmark.max_steps_per_turn,
    }
    deviations = cfg.benchmark.deviations()
    if deviations:  # episodes played off the benchmark's own pipeline are other episodes
        identity["deviations"] = list(deviations)
    options = (
        cfg.benchmark.identity_options()
        if played is None
        else identity_options(cfg.benchmark.name, played)
    )
    if options:  # only values off the defaults: a new option keeps every existing key
        identity["benchmark_options"] = options
    return identity


def _methods_apply(cfg: DistilleryConfig) -> None:
    """Every memory method must have something to build from in the benchmark's
    episodes (memory/applicability.py): one that would read an empty bank is refused
    here, before anything runs."""
    for name in cfg.methods:
        method = cfg.method(name)
        if method.uses_memory:
            why = refusal(method.kind, cfg.benchmark.name, cfg.benchmark.options)
            if why:
                raise ValueError(f"methods: {name}: {why}")


def plan_sweep(configs: list[DistilleryConfig]) -> StageGraph:
    """Expand sweep points into the shared stage graph (nothing runs)."""
    if not configs:
        raise ValueError("a sweep needs at least one point")
    _check_shared_runtime(configs)
    graph = StageGraph(configs=list(configs))
    for cfg in configs:
        _methods_apply(cfg)
        tasks = resolve_tasks(cfg)
        memory = resolve_memory_tasks(cfg)
        graph.tasks.update({t.task_id: t for t in [*(memory or []), *tasks]})
        split = split_for(cfg, tasks, memory)
        ids: list[str] = []
        for name in cfg.methods:
            point = StagePlanner(graph, cfg, split, name).point()
            graph.points.setdefault(point.point_id, point)
            ids.append(point.point_id)
        graph.point_ids_of.append(ids)
    return graph


class StagePlanner:
    """Plans one evaluation point's stages on the shared graph: what a memory method's
    `bank_stage` asks for (`memory.method.BankPlanner`: the teacher's collection, the
    student's runs, a build of either, or a stage of a registered kind) and what a
    stage kind's `plan` builds its node from (the point's config, split and method).
    Equal stages of different points are one node (deduplicated by key)."""

    def __init__(self, graph: StageGraph, cfg: DistilleryConfig, split: TaskSplit, name: str):
        self.graph = graph
        self.cfg = cfg
        self.split = split
        self.method_name = name
        self.method = cfg.method(name)
        # The benchmark options the memory split is played with (protocol=split: the
        # memory split's; None: the configured ones).
        self.memory_options = memory_options(cfg)

    # -- for stage kinds --------------------------------------------------------------

    def add(self, stage: Stage, plays: Any = ()) -> StageKey:
        """Add a node (the first of its key is kept) and the tasks it must play."""
        key = self.graph.add(stage)
        if plays:
            self.graph.needs[key].update(plays)
        return key

    def episode_identity(
        self, model: ModelConfig, sweep_seed: int, memory: bool = False
    ) -> dict[str, Any]:
        """What decides the episodes `model` plays on the point's benchmark (`memory`:
        on its memory split, which protocol=split plays with other options)."""
        return _episode_identity(
            self.cfg, model, sweep_seed, self.memory_options if memory else None
        )

    @staticmethod
    def model_identity(model: ModelConfig, sweep_seed: int = 0) -> dict[str, Any]:
        """What decides `model`'s answers (a stage calling it holds this)."""
        return model_identity(model, sweep_seed)

    def memory_task_ids(self) -> str:
        """The digest of the point's memory split (a stage playing it holds this)."""
        return ids_sha(sorted(self.split.memory_ids))

    @staticmethod
    def served(model: ModelConfig) -> ModelConfig | None:
        """`model` as a stage's model (None for the oracle, which needs no server)."""
        return None if model.backend == "oracle" else model

    # -- BankPlanner --------------------------------------------------------------------

    def teacher_collection(self) -> StageKey:
        key = _collect(self.graph, self.cfg, self.memory_options)
        self.graph.needs[key].update(self.split.memory_ids)
        return key

    def student_runs(self) -> StageKey:
        key = _zero_shot(self.graph, self.cfg, self.memory_options)
        self.graph.needs[key].update(self.split.memory_ids)
        return key

    def build(
        self, source: StageKey, kind: str | None = None, settings: BaseModel | None = None
    ) -> StageKey:
        return _bank(self.graph, self.cfg, self.method_name, source, self.split, kind, settings)

    @property
    def read_settings(self) -> BaseModel:
        """The point's memory method's validated read settings."""
        return self.cfg.retrieval_for(self.method_name)

    def stage(self, kind: str, **inputs: Any) -> StageKey:
        return self.add(stage_type(kind).plan(self, **inputs))

    # -- the point ----------------------------------------------------------------------

    def point(self) -> EvalPoint:
        graph, cfg, split, name, method = (
            self.graph,
            self.cfg,
            self.split,
            self.method_name,
            self.method,
        )
        eval_ids = list(split.eval_ids)
        bank_stage = retrieval = isolation = writer = source = None
        if method.kind == "teacher":
            stage, role, model = _collect(graph, cfg), "teacher", cfg.teacher
        elif method.kind == "zero_shot":
            stage, role, model = _zero_shot(graph, cfg), "student", cfg.student
        else:
            memory = memory_method(method.kind)
            bank_stage = memory.bank_stage(self)
            retrieval = cfg.retrieval_for(name)
            isolation = Isolation(cfg.protocol.name, (split.memory_split,))
            if bank_stage is not None:
                writer, source = self._bank_facts(bank_stage)
            identity = {
                **_episode_identity(cfg, cfg.student, cfg.seed),
                "method": method.kind,
                "retrieval": memory.read_identity(retrieval),
                "protocol": cfg.protocol.read_settings(),
            }
            if cfg.memory.bounds.identity():  # what a student reads of memory is cut there
                identity["memory_bounds"] = cfg.memory.bounds.identity()
            read = MemoryRead(method.kind, bank_stage, isolation, retrieval)
            # What the ordinary evaluate stage's key holds: a kind of the method's own
            # that scores the point instead starts from it (`evaluation_stage`).
            self.evaluate_identity = identity
            own = memory.evaluation_stage(self, read)
            upstream = (bank_stage,) if bank_stage is not None else ()
            stage = own or graph.add(
                EvaluateStage(
                    identity=identity,
                    upstream=upstream,
                    label=f"evaluate student={cfg.student.name} {name} ({memory.label(retrieval)})",
                    model=self.served(cfg.student),
                    memory=read,
                )
            )
            role, model = "student", cfg.student
        graph.needs[stage].update(eval_ids)
        self._no_ground_truth_memory(bank_stage)
        # The protocol is part of the point even where the stage does not read it: zero-shot
        # under main and under self_excluded is one stage but a row of each protocol's table.
        point_id = digest_of(
            {"stage": stage.digest, "eval": split.eval_ids_sha, "protocol": cfg.protocol.name}
        )[:16]
        return EvalPoint(
            point_id=point_id,
            cfg=cfg,
            method_name=name,
            method=method,
            role=role,
            model=model,
            stage=stage,
            upstream=graph.upstream_closure(stage),
            split=split,
            bank_stage=bank_stage,
            retrieval=retrieval,
            isolation=isolation,
            memory_writer=writer,
            memory_source=source,
            uses_teacher=self._uses_teacher(stage),
        )

    def _uses_teacher(self, stage: StageKey) -> bool:
        closure = self.graph.upstream_closure(stage)
        return any(
            self.graph.stages[k].role == "teacher" or "teacher" in self.graph.stages[k].other_models
            for k in closure
        )

    def _bank_facts(self, bank_stage: StageKey) -> tuple[str, str]:
        """Who wrote a bank, and whose episodes it comes from (a build's source stage's
        role; a stage that writes its bank itself: its kind)."""
        node = self.graph.stages[bank_stage]
        while isinstance(node, RenderStage):
            node = self.graph.stages[node.base]
        if isinstance(node, BuildStage):
            return node.writer(), node.source.origin
        return node.writer(), node.kind

    def _no_ground_truth_memory(self, bank_stage: StageKey | None) -> None:
        """The oracle's memory is the benchmark's ground truth (masked): under
        protocol=main a task would retrieve the answers of its own ground truth."""
        cfg = self.cfg
        if bank_stage is None or cfg.teacher.backend != "oracle" or cfg.protocol.name != "main":
            return
        closure = self.graph.upstream_closure(bank_stage)
        # Any stage where the teacher plays (a collection, an outcome-driven stage the
        # teacher plays, e.g. ExpeL's or ACE's) writes the oracle's answers into memory.
        if not any(
            self.graph.stages[k].role == "teacher" and self.graph.stages[k].plays_episodes
            for k in closure
        ):
            return
        raise ConfigError(
            f"invalid config at protocol.name: protocol=main with teacher={cfg.teacher.name} (an oracle "
            "replaying the ground truth) lets each task retrieve memory built from its "
            f"own answers (methods {self.method_name}); set teacher= a model (e.g. "
            "teacher=gpt5_mini) or protocol=self_excluded / protocol=cross_split"
        )


def _split_label(played: dict[str, Any] | None) -> str:
    return f" ({played['split']} split)" if played else ""


def _collect(
    graph: StageGraph, cfg: DistilleryConfig, played: dict[str, Any] | None = None
) -> StageKey:
    # The sweep seed varies the students only: every seed reads the same teacher memory.
    teacher = cfg.teacher
    identity = _episode_identity(cfg, teacher, 0, played)
    return graph.add(
        CollectStage(
            identity=identity,
            upstream=(),
            label=f"collect teacher={teacher.name} {cfg.benchmark.name}{_split_label(played)}",
            model=StagePlanner.served(teacher),
            options=played,
        )
    )


def _zero_shot(
    graph: StageGraph, cfg: DistilleryConfig, played: dict[str, Any] | None = None
) -> StageKey:
    student = cfg.student
    identity = {**_episode_identity(cfg, student, cfg.seed, played), "method": "zero_shot"}
    return graph.add(
        EvaluateStage(
            identity=identity,
            upstream=(),
            label=f"evaluate student={student.name} zero_shot{_split_label(played)}",
            model=StagePlanner.served(student),
            options=played,
        )
    )


def _bank(
    graph: StageGraph,
    cfg: DistilleryConfig,
    name: str,
    source: StageKey,
    split: TaskSplit,
    kind: str | None = None,
    settings: BaseModel | None = None,
) -> StageKey:
    # `kind`, `settings`: the bank another method builds and reads so (a composite
    # memory's part); by default the point's own method's.
    kind = kind or cfg.method(name).kind
    memory = memory_method(kind)
    origin = graph.stages[source].role  # whose episodes: teacher | student
    builder_model = cfg.builder_model(origin == "student")
    builder_identity = model_identity(builder_model) if builder_model else None
    identity = {
        "memory_task_ids": ids_sha(sorted(split.memory_ids)),
        "split": split.memory_split,
        "builder": memory.build_identity(cfg.memory),
        "builder_model": builder_identity,
        "embedder": cfg.memory.embedder.model_dump(mode="json", include={"kind", "model"}),
    }
    # A method that builds differently on this benchmark (its own prompts) says so: a
    # change of those prompts is then a new build, as a change of the default ones is.
    profile = memory.build_profile(cfg.benchmark.name)
    if profile is not None:
        identity["builder_profile"] = profile
    bounds = cfg.memory.bounds.identity()
    if bounds:  # only values off the defaults: the keys of every default build stay
        identity["bounds"] = bounds
    source_label = graph.stages[source].label.split(" ", 1)[1]
    bank_source = BankSource(
        source, tuple(sorted(split.memory_ids)), split.memory_split, cfg, kind, origin
    )
    build = graph.add(
        BuildStage(
            identity=identity,
            upstream=(source,),
            label=f"build {kind} from {source_label} ({len(split.memory_ids)} tasks)",
            model=builder_model,
            source=bank_source,
        )
    )
    if not memory.derived_stage(settings if settings is not None else cfg.retrieval_for(name)):
        return build
    base = graph.stages[build]  # the first point's node of this key: its source is built
    assert isinstance(base, BuildStage)
    render_identity = {"builder_model": builder_identity}
    if bounds:
        render_identity["bounds"] = bounds
    return graph.add(
        RenderStage(
            identity=render_identity,
            upstream=(build,),
            label=f"render text of {build}",
            model=builder_model,
            base=build,
            source=base.source,
        )
    )


def _check_shared_runtime(configs: list[DistilleryConfig]) -> None:
    """Knobs one sweep can only have once: one output root, one tracking store, one
    cluster, one memory store and embedder service."""
    for key in ("output_dir", "tracking", "cluster", "memory.store", "memory.embedder"):
        head, _, tail = key.partition(".")
        values = {
            str(getattr(getattr(c, head), tail) if tail else getattr(c, head)) for c in configs
        }
        if len(values) > 1:
            raise ValueError(
                f"{key}: sweep points must share it (one {key} per sweep); sweep it in "
                "separate invocations instead"
            )
