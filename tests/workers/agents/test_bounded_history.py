"""What enters an episode's history is bounded: every observation is cut to the
benchmark's observation cut (its own where it declares one, else distillery's default
cap), counted when it fires; a request body over the model's hard ceiling is never
sent and ends the episode as the model's failure."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.envs.base import ParsedAction, Score, Task, ToolCall, ToolResult
from distillery.workers.envs.conventions import (
    DEFAULT_CONVENTIONS,
    DEFAULT_OBSERVATION_CHARS,
    AgentConventions,
    ObservationCut,
)
from distillery.workers.episodes import AgentJob, EpisodeRunner
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult
from distillery.workers.trajectories import read_episodes

HUGE = "x" * 30_000_000  # what `print('x' * 30_000_000)` returns from an uncut interpreter


class _PrintingEnv:
    """One tool whose output is 30 MB, as a program's uncut stdout."""

    task = Task("t", "fake", ("Print a lot.",), (), ({"name": "run"},))

    def system_prompt(self, action_format: str) -> str:
        return "You run programs."

    def parse_text(self, text: str) -> ParsedAction:
        return (
            ParsedAction(calls=(ToolCall("run", call_id=None),))
            if text == "run"
            else ParsedAction()
        )

    def step(self, action: ParsedAction) -> list[ToolResult]:
        return [ToolResult(c.source, HUGE, None, c.name, c.call_id) for c in action.calls]

    def end_turn(self) -> None:
        pass

    def score(self) -> Score:
        return Score(False, "fake:failed")

    def close(self) -> None:
        pass


class _Runs:
    action_format = "prompt"

    def __init__(self, steps: int) -> None:
        self.left = steps
        self.request_chars: list[int] = []

    async def respond(self, messages, tools) -> ChatResult:
        self.request_chars.append(sum(len(m.get("content") or "") for m in messages))
        self.left -= 1
        return ChatResult(text="run" if self.left >= 0 else "done")

    async def close(self) -> None:
        pass


def _play(conventions: AgentConventions, steps: int = 4):
    policy = _Runs(steps)
    outcome = asyncio.run(run_agent_loop(_PrintingEnv(), policy, 40, conventions=conventions))
    return outcome, policy


def test_a_30_mb_observation_is_cut_to_the_default_cap_and_counted():
    outcome, policy = _play(DEFAULT_CONVENTIONS)
    # Before: requests of 30, 60, 90, 120 MB (every step re-sends every output).
    assert max(policy.request_chars) < 5 * (DEFAULT_OBSERVATION_CHARS + 1_000)
    assert outcome.limits_fired["observation_cut"] == 4
    kept = [m["content"] for m in outcome.messages if m["role"] == "user"][1:]
    assert len(kept) == 4 and all("characters cut]" in text for text in kept)
    assert all(
        len(c.content) < DEFAULT_OBSERVATION_CHARS + 100 for s in outcome.steps for c in s.calls
    )


def test_a_benchmarks_own_cut_is_used_and_the_option_changes_its_length():
    own = ObservationCut(20, lambda text, n: text[:n], "the benchmark's runner, file.py")
    conventions = replace(DEFAULT_CONVENTIONS, observation_cut=own)
    outcome, _ = _play(conventions, steps=1)
    (step,) = outcome.steps
    assert step.calls[0].content == "x" * 20 and outcome.limits_fired["observation_cut"] == 1
    outcome, _ = _play(conventions.with_observation_chars(50), steps=1)
    assert outcome.steps[0].calls[0].content == "x" * 50


def test_conventions_refuse_a_cut_that_is_not_one():
    with pytest.raises(TypeError, match="observation_cut must be an ObservationCut"):
        AgentConventions(observation_cut=20_000)
    with pytest.raises(ValueError, match="max_chars must be a positive int"):
        ObservationCut(0)


def test_a_request_over_the_ceiling_is_not_sent_and_is_the_models_failure(tmp_path):
    # Nothing listens at the URL: a request sent would be an infrastructure error.
    url = "http://127.0.0.1:9/v1"
    model = ModelConfig(
        name="small-ceiling",
        backend="external",
        model="m",
        base_url=url,
        action_format="native",
        max_retries=0,
        retry_backoff_s=0,
        max_request_bytes=4096,  # BFCL's first request (its tools) is larger
    )
    job = AgentJob(
        run_id="r",
        stage="evaluate",
        role="student",
        model=model,
        benchmark="bfcl_multi_turn_base",
        episodes_dir=str(tmp_path / "episodes"),
        episode_retries=0,
        retry_backoff_s=0,
    )
    summary = asyncio.run(EpisodeRunner(job, endpoints=[url]).run_task("multi_turn_base_0"))
    assert summary.termination == "context_overflow" and summary.success is False
    (record,) = read_episodes(tmp_path / "episodes")
    assert "exceeds the ceiling of 4096 (max_request_bytes): not sent" in record.error_message
