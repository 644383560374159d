"""The toy benchmark of the toy_plugin package, reached only through the registry's
entry point: its own tasks, checker, oracle and facts, played through the
`Environment` protocol the agent loop uses."""

from __future__ import annotations

import sys

import pytest

from distillery.workers.envs.registry import benchmark_class, known_benchmarks, make_benchmark


def _play(bench, task, turns: list[list[str]], native: bool = False):
    env = bench.make_env(task, "test-episode")
    try:
        for turn in turns:
            for call in turn:
                if native:
                    name, _, rest = call.partition("(")
                    args = {} if rest == ")" else {"amount": int(rest.split("=")[1][:-1])}
                    action = env.parse_tool_calls(
                        [{"id": "c1", "function": {"name": name, "arguments": args}}]
                    )
                else:
                    action = env.parse_text(f"[{call}]")
                env.step(action)
            env.end_turn()
        return env.score()
    finally:
        env.close()


def test_the_toy_benchmark_is_registered_by_its_entry_point(toy_plugin):
    assert "toy" in known_benchmarks()
    assert "toy_plugin.bench" not in sys.modules  # naming it imports nothing
    cls = benchmark_class("toy")
    assert cls.__module__ == "toy_plugin.bench"
    assert cls.versions() == {"toy-plugin": "0.1"}
    assert cls.groups_are_scenarios is False and cls.max_steps_per_turn == 5
    assert len(cls.fingerprint()) == 4


def test_the_oracle_passes_every_task_and_other_play_fails(toy_plugin):
    bench = make_benchmark("toy")
    tasks = bench.load_tasks()
    assert [t.task_id for t in tasks] == [f"toy_{i}" for i in range(6)]
    for task in tasks:
        truth = bench.oracle_turns(task)
        assert len(truth) == len(task.turns)
        assert _play(bench, task, truth).success, task.task_id
    first, second, *_ = tasks
    wrong = _play(bench, first, [["add(amount=4)"]])
    assert (wrong.success, wrong.error_type) == (False, "toy:state_mismatch")
    assert wrong.error_message == "turn 0: 4, expected 5"
    short = _play(bench, second, [["multiply(factor=2)"]])
    assert (short.success, short.error_type) == (False, "toy:force_terminated")
    # A turn whose ground truth reads the value must read it.
    unread = _play(bench, tasks[3], [["add(amount=4)", "multiply(factor=3)"], []])
    assert unread.error_type == "toy:value_not_read"
    assert _play(bench, first, [["add(amount=5)"]], native=True).success


def test_calls_are_validated_and_errors_observed(toy_plugin):
    bench = make_benchmark("toy")
    task = bench.load_tasks(limit=1)[0]
    env = bench.make_env(task, "t")
    assert env.parse_text("[__import__('os').system('true')]").calls == ()
    action = env.parse_text("[add(amount='x'), launch(n=1)]")
    results = env.step(action)
    assert [r.error is not None for r in results] == [True] * len(results)
    assert "must be an integer" in results[0].content
    assert env.system_prompt("prompt").startswith("You operate a counter")
    with pytest.raises(ValueError):
        env.system_prompt("xml")


def test_options_change_the_tasks(toy_plugin):
    bench = make_benchmark("toy", {"n_tasks": 2, "offset": 10})
    tasks = bench.load_tasks()
    assert [t.task_id for t in tasks] == ["toy_0", "toy_1"]
    assert tasks[0].metadata["start"] == 10
    assert _play(bench, tasks[0], bench.oracle_turns(tasks[0])).success
    assert bench.load_tasks(task_ids=["toy_1"]) == [tasks[1]]
    with pytest.raises(ValueError, match="unknown toy task ids"):
        bench.load_tasks(task_ids=["toy_9"])
