"""Hooks' own messages (agents/hook_messages.py): placed at a turn's start, after a reply
or after its observations, withdrawn by key, seen on the wire without their marker and
recorded in the episode's injections. A fake world, scripted replies: no benchmark."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, cast

import pytest

from distillery.workers.agents.hook_messages import HookMessage, StepMessages
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import HOOK_NAME, wire_messages
from distillery.workers.envs.base import ParsedAction, Task, ToolCall, ToolResult
from distillery.workers.envs.conventions import AgentConventions
from distillery.workers.llm.types import ChatResult


@dataclass
class _World:
    """Every reply that is not "done" runs one call, answered with "out <n>"."""

    task: Task = field(default_factory=lambda: Task("t", "fake", ("do it",), (), ()))
    steps: int = 0

    def system_prompt(self, action_format: str) -> str:
        return "SYSTEM"

    def parse_text(self, text: str) -> ParsedAction:
        return ParsedAction() if text == "done" else ParsedAction(calls=(ToolCall("run"),))

    def step(self, action: ParsedAction) -> list[ToolResult]:
        self.steps += 1
        return [ToolResult(call="run()", content=f"out {self.steps}", function="run")]

    def end_turn(self) -> None:
        return None


class _Policy:
    action_format = "prompt"

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.seen = list(replies), []

    async def respond(self, messages, tools):
        self.seen.append(wire_messages([dict(m) for m in messages]))
        return ChatResult(text=self.replies.pop(0) if self.replies else "done")


class _Hooks:
    """Places A at the start; after step 1 puts B after the reply and withdraws A;
    after step 2 appends C."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int, str | None, list[str]]] = []

    async def before_turn(self, turn_index, user_text, system_prompt):
        return system_prompt

    async def after_step(self, turn_index, user_text, observations):
        return observations

    async def step_messages(self, turn_index, steps_done, reply, observations):
        self.asked.append((turn_index, steps_done, reply, [o.content for o in observations]))
        if reply is None:
            return StepMessages(appended=(HookMessage("a", "A"),))
        if steps_done == 1:
            return StepMessages(after_reply=(HookMessage("b", "B"),), withdrawn=("a",))
        if steps_done == 2:
            return StepMessages(appended=(HookMessage("c", "C"),))
        return None


def _play(hooks: Any, replies: list[str]):
    policy = _Policy(replies)
    outcome = asyncio.run(
        run_agent_loop(
            cast(Any, _World()), cast(Any, policy), 10, hooks, conventions=AgentConventions()
        )
    )
    return outcome, policy


def test_hook_messages_are_placed_withdrawn_and_recorded():
    hooks = _Hooks()
    outcome, policy = _play(hooks, ["r1", "r2"])
    contents = [[m["content"] for m in request[1:]] for request in policy.seen]
    assert contents[0] == ["do it", "A"]  # placed after the user message
    assert contents[1][:2] == ["do it", "r1"]  # A withdrawn, B right after the reply
    assert contents[1][2] == "B" and "out 1" in contents[1][3] and len(contents[1]) == 4
    assert contents[2][-1] == "C" and "out 2" in contents[2][-2]  # after the observations
    assert not any("name" in m for request in policy.seen for m in request)  # marker off the wire
    # The hooks saw each reply as kept and the step's observations.
    assert [(t, s, r) for t, s, r, _ in hooks.asked] == [(0, 0, None), (0, 1, "r1"), (0, 2, "r2")]
    assert "out 1" in hooks.asked[1][3][0]
    assert [(i.turn, i.step, i.where, i.text) for i in outcome.injections] == [
        (0, -1, "message", "A"),
        (0, 0, "message_withdrawn", "A"),
        (0, 0, "message", "B"),
        (0, 1, "message", "C"),
    ]
    marked = [m["content"] for m in outcome.messages if m.get("name") == HOOK_NAME]
    assert marked == ["B", "C"]  # the transcript: the history as it stands at the end


def test_hooks_without_step_messages_change_nothing():
    class Plain:
        async def before_turn(self, turn_index, user_text, system_prompt):
            return system_prompt

        async def after_step(self, turn_index, user_text, observations):
            return observations

    with_hooks, _ = _play(Plain(), ["r1"])
    without, _ = _play(None, ["r1"])
    assert with_hooks.messages == without.messages and not with_hooks.injections


def test_a_key_placed_twice_is_refused():
    class Twice(_Hooks):
        async def step_messages(self, turn_index, steps_done, reply, observations):
            return StepMessages(appended=(HookMessage("a", "A"),))

    with pytest.raises(ValueError, match="second message with the key 'a'"):
        _play(Twice(), ["r1"])
