"""Isolated benchmarks through distillery's own EpisodeRunner: a crash or hang of the
worker is retried as an infrastructure error, never scored against the student."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.trajectories import read_episodes

ORACLE = ModelConfig(name="oracle", backend="oracle")


def _runner(tmp_path, retries=2, **options) -> EpisodeRunner:
    job = AgentJob(
        run_id="r",
        stage="collect",
        role="teacher",
        model=ORACLE,
        benchmark="faulty_counter",
        episodes_dir=str(tmp_path / "episodes"),
        benchmark_options={"spare_workers": 0, **options},
        episode_retries=retries,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job)


def _pids(runner: EpisodeRunner) -> list[int]:
    return list(runner.benchmark.pool().recent_pids)


def test_oracle_episodes_play_and_score(venv_ready, no_leftovers, tmp_path):
    runner = _runner(tmp_path, offset=3)
    summaries = asyncio.run(_all(runner))
    assert [s.success for s in summaries] == [True] * 4
    assert all(s.attempts == 1 and s.termination == "done" for s in summaries)
    no_leftovers.extend(_pids(runner))
    runner.benchmark.close()


async def _all(runner):
    ids = [t.task_id for t in runner.benchmark.load_tasks()]
    return await asyncio.gather(*[runner.run_task(i) for i in ids])


def test_a_crash_mid_episode_is_retried_and_then_scored(venv_ready, no_leftovers, tmp_path):
    runner = _runner(tmp_path, fault=f"crash_once:{tmp_path / 'crashed'}")
    summary = asyncio.run(runner.run_task("counter_0"))
    assert summary.attempts == 2 and summary.success is True
    (record,) = read_episodes(tmp_path / "episodes")
    assert record.attempts == 2 and record.success is True
    no_leftovers.extend(_pids(runner))
    assert len(no_leftovers) == 3  # the listing's worker, the crashed one, the retry's


def test_a_worker_that_always_crashes_is_an_unscored_infra_error(
    venv_ready, no_leftovers, tmp_path
):
    runner = _runner(tmp_path, retries=1, fault="crash")
    summary = asyncio.run(runner.run_task("counter_0"))
    assert summary.success is None and summary.termination == "infra_error"
    assert summary.attempts == 2 and "WorkerCrashed" in (summary.error_message or "")
    no_leftovers.extend(_pids(runner))


def test_a_hang_is_an_unscored_infra_error_in_bounded_time(venv_ready, no_leftovers, tmp_path):
    runner = _runner(tmp_path, retries=1, fault="hang", call_timeout_s=0.5)
    started = time.monotonic()
    summary = asyncio.run(runner.run_task("counter_1"))
    assert time.monotonic() - started < 120  # the hang itself never ends
    assert summary.success is None and summary.termination == "infra_error"
    assert "WorkerTimeout" in (summary.error_message or "")
    no_leftovers.extend(_pids(runner))


DRIVER = textwrap.dedent(
    """
    import sys, time
    from tests.workers.envs.isolated.conftest import FaultyCounter, FaultyOptions
    bench = FaultyCounter(FaultyOptions(fault="hang", spare_workers=2))
    env = bench.make_env(bench.load_tasks()[0], "e")
    env._worker.ready(60)
    print(" ".join(map(str, bench.pool().recent_pids)), flush=True)
    time.sleep(3600)
    """
)


@pytest.mark.slow
def test_workers_of_a_killed_driver_exit_by_themselves(venv_ready, tmp_path):
    # SIGKILL gives the driver no chance to clean up: the workers notice (stdin EOF,
    # or the parent watchdog for one stuck in a call) and exit on their own.
    from distillery.workers.envs.isolated.process import pids_alive

    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DISTILLERY_ENVS_DIR": str(venv_ready)},
        cwd=os.getcwd(),
    )
    pids = [int(p) for p in driver.stdout.readline().split()]
    assert len(pids) == 4 and len(pids_alive(pids)) == 3  # listing's worker closed
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    deadline = time.monotonic() + 10
    while pids_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pids_alive(pids) == []


def _chatty(tmp_path) -> EpisodeRunner:
    job = AgentJob(
        run_id="r",
        stage="collect",
        role="teacher",
        model=ORACLE,
        benchmark="chatty_counter",
        episodes_dir=str(tmp_path / "episodes"),
        benchmark_options={"spare_workers": 0},
        episode_retries=0,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job)


def test_the_worlds_user_and_its_end_of_task_cross_the_boundary(venv_ready, no_leftovers, tmp_path):
    runner = _chatty(tmp_path)

    async def both():
        return await asyncio.gather(runner.run_task("counter_1"), runner.run_task("counter_0"))

    two_turns, one_turn = asyncio.run(both())
    assert two_turns.success is True and one_turn.success is True
    records = {r.task_id: r for r in read_episodes(tmp_path / "episodes")}
    # counter_1: the listing opens with its first turn; the world's user said the second
    # after the oracle's closing reply of the first, and the world ended the task at the
    # step that left the final value (no closing reply was asked for, none was heard).
    talk = records["counter_1"]
    assert talk.n_turns == 2 and talk.steps_per_turn == [1, 1]
    assert json.loads(talk.error_message) == [""]  # the oracle's closing reply is empty
    users = [m["content"] for m in json.loads(talk.messages_json) if m["role"] == "user"]
    assert "Then subtract 3." in users
    # counter_0: done at its only step; the user never spoke.
    alone = records["counter_0"]
    assert alone.n_turns == 1 and alone.steps_per_turn == [1]
    assert json.loads(alone.error_message) == []
    no_leftovers.extend(_pids(runner))
    runner.benchmark.close()
