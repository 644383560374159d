"""Stage kinds by name: built in, or of another package through an entry point.

A kind is one node type (a frozen dataclass subclassing `stages.Stage`) that owns its
key (`code`), its runner (`run`), its `--plan` status (`status`), its progress line and
its cost rows, and, for a kind a method asks the planner for, how it is planned
(`plan`). The project's own kinds are `STAGE_KINDS`; another package registers one in
the entry-point group ``distillery.stage_kinds`` of its distribution::

    [project.entry-points."distillery.stage_kinds"]
    brew = "my_package.brew:BrewStage"

and a memory method of that package asks for it with `planner.stage("brew", ...)`
(`memory.method.BankPlanner`). The registry machinery (lazy loading, entry points,
errors) is `distillery.workers.plugins`, as for benchmarks and memory methods.
"""

from __future__ import annotations

import functools
from typing import Any

from distillery.orchestrator.stages.stage import Stage
from distillery.workers.plugins import PluginLoadError, PluginRegistry, Registration

ENTRY_POINT_GROUP = "distillery.stage_kinds"

# The project's own kinds: kind -> "module:NodeClass". AgentBrew's baselines' kinds
# (one folder each, workers/memory/<method>/) first, then the orchestrator's own.
STAGE_KINDS: dict[str, str] = {
    "reflexion": "distillery.workers.memory.reflexion.stage:ReflexionStage",
    "expel": "distillery.workers.memory.expel.stage:ExpelStage",
    "ace": "distillery.workers.memory.ace.stage:AceStage",
    "collect": "distillery.orchestrator.stages.stage:CollectStage",
    "evaluate": "distillery.orchestrator.stages.stage:EvaluateStage",
    "build": "distillery.orchestrator.stages.stage:BuildStage",
    "render": "distillery.orchestrator.stages.stage:RenderStage",
    "brew": "distillery.workers.memory.agentbrew.stage:BrewStage",  # AgentBrew's
    "combine": "distillery.workers.memory.agentbrew.combined:CombineStage",  # its + AMD's
}

# What every kind's node type must override (the base raises NotImplementedError).
_OWNED = ("code", "run", "status", "cost_rows")


class StageKindLoadError(PluginLoadError):
    """A registered stage kind could not be loaded or is no node type: a setup problem
    the message names, not a bug of the run."""


def _validate(obj: Any, registration: Registration, where: str) -> type[Stage]:
    value = registration.value
    if not (isinstance(obj, type) and issubclass(obj, Stage)):
        raise StageKindLoadError(f"{where}: {value} is not a stage node type (a Stage subclass)")
    kind = obj.__dict__.get("kind")
    if kind != registration.name:
        raise StageKindLoadError(f"{where}: {value} says its kind is {kind!r}")
    if not isinstance(getattr(obj, "code_version", None), str):
        raise StageKindLoadError(f"{where}: {value} sets no code_version")
    lacking = [m for m in _OWNED if getattr(obj, m) is getattr(Stage, m)]
    if lacking:
        raise StageKindLoadError(f"{where}: {value} does not define {', '.join(lacking)}")
    return obj


REGISTRY: PluginRegistry[type[Stage]] = PluginRegistry(
    "stage kind", ENTRY_POINT_GROUP, STAGE_KINDS, _validate, error=StageKindLoadError
)


def known_stage_kinds() -> list[str]:
    """Every registered stage kind, sorted (nothing is imported)."""
    return REGISTRY.names()


def stage_type(kind: str) -> type[Stage]:
    """The node type registered as `kind` (its module imported now, once)."""
    return _load(REGISTRY.registration(kind))


@functools.lru_cache(maxsize=64)
def _load(registration: Registration) -> type[Stage]:
    return REGISTRY.load_registration(registration)
