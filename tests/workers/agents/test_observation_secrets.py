"""A world that shows a secret (a program printing its environment, a user simulator
quoting a key) never sends it to the model nor stores it: observations are redacted by
value, against every secret the process knows, before they enter the history."""

from __future__ import annotations

import asyncio

import pytest

from distillery import redaction
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.envs.base import ParsedAction, Score, Task, ToolCall, ToolResult
from distillery.workers.envs.conventions import DEFAULT_CONVENTIONS
from distillery.workers.llm.types import ChatResult

CANARY = "sk-observationcanary-4d5e6f7a8b"


class _EnvPrintingEnv:
    """`print(dict(os.environ))` as a world whose environment held the driver's keys
    would answer it."""

    task = Task("t", "fake", ("Show me the environment.",), (), ({"name": "run"},))

    def system_prompt(self, action_format: str) -> str:
        return "You run programs."

    def parse_text(self, text: str) -> ParsedAction:
        return ParsedAction(calls=(ToolCall("run"),)) if text == "run" else ParsedAction()

    def step(self, action: ParsedAction) -> list[ToolResult]:
        shown = f"{{'OPENAI_API_KEY': '{CANARY}', 'HOME': '/home/u'}}"
        return [ToolResult(c.source, shown, f"warning: {CANARY}", c.name) for c in action.calls]

    def end_turn(self) -> None:
        pass

    def score(self) -> Score:
        return Score(False)

    def close(self) -> None:
        pass


class _Policy:
    action_format = "prompt"

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def respond(self, messages, tools) -> ChatResult:
        self.sent.append(repr(messages))
        return ChatResult(text="run" if len(self.sent) < 3 else "done")

    async def close(self) -> None:
        pass


@pytest.fixture
def canary_registered(monkeypatch):
    redaction.clear_secrets()
    monkeypatch.setenv("OPENAI_API_KEY", CANARY)
    redaction.protect()  # what every worker does first
    yield
    redaction.clear_secrets()


def test_a_secret_a_world_shows_is_never_sent_nor_kept(canary_registered):
    policy = _Policy()
    outcome = asyncio.run(
        run_agent_loop(_EnvPrintingEnv(), policy, 40, conventions=DEFAULT_CONVENTIONS)
    )
    assert len(policy.sent) == 3 and not [s for s in policy.sent if CANARY in s]
    assert CANARY not in repr(outcome.messages) and CANARY not in repr(outcome.steps)
    assert "'OPENAI_API_KEY': '<redacted>'" in outcome.steps[0].calls[0].content  # the rest kept
    assert outcome.limits_fired["observation_redacted"] == 2
