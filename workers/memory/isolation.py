"""Which memory an evaluated task may see (the isolation protocols), and a search hit.

Every search re-checks its hits with `Isolation.allows` on the entry's own
`MemorySource`, whatever the index did (see `retrieval.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from distillery.workers.memory.entries import MemorySource

PROTOCOLS = ("main", "self_excluded", "cross_split", "split")


@dataclass(frozen=True)
class Hit:
    entry: Any  # the method's own entry dataclass (a `MemoryEntry`): its hooks read its fields
    score: float
    collection: str  # the name of the entry's collection in its method


@dataclass(frozen=True)
class Isolation:
    """Which memory the evaluated task may see.

    - main: everything (memory was built from the same tasks, as in the paper).
    - self_excluded: everything except the entries built from the evaluated task.
    - cross_split: only entries whose source split is in `allowed_splits` (the memory
      split), and never the evaluated task's own.
    - split: the same check, the memory split being the benchmark's own (its training
      split, e.g. AppWorld's train), the evaluated tasks another of its splits.

    Positional order is (protocol, allowed_splits, evaluated_task_id); a bank-level
    policy leaves `evaluated_task_id` None and each query names its task (or use
    `for_task`).
    """

    protocol: str = "main"
    allowed_splits: tuple[str, ...] = ()
    evaluated_task_id: str | None = None

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}; use one of {PROTOCOLS}")
        if isinstance(self.allowed_splits, str):
            object.__setattr__(self, "allowed_splits", (self.allowed_splits,))
        else:
            object.__setattr__(self, "allowed_splits", tuple(self.allowed_splits))
        if self.filters_splits and not self.allowed_splits:
            raise ValueError(f"{self.protocol} isolation needs allowed_splits (the memory split)")

    @property
    def excludes_own_task(self) -> bool:
        return self.protocol != "main"

    @property
    def filters_splits(self) -> bool:
        return self.protocol in ("cross_split", "split")

    def for_task(self, task_id: str) -> Isolation:
        return replace(self, evaluated_task_id=task_id)

    def task(self, task_id: str | None = None) -> str | None:
        """The evaluated task: `task_id` if given, else the bound one."""
        task = task_id if task_id is not None else self.evaluated_task_id
        if task is None and self.excludes_own_task:
            raise ValueError(f"{self.protocol} isolation needs the evaluated task id")
        return task

    def allows(self, source: MemorySource, task_id: str | None = None) -> bool:
        if self.protocol == "main":
            return True
        if source.task_id == self.task(task_id):
            return False
        if self.filters_splits:
            return source.split in self.allowed_splits
        return True
