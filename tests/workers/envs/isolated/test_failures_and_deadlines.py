"""Who failed, behind the process boundary (protocol 2): a call that failed inside the
world is an observation and the episode is scored; only the world itself failing is an
infrastructure error. What a model provokes (a huge product, text UTF-8 cannot hold, an
output of megabytes) never turns a step into an unscored episode. And the call deadline
holds whatever number the pipe's descriptors have."""

from __future__ import annotations

import asyncio
import json
import os
import resource
import threading

import pytest

from distillery.workers.envs.base import ParsedAction, ToolCall
from distillery.workers.envs.isolated.process import WorkerTimeout, pids_alive
from distillery.workers.envs.isolated.server import NOT_RUN
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult
from distillery.workers.trajectories import read_episodes
from tests.workers.envs.isolated.conftest import FaultyCounter, FaultyOptions

ADD = ToolCall("add", kwargs={"amount": 2})
TEN_TO_29 = 10**29  # the largest literal a call may hold (CallLimits.max_int_digits)


def _bench(**options) -> FaultyCounter:
    options.setdefault("call_timeout_s", 5.0)
    options.setdefault("spare_workers", 0)
    return FaultyCounter(FaultyOptions(**options))


def test_a_call_that_failed_inside_the_world_is_an_observation(venv_ready, no_leftovers):
    bench = _bench(fault="call_failed")
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    first, failed, after = env.step(ParsedAction(calls=(ADD, ADD, ADD)))
    assert first.content == '{"value": 2}' and first.error is None  # it ran
    assert "the model's call broke the world's harness" in failed.error
    assert failed.content.startswith("Error: CallFailed:")
    assert after.content == NOT_RUN and after.error
    assert pids_alive([env.worker_pid]) == [env.worker_pid]  # the world is fine
    env.end_turn()
    assert env.score().success is False  # scored: the model's doing
    env.close()


def test_text_utf8_cannot_hold_is_an_observation_not_a_broken_worker(venv_ready, no_leftovers):
    bench = _bench(fault="surrogate")
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    (result,) = env.step(ParsedAction(calls=(ADD,)))
    assert result.content == "printed \ufffd text"
    result.content.encode("utf-8")  # storable and sendable
    env.close()


def test_an_output_of_megabytes_is_cut_by_the_world_side_and_counted(venv_ready, no_leftovers):
    bench = _bench(fault="oversized", max_reply_bytes=100_000)
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    (result,) = env.step(ParsedAction(calls=(ADD,)))  # 200,000 characters: no infra error
    assert result.cut_from == 200_000
    assert len(result.content) < 10_000 and result.content.endswith("characters cut]")
    env.close()


class _Replies:
    """A chat backend answering from a fixed list (no HTTP)."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = list(texts)

    async def chat(self, episode_id, messages, **kwargs):
        return ChatResult(text=self.texts.pop(0) if self.texts else "done")

    def end_episode(self, episode_id):
        pass


def _student(tmp_path, texts, **options) -> EpisodeRunner:
    model = ModelConfig(
        name="scripted",
        backend="external",
        model="m",
        base_url="http://unused/v1",
        action_format="prompt",
    )
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="faulty_counter",
        episodes_dir=str(tmp_path / "episodes"),
        benchmark_options={"spare_workers": 0, **options},
        episode_retries=0,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job, chat_backend=_Replies(texts))


def test_the_counters_arithmetic_limits_are_the_models_failure(venv_ready, no_leftovers, tmp_path):
    # 31 legal products of 10**29 a reply: after five replies the value has more digits
    # than Python turns into text, and the world's own json.dumps used to raise: an
    # unscored infrastructure error, retried and left out of the rate on every resume.
    products = ", ".join([f"multiply(factor={TEN_TO_29})"] * 31)
    reply = f"[add(amount=1), {products}]"
    runner = _student(tmp_path, [reply] * 5)
    summary = asyncio.run(runner.run_task("counter_0"))
    no_leftovers.extend(runner.benchmark.pool().recent_pids)
    runner.benchmark.close()
    assert summary.success is False and summary.termination in ("done", "step_limit")
    (record,) = read_episodes(tmp_path / "episodes")
    errors = [c.error for step in record.steps for c in step.calls if c.error]
    assert any("holds at most 100 digits" in e for e in errors)


def test_a_megabyte_output_is_cut_in_the_history_and_counted(venv_ready, no_leftovers, tmp_path):
    runner = _student(tmp_path, ["[add(amount=5)]"] * 3, fault="oversized")
    summary = asyncio.run(runner.run_task("counter_0"))
    no_leftovers.extend(runner.benchmark.pool().recent_pids)
    runner.benchmark.close()
    assert summary.success is not None  # the model's doing: scored
    (record,) = read_episodes(tmp_path / "episodes")
    assert json.loads(record.extra_json)["limits_fired"]["observation_cut"] == 3
    # Each observation is at most the default cut (100,000) in the history.
    assert all(len(c.content) < 100_100 for s in record.steps for c in s.calls)


@pytest.fixture
def descriptors_above_1024():
    """Every descriptor below 1100 taken, so the next pipes are numbered above 1024
    (Ray raises the limit; a busy worker gets there)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    held = []
    base = os.open(os.devnull, os.O_RDONLY)
    try:
        while True:
            fd = os.dup(base)
            held.append(fd)
            if fd >= 1100:
                break
        yield
    finally:
        for fd in [base, *held]:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_call_deadline_holds_at_descriptors_above_1024(
    venv_ready, no_leftovers, descriptors_above_1024
):
    bench = _bench(fault="hang", call_timeout_s=1.0)
    env = bench.make_env(bench.load_tasks()[0], "e")
    no_leftovers.append(env.worker_pid)
    assert env._worker._out >= 1024 and env._worker._in >= 1024
    outcome: list[BaseException | None] = []

    def step() -> None:
        try:
            env.step(ParsedAction(calls=(ADD,)))
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - what the step ended with
            outcome.append(exc)

    thread = threading.Thread(target=step, daemon=True)
    thread.start()
    thread.join(120)  # select() lost the deadline here and a blocking read waited forever
    if thread.is_alive():
        env._worker.kill(close_pipes=False)  # unblock it, then fail
        thread.join(10)
        pytest.fail("the call deadline was lost at descriptors above 1024")
    assert isinstance(outcome[0], WorkerTimeout)
    assert pids_alive([env.worker_pid]) == []
    env.close()
