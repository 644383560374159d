"""The process boundary itself: a worker per episode, and every way it can fail ending
as an `InfraError` in bounded time with the worker killed."""

from __future__ import annotations

import asyncio
import time

import pytest

from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import OraclePolicy
from distillery.workers.envs.base import ParsedAction, ToolCall
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.envs.execution import close_in_env_thread, run_in_env_thread
from distillery.workers.envs.isolated.process import (
    MalformedReply,
    WorkerCrashed,
    WorkerRaised,
    WorkerTimeout,
    pids_alive,
)
from distillery.workers.llm.types import InfraError
from tests.workers.envs.isolated.conftest import FaultyCounter, FaultyOptions

ADD = ParsedAction(calls=(ToolCall("add", kwargs={"amount": 2}),))


def _bench(**options) -> FaultyCounter:
    options.setdefault("call_timeout_s", 5.0)
    options.setdefault("spare_workers", 0)
    return FaultyCounter(FaultyOptions(**options))


def test_an_episode_plays_in_its_own_worker(venv_ready, no_leftovers):
    bench = _bench(offset=100)
    (task,) = bench.load_tasks(task_ids=["counter_0"])
    assert task.metadata == {"start": 100} and task.benchmark == "faulty_counter"
    env = bench.make_env(task, "e1")
    no_leftovers.append(env.worker_pid)
    assert "Functions:" in env.system_prompt("prompt")
    (result,) = env.step(
        bench.parse_text(task, "[add(amount=5)]") and env.parse_text("[add(amount=5)]")
    )
    assert result.content == '{"value": 105}' and result.error is None
    assert result.call == "add(amount=5)" and result.function == "add"
    env.end_turn()
    assert env.score().success is True
    env.close()
    bench.close()
    no_leftovers.extend(bench.pool().recent_pids)


def test_rejected_calls_never_reach_the_world_and_errors_are_observations(venv_ready, no_leftovers):
    bench = _bench()
    task = bench.load_tasks()[0]
    env = bench.make_env(task, "e")
    no_leftovers.append(env.worker_pid)
    action = env.parse_text("[add(amount=1), launch(x=1)]")
    results = env.step(action)
    assert [r.rejected for r in results] == [False, True]
    (bad,) = env.step(ParsedAction(calls=(ToolCall("add", kwargs={"amount": "2"}),)))
    assert bad.error and not bad.rejected  # the world's own answer, the student's doing
    env.end_turn()
    assert env.score().success is False
    env.close()


def test_the_world_printing_on_stdout_does_not_corrupt_the_protocol(venv_ready, no_leftovers):
    bench = _bench(fault="print")
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    assert env.step(ADD)[0].content == '{"value": 2}'
    env.close()


@pytest.mark.parametrize("fault", ["crash", "crash_once"])
def test_a_crash_mid_episode_is_an_infra_error(venv_ready, no_leftovers, fault, tmp_path):
    spec = f"crash_once:{tmp_path / 'crashed'}" if fault == "crash_once" else "crash"
    bench = _bench(fault=spec)
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    with pytest.raises(WorkerCrashed, match="exited \\(code 7\\)") as caught:
        env.step(ADD)
    assert isinstance(caught.value, InfraError)
    assert "about to crash" in str(caught.value)  # the log's tail explains it
    with pytest.raises(WorkerCrashed):  # a failed worker is never talked to again
        env.score()
    env.close()


def test_a_hang_times_out_and_the_worker_is_killed(venv_ready, no_leftovers):
    bench = _bench(fault="hang", call_timeout_s=0.5)
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    env.step(ParsedAction())  # no calls: nothing is sent
    started = time.monotonic()
    with pytest.raises(WorkerTimeout):
        env.step(ADD)
    # Boot has its own allowance (startup_timeout_s); the call itself gets 0.5 s.
    assert time.monotonic() - started < 60  # the hang itself never ends
    assert pids_alive([env.worker_pid]) == []
    env.close()


@pytest.mark.parametrize(
    ("fault", "error"),
    [
        ("raise", WorkerRaised),
        ("bad_shape", MalformedReply),
        ("wrong_count", MalformedReply),
        ("bad_result", MalformedReply),
        ("garbage", MalformedReply),
        ("bad_utf8", MalformedReply),
        ("huge_header", MalformedReply),
        ("wrong_id", MalformedReply),
        ("truncated", WorkerTimeout),
        ("deep", MalformedReply),
    ],
)
def test_a_malformed_reply_is_an_infra_error(venv_ready, no_leftovers, fault, error):
    bench = _bench(fault=fault, max_reply_bytes=100_000, call_timeout_s=2)
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    started = time.monotonic()
    with pytest.raises(error) as caught:
        env.step(ADD)
    assert isinstance(caught.value, InfraError)
    assert time.monotonic() - started < 60  # a truncated reply never completes
    assert pids_alive([env.worker_pid]) == []
    env.close()


