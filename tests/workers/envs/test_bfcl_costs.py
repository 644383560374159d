"""A validated literal call cannot hang a worker: BFCL calls whose cost is unbounded
are refused before they run, with the reason; bounded ones run as BFCL runs them."""

from __future__ import annotations

import time

import pytest

from distillery.workers.envs.base import ParsedAction, ToolCall
from distillery.workers.envs.bfcl_costs import execution_cost_error
from distillery.workers.envs.registry import make_benchmark

MATH_TASK = "multi_turn_base_15"  # involves MathAPI


@pytest.fixture(scope="module")
def env():
    bench = make_benchmark("bfcl_multi_turn_base")
    (task,) = bench.load_tasks(task_ids=[MATH_TASK])
    assert "MathAPI" in task.metadata["involved_classes"]
    environment = bench.make_env(task, "costs")
    yield environment
    environment.close()


UNBOUNDED = [
    ToolCall("power", kwargs={"base": 10, "exponent": 10**29}),  # never returns today
    ToolCall("power", kwargs={"base": 10, "exponent": 20_000_000}),  # 15 s today
    ToolCall("power", args=(-3, 10**12)),
    ToolCall("logarithm", kwargs={"value": 10, "base": 2, "precision": 10**8}),
    ToolCall("square_root", kwargs={"number": 2, "precision": 10**9}),
    ToolCall("round_number", kwargs={"number": 5, "decimal_places": -(10**29)}),
]
BOUNDED = [
    (ToolCall("power", kwargs={"base": 2, "exponent": 10}), "1024"),
    (ToolCall("power", kwargs={"base": 10.0, "exponent": 2e7}), "Error"),  # float overflow
    (ToolCall("power", kwargs={"base": 1, "exponent": 10**29}), "1"),
    (ToolCall("power", kwargs={"base": 10, "exponent": -(10**29)}), "0.0"),
    (ToolCall("logarithm", kwargs={"value": 8, "base": 2, "precision": 10}), "3.0"),
    (ToolCall("round_number", kwargs={"number": 2.5, "decimal_places": 0}), "2"),
]


@pytest.mark.parametrize("call", UNBOUNDED, ids=lambda c: c.source[:40])
def test_unbounded_calls_are_refused_with_the_reason(env, call):
    assert execution_cost_error(call)
    (result,) = env.step(ParsedAction(calls=(call,)))  # refused: never computed
    assert result.rejected and "limit" in result.error


@pytest.mark.parametrize("call,shown", BOUNDED, ids=lambda c: getattr(c, "source", "")[:40])
def test_bounded_calls_run_as_bfcl_runs_them(env, call, shown):
    assert execution_cost_error(call) is None
    (result,) = env.step(ParsedAction(calls=(call,)))
    assert not result.rejected and shown in result.content


def test_refused_calls_never_reach_the_checker(env):
    env.step(ParsedAction(calls=(UNBOUNDED[0],)))
    started = time.monotonic()
    for _ in env.task.turns:
        env.end_turn()
    assert env.score().success is False  # scored at once, not replayed into a hang
    assert time.monotonic() - started < 120  # a replay of the refused call would not end
