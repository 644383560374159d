"""Evaluation protocols (paper appendix B.3): which tasks memory is built from and which
are evaluated.

- main: memory from the evaluated tasks themselves (the paper's main table).
- self_excluded: memory from all tasks, but a task never retrieves its own entries.
- cross_split: a seeded 7:3 split; memory only from the 70 %, evaluation only on the
  disjoint 30 % (by group when the benchmark's groups are scenarios, e.g. AppWorld).
- split: memory from another split of the benchmark itself (`memory_split`, e.g.
  AppWorld's train, the math and code benchmarks' training splits; the first
  `memory_limit` tasks in the benchmark's order), evaluation on the configured split
  (e.g. test_normal). For a benchmark without splits (BFCL), cross_split is the way.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ProtocolName = Literal["main", "self_excluded", "cross_split", "split"]


class ProtocolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ProtocolName = "self_excluded"
    memory_fraction: float = Field(default=0.7, gt=0, lt=1, description="cross_split only")
    split_seed: int = 0
    split_by_group: bool | None = None  # None: the benchmark decides
    # protocol=split: the benchmark's split memory comes from, and how many of its tasks
    # (the first N in the benchmark's order; None: all).
    memory_split: str | None = Field(default=None, description="split only, e.g. train")
    memory_limit: int | None = Field(default=None, gt=0, description="split only")
    # Ours: a seeded shuffle of the memory split before `memory_limit` is taken, so the
    # first N are a mixed sample and a larger N holds every smaller one (the AgentBrew
    # paper's brew sets of 500..2,000, its Figure 4). None: the benchmark's order.
    memory_shuffle_seed: int | None = Field(default=None, description="split only")
    # protocol=split: benchmark options the memory split is played with over the
    # configured ones, where its split lives elsewhere (MBPP+ has no training split: the
    # AgentBrew paper brews it on MBPP's, {variant: sanitized}).
    memory_options: dict[str, Any] = Field(default_factory=dict, description="split only")

    @model_validator(mode="after")
    def _split_named(self) -> ProtocolConfig:
        if self.memory_options and self.name != "split":
            raise ValueError(
                "memory_options: only protocol=split plays its memory split with other "
                "benchmark options; remove it or set protocol=split"
            )
        if self.name == "split" and not self.memory_split:
            raise ValueError(
                "memory_split: protocol=split reads memory from another split of the "
                "benchmark: name it, e.g. protocol.memory_split=train"
            )
        return self

    def read_settings(self) -> dict[str, object]:
        """What the protocol reads: the split settings of cross_split and split."""
        if self.name == "split":
            out: dict[str, object] = {
                "name": self.name,
                "memory_split": self.memory_split,
                "memory_limit": self.memory_limit,
            }
            if self.memory_shuffle_seed is not None:  # set only: the keys of old stay
                out["memory_shuffle_seed"] = self.memory_shuffle_seed
            if self.memory_options:  # only when set: the keys of every other point stay
                out["memory_options"] = dict(self.memory_options)
            return out
        if self.name != "cross_split":
            return {"name": self.name}
        return self.model_dump(
            mode="json",
            exclude={"memory_split", "memory_limit", "memory_shuffle_seed", "memory_options"},
        )


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
    if protocol.name == "split":
        raise ValueError("protocol=split takes its memory tasks from another split: split_apart")
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


def split_apart(
    memory_ids: Sequence[str], eval_ids: Sequence[str], protocol: ProtocolConfig
) -> TaskSplit:
    """protocol=split: memory from the benchmark's `memory_split` (its tasks, in order),
    evaluation on the configured split; a task id in both is refused (the isolation
    audit tells entries apart by their split and task)."""
    both = sorted(set(memory_ids) & set(eval_ids))
    if both:
        raise ValueError(
            f"protocol.memory_split: task ids {both[:3]} are in both the memory split "
            f"{protocol.memory_split!r} and the evaluated one; pick another split"
        )
    if not memory_ids:
        raise ValueError(f"protocol.memory_split: split {protocol.memory_split!r} has no task")
    return TaskSplit(tuple(memory_ids), tuple(eval_ids), str(protocol.memory_split))
