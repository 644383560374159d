"""Refused requests at the episode level (no Ray): a configuration error is no result
(raised, never retried, nothing written); a context overflow is the model's failure
(scored, with its own termination)."""

from __future__ import annotations

import asyncio

import pytest

from distillery.orchestrator.execution.metrics import agent_metrics
from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.router import RoutedChat
from distillery.workers.llm.types import RequestConfigError
from distillery.workers.trajectories import SCORED_TERMINATIONS, read_episodes
from tests.workers.llm.test_compat import shipped


def _runner(tmp_path, cfg: ModelConfig, url: str, **options) -> EpisodeRunner:
    job = AgentJob(
        run_id="r",
        stage="collect",
        role="teacher",
        model=cfg,
        benchmark="bfcl_multi_turn_base",
        benchmark_options=options,
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=2,
        retry_backoff_s=0,
    )
    return EpisodeRunner(job, chat_backend=RoutedChat.from_config(cfg, [url]))


def _gpt5(url: str, **update) -> ModelConfig:
    base = shipped("gpt5_mini").model_dump()
    return ModelConfig.model_validate(
        {**base, "base_url": url, "api_key_env": None, "retry_backoff_s": 0, **update}
    )


def test_a_configuration_error_is_raised_not_recorded_nor_retried(tmp_path):
    with run_stub_server("tests.support.openai_errors:gpt5") as url:
        # BFCL's handler sends no token cap: its `model_sampling` option sends the config's.
        cfg = _gpt5(url, token_limit_param="max_tokens", max_tokens=64)
        runner = _runner(tmp_path, cfg, url, model_sampling=True)

        async def both():
            with pytest.raises(RequestConfigError, match="Change: token_limit_param"):
                await runner.run_task("multi_turn_base_0")
            assert stub_stats(url)["requests"] == 1  # no episode retry either
            with pytest.raises(RequestConfigError):
                await runner.preflight()
            assert stub_stats(url)["preflight"] == 1

        asyncio.run(both())
    assert not (tmp_path / "episodes").exists() or read_episodes(tmp_path / "episodes") == []


def test_the_shipped_config_passes_the_preflight_and_plays(tmp_path):
    with run_stub_server("tests.support.openai_errors:gpt5") as url:
        runner = _runner(tmp_path, _gpt5(url), url)

        async def both():
            return await runner.preflight(), await runner.run_task("multi_turn_base_0")

        unreachable, summary = asyncio.run(both())
    assert unreachable is None
    assert summary.success and summary.termination == "done"


def test_an_unreachable_server_is_left_to_the_episodes(tmp_path):
    runner = _runner(
        tmp_path, _gpt5("http://127.0.0.1:9/v1", max_retries=0), "http://127.0.0.1:9/v1"
    )
    assert "failed 1 times" in asyncio.run(runner.preflight())


def test_context_overflow_is_scored_with_its_own_termination(tmp_path):
    with run_stub_server("tests.support.openai_errors:overflow_after_first_call") as url:
        summary = asyncio.run(_runner(tmp_path, _gpt5(url), url).run_task("multi_turn_base_0"))
    assert "context_overflow" in SCORED_TERMINATIONS
    assert summary.termination == "context_overflow"
    assert summary.success is False and summary.attempts == 1  # scored, not retried
    (record,) = read_episodes(tmp_path / "episodes")
    assert "maximum context length is 128000" in record.error_message
    assert record.total_steps == 1  # the step before the history outgrew the window
    metrics = agent_metrics([summary])
    assert metrics["context_overflows"] == 1 and metrics["n_scored"] == 1
    assert metrics["infra_errors"] == 0
