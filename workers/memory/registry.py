"""Memory methods by `kind`, so configs and Ray workers can refer to them as strings.

A kind maps to ``"module:Class"``, imported only when the method is used: naming a
method in a config imports nothing but this registry. The project's own methods are
listed in `MEMORY_METHODS`; another package registers one in the entry-point group
``distillery.memory_methods`` of its distribution (pyproject.toml)::

    [project.entry-points."distillery.memory_methods"]
    my_memory = "my_package.memory:MyMethod"

The class implements `distillery.workers.memory.method.MemoryMethod`. `zero_shot` and
`teacher` are no memory methods: they are built into the orchestrator's method config.
"""

from __future__ import annotations

import functools
import sys
from importlib.metadata import EntryPoint, entry_points

from distillery.workers.memory.method import MemoryMethod

ENTRY_POINT_GROUP = "distillery.memory_methods"

# The project's own methods: kind -> "module:Class". `student_memory` is AMD built from
# the student's own successful zero-shot runs (paper table 2).
MEMORY_METHODS: dict[str, str] = {
    "amd": "distillery.workers.memory.amd.method:AmdMethod",
    "student_memory": "distillery.workers.memory.amd.method:AmdStudentMemory",
}

# What the orchestrator reads from a method (see MemoryMethod).
_FACTS = (
    "kind",
    "bank_source",
    "settings_model",
    "code_version",
    "settings",
    "read_identity",
    "build_identity",
    "build_fingerprint",
    "bank_id",
    "build",
    "render",
    "hook_texts",
    "derived_stage",
    "hooks",
    "label",
    "metrics",
    "tags",
    "report_columns",
    "descriptors",
)


class MemoryMethodLoadError(ValueError):
    """A registered memory method could not be loaded (a broken module or entry point):
    a setup problem the message names, not a bug of the run."""


@functools.lru_cache(maxsize=8)
def _entry_points(path: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    """The group's entry points of the distributions on `path` (sys.path), cached: config
    validation and stage keys ask often."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def _registered() -> dict[str, list[tuple[str, EntryPoint]]]:
    """kind -> (where it is registered, entry point), built-ins first."""
    found: dict[str, list[tuple[str, EntryPoint]]] = {}
    for kind, value in MEMORY_METHODS.items():
        found[kind] = [("built in", EntryPoint(kind, value, ENTRY_POINT_GROUP))]
    for ep in _entry_points(tuple(sys.path)):
        dist = getattr(ep, "dist", None)
        origin = f"entry point {ep.name} = {ep.value!r} of {getattr(dist, 'name', '?')}"
        listed = found.setdefault(ep.name, [])
        if all(ep.value != other.value for _, other in listed):
            listed.append((origin, ep))
    return found


def known_methods() -> list[str]:
    """The memory method kinds a config may use: built-ins and entry points, sorted."""
    return sorted(_registered())


def is_memory_method(kind: str) -> bool:
    """Whether `kind` names a registered memory method (nothing is imported)."""
    return kind in _registered()


def memory_method(kind: str) -> MemoryMethod:
    """The method registered as `kind` (its module imported now, once)."""
    registered = _registered()
    if kind not in registered:
        known = ", ".join(sorted(registered))
        raise ValueError(f"unknown memory method {kind!r}; known: {known}")
    candidates = registered[kind]
    if len(candidates) > 1:
        where = "; ".join(origin for origin, _ in candidates)
        raise MemoryMethodLoadError(f"memory method {kind!r} is registered more than once: {where}")
    origin, ep = candidates[0]
    return _load(kind, origin, ep.value)


@functools.lru_cache(maxsize=32)
def _load(kind: str, origin: str, value: str) -> MemoryMethod:
    where = f"memory method {kind!r}" + (f" ({origin})" if origin != "built in" else "")
    try:
        cls = EntryPoint(kind, value, ENTRY_POINT_GROUP).load()
    except Exception as exc:
        raise MemoryMethodLoadError(
            f"{where}: {value} failed to load: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(cls, type):
        raise MemoryMethodLoadError(f"{where}: {value} is not a MemoryMethod class")
    method = cls()
    lacking = [fact for fact in _FACTS if not hasattr(method, fact)]
    if lacking:
        raise MemoryMethodLoadError(
            f"{where}: {value} is not a MemoryMethod (it lacks {', '.join(lacking)})"
        )
    if method.kind != kind:
        raise MemoryMethodLoadError(f"{where}: {value} says its kind is {method.kind!r}")
    if method.bank_source not in ("teacher", "student"):
        raise MemoryMethodLoadError(
            f"{where}: bank_source must be teacher or student, not {method.bank_source!r}"
        )
    return method


def builtin_hook_texts() -> tuple[str, ...]:
    """The hook texts of the project's own methods, each text once, in registration
    order: part of every episode stage's key since before methods were plugins (a
    zero-shot stage's key included), so existing keys stay. A plugin's own texts enter
    its evaluate stages through `read_identity`."""
    texts: list[str] = []
    for kind in MEMORY_METHODS:
        for text in memory_method(kind).hook_texts():
            if text not in texts:
                texts.append(text)
    return tuple(texts)