def test_a_world_that_cannot_reset_fails_its_episode(venv_ready, no_leftovers):
    bench = _bench(fault="raise_on_reset")
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    with pytest.raises(WorkerRaised, match="the world cannot be built"):
        env.step(ADD)


def test_a_malformed_task_listing_is_an_infra_error(venv_ready, monkeypatch):
    bench = _bench()
    worker = bench.pool().acquire()
    monkeypatch.setattr(bench.pool(), "acquire", lambda refill=True, network=None: worker)
    monkeypatch.setattr(worker, "call", lambda *a, **k: [{"task_id": "x", "turns": "no"}])
    with pytest.raises(MalformedReply, match="turns must be a list"):
        bench.load_tasks()
    worker.kill()


def test_close_leaves_no_process(venv_ready, no_leftovers):
    bench = _bench(spare_workers=3)
    tasks = bench.load_tasks()
    envs = [bench.make_env(task, f"e{i}") for i, task in enumerate(tasks)]
    envs[0].step(ADD)
    for env in envs:
        env.close()
    bench.close()  # the spares too
    no_leftovers.extend(bench.pool().recent_pids)
    assert len(no_leftovers) == len(tasks) + 1 + 3  # episodes, the listing, spares


def test_listing_the_tasks_leaves_no_worker_running(venv_ready, no_leftovers):
    bench = _bench(spare_workers=3)
    assert len(bench.load_tasks()) == 4
    no_leftovers.extend(bench.pool().recent_pids)
    assert len(no_leftovers) == 1


async def _play(bench, task, tag, pids):
    env = bench.make_env(task, tag)
    pids.append(env.worker_pid)
    conventions = conventions_of(bench)
    policy = OraclePolicy(bench.oracle_turns(task), conventions.oracle_reply)
    try:
        await run_agent_loop(env, policy, bench.max_steps_per_turn, None, conventions=conventions)
        return await run_in_env_thread(env.score)
    finally:
        await close_in_env_thread(env.close)


def test_concurrent_episodes_share_nothing(venv_ready, no_leftovers):
    bench = _bench(spare_workers=2)
    tasks = bench.load_tasks() * 6  # the same task many times at once: one world each

    async def main():
        return await asyncio.gather(
            *[_play(bench, t, f"e{i}", no_leftovers) for i, t in enumerate(tasks)]
        )

    scores = asyncio.run(main())
    assert all(score.success for score in scores)
    assert len(set(no_leftovers)) == len(tasks)  # one process per episode
    bench.close()
    no_leftovers.extend(bench.pool().recent_pids)


def test_interleaved_episodes_of_one_task_keep_their_own_state(venv_ready, no_leftovers):
    bench = _bench()
    task = bench.load_tasks()[0]
    first, second = bench.make_env(task, "a"), bench.make_env(task, "b")
    no_leftovers.extend([first.worker_pid, second.worker_pid])
    assert first.step(ADD)[0].content == '{"value": 2}'
    assert second.step(ADD)[0].content == '{"value": 2}'
    assert first.step(ADD)[0].content == '{"value": 4}'
    first.close()
    second.close()


def test_episodes_wait_on_their_workers_concurrently(venv_ready, no_leftovers):
    # In-process benchmarks share one environment thread; isolated episodes only wait
    # on their workers, so their slow steps overlap instead of queueing behind it.
    bench = _bench(fault="slow:3.0", spare_workers=4)
    envs = [bench.make_env(task, f"e{i}") for i, task in enumerate(bench.load_tasks())]
    for env in envs:
        env._worker.ready(30)

    async def main():
        return await asyncio.gather(*[run_in_env_thread(env.step, ADD) for env in envs])

    started = time.monotonic()
    results = asyncio.run(main())
    # Four 3 s steps (sleeps, as slow on any machine) overlap: in a row they take 12 s;
    # the margin absorbs a slow machine's thread and pipe overhead.
    assert time.monotonic() - started < 9
    assert all(r[0].error is None and '"value"' in r[0].content for r in results)
    for env in envs:
        no_leftovers.append(env.worker_pid)
        env.close()
    bench.close()
    no_leftovers.extend(bench.pool().recent_pids)
