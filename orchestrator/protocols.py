"""Evaluation protocols (paper appendix B.3): which tasks memory is built from and which
are evaluated.

- main: memory from the evaluated tasks themselves (the paper's main table).
- self_excluded: memory from all tasks, but a task never retrieves its own entries.
- cross_split: a seeded 7:3 split; memory only from the 70 %, evaluation only on the
  disjoint 30 % (by group when the benchmark's groups are scenarios, e.g. AppWorld).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ProtocolName = Literal["main", "self_excluded", "cross_split"]


class ProtocolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ProtocolName = "self_excluded"
    memory_fraction: float = Field(0.7, gt=0, lt=1, description="cross_split only")
    split_seed: int = 0
    split_by_group: bool | None = None  # None: the benchmark decides

    def read_settings(self) -> dict[str, object]:
        """What the protocol reads: the split settings only matter for cross_split."""
        if self.name != "cross_split":
            return {"name": self.name}
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class TaskSplit:
    memory_ids: tuple[str, ...]  # tasks whose (teacher) trajectories build memory
    eval_ids: tuple[str, ...]  # tasks the student is evaluated on
    memory_split: str  # the `split` label stored in memory payloads

    @property
    def eval_ids_sha(self) -> str:
        return ids_sha(self.eval_ids)


def ids_sha(ids: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()[:16]


def split_tasks(
    task_ids: Sequence[str],
    protocol: ProtocolConfig,
    groups: dict[str, str | None] | None = None,
    group_by_default: bool = False,
) -> TaskSplit:
    ids = list(task_ids)
    if protocol.name in ("main", "self_excluded"):
        return TaskSplit(tuple(ids), tuple(ids), "all")
    by_group = group_by_default if protocol.split_by_group is None else protocol.split_by_group
    rng = random.Random(protocol.split_seed)
    if by_group and groups:
        units = sorted({groups.get(t) or t for t in ids})
        rng.shuffle(units)
        n_memory = max(1, min(len(units) - 1, round(protocol.memory_fraction * len(units))))
        memory_units = set(units[:n_memory])
        memory = [t for t in ids if (groups.get(t) or t) in memory_units]
    else:
        shuffled = ids[:]
        rng.shuffle(shuffled)
        n_memory = max(1, min(len(ids) - 1, round(protocol.memory_fraction * len(ids))))
        memory_set = set(shuffled[:n_memory])
        memory = [t for t in ids if t in memory_set]
    memory_set = set(memory)
    evaluated = [t for t in ids if t not in memory_set]
    if not evaluated or not memory:
        raise ValueError(
            f"cross_split needs at least 2 tasks (or groups) to split; got {len(ids)} tasks"
        )
    return TaskSplit(tuple(memory), tuple(evaluated), "memory")
