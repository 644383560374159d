"""Benchmark adapters by name, so configs and Ray workers can refer to them as strings."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distillery.workers.envs.base import Benchmark


def _bfcl_multi_turn_base(**options: Any) -> Benchmark:
    from distillery.workers.envs.bfcl import BfclMultiTurnBase

    return BfclMultiTurnBase(**options)


BENCHMARKS: dict[str, Callable[..., Benchmark]] = {
    "bfcl_multi_turn_base": _bfcl_multi_turn_base,
}


def make_benchmark(name: str, **options: Any) -> Benchmark:
    try:
        factory = BENCHMARKS[name]
    except KeyError:
        known = ", ".join(sorted(BENCHMARKS))
        raise ValueError(f"unknown benchmark {name!r}; known: {known}") from None
    return factory(**options)
