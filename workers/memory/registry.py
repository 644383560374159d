"""Memory methods by `kind`, so configs and Ray workers can refer to them as strings.

A kind maps to ``"module:Class"``, imported only when the method is used: naming a
method in a config imports nothing but this registry. The project's own methods are
listed in `MEMORY_METHODS`; another package registers one in the entry-point group
``distillery.memory_methods`` of its distribution (pyproject.toml)::

    [project.entry-points."distillery.memory_methods"]
    my_memory = "my_package.memory:MyMethod"

The class implements `distillery.workers.memory.method.MemoryMethod`. `zero_shot` and
`teacher` are no memory methods: they are built into the orchestrator's method config.
The registry machinery (lazy loading, entry points, errors) is
`distillery.workers.plugins`.
"""

from __future__ import annotations

import functools
from typing import Any

from distillery.workers.memory.method import MEMORY_METHOD_MEMBERS, MemoryMethod
from distillery.workers.plugins import PluginLoadError, PluginRegistry, Registration, lacking

ENTRY_POINT_GROUP = "distillery.memory_methods"

# The project's own methods: kind -> "module:Class". `student_memory` is AMD built from
# the student's own successful zero-shot runs (paper table 2).
MEMORY_METHODS: dict[str, str] = {
    "amd": "distillery.workers.memory.amd.method:AmdMethod",
    "student_memory": "distillery.workers.memory.amd.method:AmdStudentMemory",
    "reasoning_bank": "distillery.workers.memory.reasoning_bank.method:ReasoningBank",
    "trajectory_rag": "distillery.workers.memory.trajectory_rag.method:TrajectoryRag",
    # AgentBrew's baselines (its Table 1).
    "reflexion": "distillery.workers.memory.reflexion.method:Reflexion",
    "expel": "distillery.workers.memory.expel.method:Expel",
    "ace": "distillery.workers.memory.ace.method:Ace",
    "sasm": "distillery.workers.memory.sasm.method:SasmMethod",
    "memp": "distillery.workers.memory.memp.method:MempMethod",
    # MemP as the AMD authors ported it (failed trajectories kept, labelled).
    "memp_amd": "distillery.workers.memory.memp.method:MempAmdPort",
    # AgentBrew: its bank is brewed by a stage of its own kind, `brew`.
    "agentbrew": "distillery.workers.memory.agentbrew.method:AgentBrewMethod",
    # AgentBrew's notes and AMD's memory read together (a `combine` stage joins the banks).
    "agentbrew_amd": "distillery.workers.memory.agentbrew.combined:AgentBrewAmd",
}


class MemoryMethodLoadError(PluginLoadError):
    """A registered memory method could not be loaded (a broken module or entry point):
    a setup problem the message names, not a bug of the run."""


def _validate(cls: Any, registration: Registration, where: str) -> MemoryMethod:
    """The method: one instance of the registered class, checked."""
    kind, value = registration.name, registration.value
    if not isinstance(cls, type):
        raise MemoryMethodLoadError(f"{where}: {value} is not a MemoryMethod class")
    method = cls()
    # Every member of the protocol (`BaseMemoryMethod` has a default for most).
    missing = lacking(method, MEMORY_METHOD_MEMBERS)
    if missing:
        raise MemoryMethodLoadError(
            f"{where}: {value} is not a MemoryMethod (it lacks {', '.join(missing)}; "
            "subclass distillery.workers.memory.method.BaseMemoryMethod for defaults)"
        )
    if method.kind != kind:
        raise MemoryMethodLoadError(f"{where}: {value} says its kind is {method.kind!r}")
    return method


REGISTRY: PluginRegistry[MemoryMethod] = PluginRegistry(
    "memory method", ENTRY_POINT_GROUP, MEMORY_METHODS, _validate, error=MemoryMethodLoadError
)


def known_methods() -> list[str]:
    """The memory method kinds a config may use: built-ins and entry points, sorted."""
    return REGISTRY.names()


def is_memory_method(kind: str) -> bool:
    """Whether `kind` names a registered memory method (nothing is imported)."""
    return kind in REGISTRY


def memory_method(kind: str) -> MemoryMethod:
    """The method registered as `kind` (its module imported now, once)."""
    return _load(REGISTRY.registration(kind))


@functools.lru_cache(maxsize=32)
def _load(registration: Registration) -> MemoryMethod:
    # One instance per registration: methods are stateless, and asked often.
    return REGISTRY.load_registration(registration)


# The methods whose hook texts every episode stage's key has held since before methods
# were plugins (a zero-shot stage's key included): listed, not derived from
# MEMORY_METHODS, so a method added to the project later leaves every existing key as
# it is; its texts enter its own evaluate stages through `read_identity`, as a plugin's.
HOOK_TEXT_METHODS: tuple[str, ...] = ("amd", "student_memory")


def builtin_hook_texts() -> tuple[str, ...]:
    """The hook texts of `HOOK_TEXT_METHODS`, each text once, in that order: part of
    every episode stage's key, so existing keys stay."""
    texts: list[str] = []
    for kind in HOOK_TEXT_METHODS:
        for text in memory_method(kind).hook_texts():
            if text not in texts:
                texts.append(text)
    return tuple(texts)


class _OriginProbe:
    """A `BankPlanner` that plans nothing and remembers what a method asked for."""

    def __init__(self) -> None:
        self.asked: str | None = None

    def teacher_collection(self) -> Any:
        self.asked = "teacher"
        return self.asked

    def student_runs(self) -> Any:
        self.asked = "student"
        return self.asked

    def build(self, source: Any, kind: Any = None, settings: Any = None) -> Any:
        return source

    @property
    def read_settings(self) -> Any:
        return None

    def stage(self, kind: str, **inputs: Any) -> Any:
        self.asked = kind
        return kind


def bank_origin(kind: str) -> str | None:
    """Whose episodes a method's bank comes from, as its `bank_stage` asks the planner:
    "teacher" (the teacher's collection), "student" (the student's own runs), the kind
    of a stage that writes it (e.g. "brew"), or None (no bank). For ordering and
    grouping reports; the plan itself asks the method."""
    probe = _OriginProbe()
    asked = memory_method(kind).bank_stage(probe)  # type: ignore[arg-type]
    return None if asked is None else probe.asked
