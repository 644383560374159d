"""What `--plan` lists of a stage graph: each stage's status as its node type reports it
against the ledger, its line (its label and what tells it from the sweep's other
stages), and the whole plan as text.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distillery.orchestrator.planning.descriptors import SweepNames, name_sweep
from distillery.orchestrator.stages.stage import Stage, StageKey, StageStatus

if TYPE_CHECKING:
    from distillery.orchestrator.planning.plan import StageGraph
    from distillery.orchestrator.state.ledger import Ledger


@dataclass(frozen=True)
class PlannedStatus:
    """A stage of the graph and what its node type says `--plan` should show of it."""

    stage: Stage
    status: StageStatus

    @property
    def is_cached(self) -> bool:
        return self.status.cached

    @property
    def state(self) -> str:
        return self.status.state


def stage_status(graph: StageGraph, ledger: Ledger) -> list[PlannedStatus]:
    return [
        PlannedStatus(stage, stage.status(ledger, set(graph.needs.get(key, set()))))
        for key, stage in graph.stages.items()
    ]


def stage_line(graph: StageGraph, key: StageKey, names: SweepNames | None = None) -> str:
    """A stage's label and what tells it from the sweep's other stages (`k_st=3`)."""
    label = graph.stages[key].label
    names = names or name_sweep(graph)
    extra = [part for part in names.stage(key).split() if part not in label.split()]
    return " ".join([label, *extra])


def format_plan(graph: StageGraph, statuses: list[PlannedStatus]) -> str:
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
