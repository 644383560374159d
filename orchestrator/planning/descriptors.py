"""What tells one evaluation point (and one stage) of a sweep from the others.

Every point has *facets*: the settings that decide its result (student, teacher,
protocol, seed, the retrieval settings its method reads, the student's sampling, the
builder...). A sweep's lines — `--plan`, the progress display, the final summary and
the MLflow child run names — show the facets whose values differ between the sweep's
points (`k_notes=3 style=text seed=1`), and the facets every point shares are
printed once. Nothing here decides identity: stages.py and plan.py do; this only names.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from distillery.orchestrator.stages.stage import RUNTIME_MODEL_FIELDS, StageKey
from distillery.workers.memory.registry import memory_method

if TYPE_CHECKING:
    from distillery.orchestrator.planning.plan import EvalPoint, StageGraph
    from distillery.workers.llm.config import ModelConfig

# Shown first, in this order; the rest follow in the order facets were added.
_LEADING = ("student", "teacher", "protocol", "seed")
# Model fields never worth showing (the name is shown as the model itself).
_MODEL_SKIP = RUNTIME_MODEL_FIELDS | {"seed", "name"}


def _text(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "+".join(str(v) for v in value)
    return "null" if value is None else str(value)


def _model_facets(role: str, model: ModelConfig) -> dict[str, str]:
    out = {role: model.name}
    if model.backend == "oracle":
        return out
    for key, value in model.model_dump(mode="json", exclude=set(_MODEL_SKIP)).items():
        out[f"{role}.{key}"] = _text(value)
    return out


def point_facets(point: EvalPoint) -> dict[str, str]:
    """Everything that decides this point's result, as `key -> value` text."""
    cfg = point.cfg
    out: dict[str, str] = {}
    if point.role == "student":
        out.update(_model_facets("student", cfg.student))
    if point.uses_teacher:
        out.update(_model_facets("teacher", cfg.teacher))
    out["protocol"] = cfg.protocol.name
    if cfg.protocol.name == "cross_split":
        out["memory_fraction"] = str(cfg.protocol.memory_fraction)
        out["split_seed"] = str(cfg.protocol.split_seed)
    if cfg.protocol.name == "split":
        out["memory_split"] = str(cfg.protocol.memory_split)
        out["memory_limit"] = str(cfg.protocol.memory_limit)
        if cfg.protocol.memory_shuffle_seed is not None:
            out["memory_shuffle_seed"] = str(cfg.protocol.memory_shuffle_seed)
    if point.role == "student":
        out["seed"] = str(cfg.seed)
    out["benchmark"] = cfg.benchmark.name
    out["tasks"] = str(len(point.split.eval_ids))
    if cfg.benchmark.max_steps_per_turn is not None:
        out["max_steps_per_turn"] = str(cfg.benchmark.max_steps_per_turn)
    if point.retrieval is not None:
        out.update(memory_method(point.method.kind).descriptors(point.retrieval))
        builder = cfg.builder_model()
        out["builder"] = builder.name if builder else "deterministic"
        out["embedder"] = cfg.memory.embedder.model
        build = cfg.memory.builder.model_dump(mode="json", exclude={"concurrency", "model"})
        out.update({f"builder.{k}": _text(v) for k, v in build.items()})
    return out


def varying_keys(facets: Iterable[Mapping[str, str]]) -> list[str]:
    """Keys with more than one value among the facet sets that have them, in display
    order (leading keys first)."""
    values: dict[str, set[str]] = {}
    for one in facets:
        for key, value in one.items():
            values.setdefault(key, set()).add(value)
    varying = [k for k, v in values.items() if len(v) > 1]
    lead = [k for k in _LEADING if k in varying]
    return lead + [k for k in varying if k not in lead]


def shared_facets(facets: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Key/values that every facet set has, with the same value."""
    facets = list(facets)
    if not facets:
        return {}
    first = facets[0]
    return {k: v for k, v in first.items() if all(f.get(k) == v for f in facets[1:])}


def agreed_facets(facets: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Key/values on which every facet set that has the key agrees (the teacher of a
    sweep whose zero-shot points have no teacher)."""
    values: dict[str, set[str]] = {}
    for one in facets:
        for key, value in one.items():
            values.setdefault(key, set()).add(value)
    return {k: next(iter(v)) for k, v in values.items() if len(v) == 1}


def render(facets: Mapping[str, str], keys: Iterable[str]) -> str:
    return " ".join(f"{k}={facets[k]}" for k in keys if k in facets)


def _varies_within_model(key: str, facets: Mapping[str, Mapping[str, str]]) -> bool:
    """A model field (`student.temperature`) is named only where it varies for one
    model; between models (qwen3-4b vs qwen3-8b) the model's name says it."""
    role, dot, _ = key.partition(".")
    if not dot or role not in ("student", "teacher"):
        return True
    by_model: dict[str, list[Mapping[str, str]]] = {}
    for one in facets.values():
        if role in one:
            by_model.setdefault(one[role], []).append(one)
    return any(key in varying_keys(group) for group in by_model.values())


@dataclass(frozen=True)
class SweepNames:
    """The short descriptors of a sweep's points and stages."""

    points: dict[str, str]  # point_id -> "k_notes=3 seed=1" (empty when nothing varies)
    stages: dict[StageKey, str]  # stage key -> descriptor of what its points vary
    shared: str  # what every point shares: "teacher=gpt-5-mini protocol=main ..."

    def point(self, point_id: str) -> str:
        return self.points.get(point_id, "")

    def stage(self, key: StageKey) -> str:
        return self.stages.get(key, "")


_SHARED_SHOWN = ("student", "teacher", "protocol", "seed", "benchmark", "tasks")


def name_sweep(graph: StageGraph) -> SweepNames:
    facets = {pid: point_facets(p) for pid, p in graph.points.items()}
    # A memory method's read settings: a bank (build, render) reads none of them.
    read_keys = {
        key
        for p in graph.points.values()
        if p.retrieval is not None
        for key in memory_method(p.method.kind).descriptors(p.retrieval)
    }
    # A key absent from some points (a setting of a collection a method does not read)
    # does not vary by that; it varies when the points that have it disagree.
    keys = [k for k in varying_keys(facets.values()) if _varies_within_model(k, facets)]
    points = {pid: render(f, keys) for pid, f in facets.items()}
    stages: dict[StageKey, str] = {}
    users: dict[StageKey, list[Mapping[str, str]]] = {}
    for pid, point in graph.points.items():
        for key in point.upstream:
            users.setdefault(key, []).append(facets[pid])
    for key, used_by in users.items():
        # What all its points share among the varying keys. A bank reads no retrieval
        # setting, and its label says how many tasks it is built from (`tasks` counts
        # the evaluated ones).
        shown = keys
        if not graph.stages[key].plays_episodes:
            shown = [k for k in keys if k != "tasks" and k not in read_keys]
        stages[key] = render(shared_facets(used_by), shown)
    agreed = agreed_facets(facets.values())
    shared = render(agreed, [k for k in _SHARED_SHOWN if k not in keys])
    return SweepNames(points, stages, shared)
