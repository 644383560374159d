"""Sweep points -> one stage graph with shared stages, and the evaluation points on it.

Every method of every sweep point becomes an `EvalPoint` (one MLflow child run) scored
on one episode stage. Points and stages are deduplicated by key, so a 20-point sweep
over k and representation with one teacher has one collect stage, one build stage per
distinct builder config, and one zero-shot stage per student and seed.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from dataclasses import dataclass, field

from pydantic import BaseModel

from distillery.orchestrator.config import DistilleryConfig, MethodConfig
from distillery.orchestrator.descriptors import SweepNames, name_sweep
from distillery.orchestrator.ledger import Ledger
from distillery.orchestrator.protocols import TaskSplit, ids_sha, split_tasks
from distillery.orchestrator.stages import (
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
from distillery.workers.envs.registry import benchmark_class, make_benchmark
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


def resolve_tasks(cfg: DistilleryConfig) -> list[Task]:
    """Load the split on the driver, so a bad task id fails before Ray starts."""
    b = cfg.benchmark
    # All the options: identity leaves out where things are (AppWorld's `root`, a venv)
    # and may add what is not an option (AppWorld's data digest).
    options = json.dumps(dict(b.options), sort_keys=True)
    return list(_load_tasks(b.name, options, b.limit, tuple(b.task_ids) if b.task_ids else None))


@functools.lru_cache(maxsize=16)
def _load_tasks(
    name: str, options: str, limit: int | None, task_ids: tuple[str, ...] | None
) -> tuple:
    """Once per process and selection: the points of a sweep mostly share their tasks."""
    bench = make_benchmark(name, json.loads(options))
    return tuple(bench.load_tasks(limit=limit, task_ids=list(task_ids) if task_ids else None))


def split_for(cfg: DistilleryConfig, tasks: list[Task]) -> TaskSplit:
    return split_tasks(
        [t.task_id for t in tasks],
        cfg.protocol,
        {t.task_id: t.group_id for t in tasks},
        group_by_default=benchmark_class(cfg.benchmark.name).groups_are_scenarios,
    )


def _episode_identity(cfg: DistilleryConfig, model: ModelConfig, sweep_seed: int) -> dict:
    identity = {
        "benchmark": cfg.benchmark.name,
        "agent": model_identity(model, sweep_seed),
        "max_steps_per_turn": cfg.benchmark.max_steps_per_turn,
    }
    deviations = cfg.benchmark.deviations()
    if deviations:  # episodes played off the benchmark's own pipeline are other episodes
        identity["deviations"] = list(deviations)
    options = cfg.benchmark.identity_options()
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
        graph.tasks.update({t.task_id: t for t in tasks})
        split = split_for(cfg, tasks)
        ids: list[str] = []
        for name in cfg.methods:
            point = _plan_method(graph, cfg, name, split)
            graph.points.setdefault(point.point_id, point)
            ids.append(point.point_id)
        graph.point_ids_of.append(ids)
    return graph


def _collect(graph: StageGraph, cfg: DistilleryConfig) -> StageKey:
    # The sweep seed varies the students only: every seed reads the same teacher memory.
    teacher = cfg.teacher
    identity = _episode_identity(cfg, teacher, 0)
    return graph.add(
        CollectStage(
            key=CollectStage.key_for(identity),
            identity=identity,
            upstream=(),
            label=f"collect teacher={teacher.name} {cfg.benchmark.name}",
            model=None if teacher.backend == "oracle" else teacher,
        )
    )


def _zero_shot(graph: StageGraph, cfg: DistilleryConfig) -> StageKey:
    student = cfg.student
    identity = {**_episode_identity(cfg, student, cfg.seed), "method": "zero_shot"}
    return graph.add(
        EvaluateStage(
            key=EvaluateStage.key_for(identity),
            identity=identity,
            upstream=(),
            label=f"evaluate student={student.name} zero_shot",
            model=None if student.backend == "oracle" else student,
        )
    )


def _plan_method(
    graph: StageGraph, cfg: DistilleryConfig, name: str, split: TaskSplit
) -> EvalPoint:
    method = cfg.method(name)
    eval_ids = list(split.eval_ids)
    bank_stage = retrieval = isolation = None
    if method.kind == "teacher":
        stage, role, model = _collect(graph, cfg), "teacher", cfg.teacher
    elif method.kind == "zero_shot":
        stage, role, model = _zero_shot(graph, cfg), "student", cfg.student
    else:
        memory = memory_method(method.kind)
        from_teacher = memory.bank_source == "teacher"
        source = _collect(graph, cfg) if from_teacher else _zero_shot(graph, cfg)
        graph.needs[source].update(split.memory_ids)
        bank_stage = _bank(graph, cfg, name, source, split)
        retrieval = cfg.retrieval_for(name)
        isolation = Isolation(cfg.protocol.name, (split.memory_split,))
        identity = {
            **_episode_identity(cfg, cfg.student, cfg.seed),
            "method": method.kind,
            "retrieval": memory.read_identity(retrieval),
            "protocol": cfg.protocol.read_settings(),
        }
        stage = graph.add(
            EvaluateStage(
                key=EvaluateStage.key_for(identity, (bank_stage,)),
                identity=identity,
                upstream=(bank_stage,),
                label=f"evaluate student={cfg.student.name} {name} ({memory.label(retrieval)})",
                model=None if cfg.student.backend == "oracle" else cfg.student,
                memory=MemoryRead(method.kind, bank_stage, isolation, retrieval),
            )
        )
        role, model = "student", cfg.student
    graph.needs[stage].update(eval_ids)
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
    )


def _bank(
    graph: StageGraph, cfg: DistilleryConfig, name: str, source: StageKey, split: TaskSplit
) -> StageKey:
    kind = cfg.method(name).kind
    memory = memory_method(kind)
    builder_model = cfg.builder_model(memory.bank_source == "student")
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
    build_profile = getattr(memory, "build_profile", None)
    profile = build_profile(cfg.benchmark.name) if build_profile else None
    if profile is not None:
        identity["builder_profile"] = profile
    source_label = graph.stages[source].label.split(" ", 1)[1]
    bank_source = BankSource(
        source,
        tuple(sorted(split.memory_ids)),
        split.memory_split,
        cfg,
        kind,
        memory.bank_source,
    )
    build = graph.add(
        BuildStage(
            key=BuildStage.key_for(identity, (source,), memory.build_fingerprint()),
            identity=identity,
            upstream=(source,),
            label=f"build {kind} from {source_label} ({len(split.memory_ids)} tasks)",
            model=builder_model,
            source=bank_source,
        )
    )
    if not memory.derived_stage(cfg.retrieval_for(name)):
        return build
    base = graph.stages[build]  # the first point's node of this key: its source is built
    assert isinstance(base, BuildStage)
    render_identity = {"builder_model": builder_identity}
    return graph.add(
        RenderStage(
            key=RenderStage.key_for(render_identity, (build,), memory.build_fingerprint()),
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


@dataclass(frozen=True)
class StageStatus:
    stage: Stage
    needed: int  # episodes this sweep needs (episode stages)
    cached: int  # of those, finished and intact in the ledger
    bank: str | None  # bank stages: the bank recorded by a finished run

    @property
    def to_run(self) -> int:
        return self.needed - self.cached

    @property
    def is_cached(self) -> bool:
        # A kind may do both (a brew stage plays episodes and writes a bank).
        episodes_done = not self.stage.plays_episodes or self.to_run == 0
        bank_done = not self.stage.writes_bank or self.bank is not None
        return episodes_done and bank_done

    @property
    def state(self) -> str:
        """What `--plan` says of the stage: cached, or what a run will do."""
        parts = []
        if self.stage.plays_episodes:
            parts.append(
                f"cached ({self.needed} episodes)"
                if self.to_run == 0
                else f"run {self.to_run} of {self.needed} episodes ({self.cached} cached)"
            )
        if self.stage.writes_bank:
            parts.append(f"cached (bank {self.bank[:16]})" if self.bank else "build")
        return ", ".join(parts)


def stage_status(graph: StageGraph, ledger: Ledger) -> list[StageStatus]:
    out = []
    for key, stage in graph.stages.items():
        needed: set[str] = graph.needs.get(key, set()) if stage.plays_episodes else set()
        done = set(ledger.episodes(key)) if stage.plays_episodes else set()
        output = ledger.output(key) if stage.writes_bank else None
        bank = output.bank_id if output else None
        out.append(StageStatus(stage, len(needed), len(needed & done), bank))
    return out


def stage_line(graph: StageGraph, key: StageKey, names: SweepNames | None = None) -> str:
    """A stage's label and what tells it from the sweep's other stages (`k_st=3`)."""
    label = graph.stages[key].label
    names = names or name_sweep(graph)
    extra = [part for part in names.stage(key).split() if part not in label.split()]
    return " ".join([label, *extra])


def format_plan(graph: StageGraph, statuses: list[StageStatus]) -> str:
    names = name_sweep(graph)
    lines = [
        f"plan: {len(graph.configs)} sweep point(s), {len(graph.points)} evaluation point(s), "
        f"{len(graph.stages)} stage(s)"
    ]
    if names.shared:
        lines.append(f"  every point: {names.shared}")
    for st in statuses:
        key = st.stage.key
        ups = ", ".join(str(u) for u in st.stage.upstream) or "-"
        line = stage_line(graph, key, names)
        lines.append(f"  {str(key):26s} {st.state:34s} {line}  <- {ups}")
    lines.append(f"{len(graph.points)} evaluation point(s), each one MLflow child run:")
    for point in graph.points.values():
        head = f"{point.method_name} {point.model.name}"
        lines.append(f"  {head:34s} {names.point(point.point_id) or '-':40s} on {point.stage}")
    n_run = sum(not s.is_cached for s in statuses)
    lines.append(f"{len(statuses) - n_run} stage(s) cached, {n_run} to run")
    return "\n".join(lines)
