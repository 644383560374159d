"""`isolated_counter`: the reference isolated benchmark (the distillery-side half).

Its world (`worlds/counter.py`) runs in a venv of its own with no packages at all: it
exercises the process boundary and measures it (bench/isolated.py) without the cost
or the data of a real benchmark. A real one (AppWorld) differs in its requirements,
its world module and its action parsing, not in this shape.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from distillery.workers.envs.isolated.adapter import IsolatedBenchmark, IsolatedOptions
from distillery.workers.envs.isolated.venv import EnvSpec

WORLDS = Path(__file__).resolve().parent / "worlds"


class CounterOptions(IsolatedOptions):
    """`benchmark.options` of `isolated_counter`."""

    offset: int = Field(default=0, description="Added to every task's starting value.")


class IsolatedCounter(IsolatedBenchmark):
    name = "isolated_counter"
    max_steps_per_turn = 5
    groups_are_scenarios = False
    options_model = CounterOptions
    env_spec = EnvSpec("isolated_counter")  # nothing to install: stdlib only
    world = WORLDS / "counter.py"
