"""EpisodeRunner without Ray: retries, unscored infra failures, persistence."""

from __future__ import annotations

import asyncio

from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult, InfraError
from distillery.workers.trajectories import read_episode_table, read_episodes

STUDENT = ModelConfig(
    name="fake", backend="external", model="m", base_url="http://unused/v1", action_format="prompt"
)


class FlakyBackend:
    """Fails the first `failures` requests with InfraError, then answers `text`."""

    def __init__(self, failures: int, text: str = "no calls"):
        self.failures = failures
        self.text = text
        self.requests = 0
        self.ended: list[str] = []

    async def chat(self, episode_id, messages, **kwargs):
        self.requests += 1
        if self.requests <= self.failures:
            raise InfraError("connection refused")
        return ChatResult(text=self.text)

    def end_episode(self, episode_id):
        self.ended.append(episode_id)


def _job(tmp_path, model=STUDENT, retries=2):
    return AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=retries,
        retry_backoff_s=0,
    )


def test_infra_failure_is_retried_then_scored(tmp_path):
    backend = FlakyBackend(failures=1)
    runner = EpisodeRunner(_job(tmp_path), chat_backend=backend)
    summary = asyncio.run(runner.run_task("multi_turn_base_3"))
    assert summary.attempts == 2
    assert summary.success is False  # a real (scored) failure: it never called anything
    assert summary.termination == "done"
    assert len(backend.ended) == 2  # each attempt released its router slot
    (record,) = read_episodes(tmp_path / "episodes")
    assert record.task_id == "multi_turn_base_3" and record.attempts == 2


def test_persistent_infra_failure_is_recorded_unscored(tmp_path):
    runner = EpisodeRunner(_job(tmp_path, retries=1), chat_backend=FlakyBackend(failures=99))
    summary = asyncio.run(runner.run_task("multi_turn_base_3"))
    assert summary.success is None
    assert summary.termination == "infra_error"
    assert "connection refused" in summary.error_message
    table = read_episode_table(tmp_path / "episodes")
    assert table.num_rows == 1
    assert table.column("success").to_pylist() == [None]


def test_oracle_runs_without_any_backend(tmp_path):
    oracle = ModelConfig(name="oracle", backend="oracle")
    runner = EpisodeRunner(_job(tmp_path, model=oracle))

    async def play_all():
        return await asyncio.gather(*(runner.run_task(f"multi_turn_base_{i}") for i in range(5)))

    summaries = asyncio.run(play_all())
    assert all(s.success for s in summaries), [s.error_message for s in summaries]
    assert len(read_episodes(tmp_path / "episodes")) == 5


def test_the_episode_timeout_is_real_for_slow_environment_code(tmp_path, monkeypatch):
    """A synchronous environment call that overruns ends its episode as a timeout on
    time, and the event loop (every other episode of the worker) is never stalled."""
    import time

    from distillery.workers.envs.bfcl import BfclEnvironment

    original = BfclEnvironment.step

    def slow_step(self, action):
        time.sleep(4.0)  # e.g. a call BFCL computes for seconds
        return original(self, action)

    monkeypatch.setattr(BfclEnvironment, "step", slow_step)
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=STUDENT,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=0,
        episode_timeout_s=0.5,
    )
    runner = EpisodeRunner(job, chat_backend=FlakyBackend(0, text="[pwd()]"))
    ticks = []

    async def tick():
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.05)

    async def go():
        ticker = asyncio.create_task(tick())
        started = time.monotonic()
        summary = await runner.run_task("multi_turn_base_3")
        ticker.cancel()
        return summary, time.monotonic() - started

    summary, wall = asyncio.run(go())
    assert summary.termination == "timeout" and summary.success is None
    assert wall < 3.0  # the deadline (and a bounded wait for the close), not the 4 s call
    gaps = [b - a for a, b in zip(ticks, ticks[1:], strict=False)]
    assert max(gaps) < 0.3  # the loop kept running while the call ran
