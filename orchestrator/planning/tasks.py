"""Which tasks a sweep point plays: its benchmark's selection (limit, task ids, a
seeded sample), loaded once per process on the driver; under protocol=split the memory
split's options and tasks; and the split of them into memory and evaluation tasks. The
planner (`plan.py`) asks for them before it plans a point's stages.
"""

from __future__ import annotations

import functools
import json
import os
import random
from typing import Any

from distillery.orchestrator.core.config import ConfigError, DistilleryConfig
from distillery.orchestrator.core.protocols import TaskSplit, split_apart, split_tasks
from distillery.workers.envs.base import Task
from distillery.workers.envs.registry import benchmark_class, benchmark_splits, make_benchmark


def resolve_tasks(cfg: DistilleryConfig) -> list[Task]:
    """Load the split on the driver, so a bad task id fails before Ray starts."""
    b = cfg.benchmark
    # All the options: identity leaves out where things are (AppWorld's `root`, a venv)
    # and may add what is not an option (AppWorld's data digest).
    options = json.dumps(dict(b.options), sort_keys=True)
    ids = tuple(b.task_ids) if b.task_ids else None
    tasks = list(_load_tasks(b.name, options, b.limit, ids, _environment()))
    if b.sample is not None and b.sample < len(tasks):
        chosen = set(random.Random(b.sample_seed).sample([t.task_id for t in tasks], b.sample))
        tasks = [t for t in tasks if t.task_id in chosen]
    return tasks


def _environment() -> int:
    """The process environment, hashed: a benchmark may find its data through it
    (AppWorld's $APPWORLD_ROOT), so a listing made under one environment is not
    reused under another."""
    return hash(frozenset(os.environ.items()))


@functools.lru_cache(maxsize=16)
def _load_tasks(
    name: str,
    options: str,
    limit: int | None,
    task_ids: tuple[str, ...] | None,
    environment: int,
) -> tuple:
    """Once per process, selection and environment: the points of a sweep mostly
    share their tasks."""
    bench = make_benchmark(name, json.loads(options))
    return tuple(bench.load_tasks(limit=limit, task_ids=list(task_ids) if task_ids else None))


def memory_options(cfg: DistilleryConfig) -> dict[str, Any] | None:
    """The benchmark options the memory split is played with under protocol=split (the
    configured options with `split` set to the memory split); None otherwise (the
    memory tasks are the configured split's)."""
    protocol = cfg.protocol
    if protocol.name != "split":
        return None
    name = cfg.benchmark.name
    splits = benchmark_splits(name)
    if not splits:
        raise ConfigError(
            f"invalid config at protocol.name: benchmark {name} has no splits of its own "
            "(its options have no `split`); use protocol=cross_split to split its tasks"
        )
    if protocol.memory_split not in splits:
        raise ConfigError(
            f"invalid config at protocol.memory_split: {protocol.memory_split!r} is no split "
            f"of {name}; its splits: {', '.join(splits)}"
        )
    played = {**cfg.benchmark.options, **protocol.memory_options, "split": protocol.memory_split}
    if protocol.memory_options:
        from distillery.workers.envs.registry import benchmark_options

        try:
            benchmark_options(name, played)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise ConfigError(
                f"invalid config at protocol.memory_options: {name} refuses them with the "
                f"memory split ({str(exc).splitlines()[0][:300]})"
            ) from None
    return played


def resolve_memory_tasks(cfg: DistilleryConfig) -> list[Task] | None:
    """protocol=split: the memory split's tasks (the first `memory_limit` in the
    benchmark's order, or of a seeded shuffle: `memory_shuffle_seed`); None for the
    other protocols."""
    options = memory_options(cfg)
    if options is None:
        return None
    text = json.dumps(options, sort_keys=True)
    protocol = cfg.protocol
    if protocol.memory_shuffle_seed is None:
        return list(
            _load_tasks(cfg.benchmark.name, text, protocol.memory_limit, None, _environment())
        )
    tasks = list(_load_tasks(cfg.benchmark.name, text, None, None, _environment()))
    random.Random(protocol.memory_shuffle_seed).shuffle(tasks)
    return tasks[: protocol.memory_limit] if protocol.memory_limit else tasks


def split_for(
    cfg: DistilleryConfig, tasks: list[Task], memory: list[Task] | None = None
) -> TaskSplit:
    if memory is not None:
        return split_apart([t.task_id for t in memory], [t.task_id for t in tasks], cfg.protocol)
    return split_tasks(
        [t.task_id for t in tasks],
        cfg.protocol,
        {t.task_id: t.group_id for t in tasks},
        group_by_default=benchmark_class(cfg.benchmark.name).groups_are_scenarios,
    )
