"""`toolsandbox` with its real venv (slow: built once per session from the vendored
checkout): the scenario listing (all 129 base scenarios, or 91 without the network), and episodes
played by distillery's agent loop with a scripted agent and the scripted user (option
`scripted_user`), in ToolSandbox's execution context, scored by ToolSandbox's own
evaluation. The simulated (LLM) user is in test_user.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.envs.toolsandbox.benchmark import ToolSandbox, ToolSandboxOptions
from distillery.workers.llm.types import ChatResult

pytestmark = pytest.mark.slow

REMINDER = "add_reminder_content_and_date_and_time_multiple_user_turn"
CONTACT = "add_contact_with_name_and_phone_number"
BASE, NETWORK = 129, 38  # ToolSandbox's base scenarios; those calling RapidAPI


class ScriptedAgent:
    """Replies in order; a reply may be a function of the messages so far (to use a
    tool's result, as a model would)."""

    action_format = "native"

    def __init__(self, replies: list[Any]) -> None:
        self.replies = list(replies)
        self.seen: list[list[dict[str, Any]]] = []

    async def respond(self, messages, tools) -> ChatResult:
        self.seen.append([dict(m) for m in messages])
        reply = self.replies.pop(0)
        return reply(messages) if callable(reply) else reply

    async def close(self) -> None:
        pass


def _call(function: str, /, **kwargs: Any) -> ChatResult:
    return ChatResult(
        text="",
        tool_calls=[{"id": f"c_{function}", "name": function, "arguments": json.dumps(kwargs)}],
    )


def _play(bench: ToolSandbox, task_id: str, agent: ScriptedAgent):
    (task,) = bench.load_tasks(task_ids=[task_id])
    env = bench.make_env(task, "test")
    try:
        outcome = asyncio.run(
            run_agent_loop(env, agent, bench.max_steps_per_turn, conventions=conventions_of(bench))
        )
        return task, outcome, env.score()
    finally:
        env.close()


@pytest.fixture
def bench(toolsandbox_ready):
    options = ToolSandboxOptions(spare_workers=0, scripted_user={REMINDER: ["3/22/2024 5PM"]})
    bench = ToolSandbox(options)
    yield bench
    bench.close()


def test_all_base_scenarios_are_listed_and_network_false_leaves_38_out(bench):
    tasks = bench.load_tasks()
    assert len(tasks) == BASE and bench.excluded_network_scenarios() == 0  # the paper's 129
    offline = ToolSandbox(ToolSandboxOptions(spare_workers=0, network=False))
    try:
        assert len(offline.load_tasks()) == BASE - NETWORK
        assert offline.excluded_network_scenarios() == NETWORK
    finally:
        offline.close()
    assert all("NO_DISTRACTION_TOOLS" in t.metadata["categories"] for t in tasks)
    by_id = {t.task_id: t for t in tasks}
    reminder = by_id[REMINDER]
    # The simulated user's own instruction, which the agent never sees (metadata for a
    # memory method's named option only).
    hidden = reminder.metadata["user_instruction"]
    assert hidden and "chocolate milk" in hidden and hidden not in reminder.turns[0]
    # The opening message only: the user's later turns are the world's to say.
    assert reminder.turns == ("Remind me to buy chocolate milk",)
    names = sorted(doc["name"] for doc in reminder.function_docs)
    assert names == [
        "add_reminder",
        "datetime_info_to_timestamp",
    ]  # the user's tools are not the agent's
    assert by_id[CONTACT].turns == (
        "Add Stephen Sondheim to my contact, his phone_number is +19876543210",
    )
    versions = ToolSandbox.versions()
    assert versions["openai"] == "1.17.0" and versions["tool_sandbox"] == "0.0.1"


def test_a_scripted_episode_across_two_user_turns_meets_every_milestone(bench):
    def add(messages):  # the timestamp is the tool's answer, as the agent reads it
        timestamp = float(messages[-1]["content"])
        return _call("add_reminder", content="Buy chocolate milk", reminder_timestamp=timestamp)

    agent = ScriptedAgent([
        ChatResult(text="When should I remind you?"),
        _call("datetime_info_to_timestamp", year=2024, month=3, day=22, hour=17, minute=0, second=0),
        add,
        ChatResult(text="Done: you will be reminded to buy chocolate milk."),
    ])  # fmt: skip
    task, outcome, score = _play(bench, REMINDER, agent)
    assert outcome.termination == "done" and outcome.steps_per_turn == [0, 2]
    assert agent.replies == []
    assert agent.seen[1][-1] == {"role": "user", "content": "3/22/2024 5PM"}  # the script's
    assert score.success is True, score.error_message
    assert "similarity=1.000" in (score.error_message or "")
    assert "Don't make assumptions" in agent.seen[0][0]["content"]  # ToolSandbox's system prompt


def test_tool_errors_are_observations_and_missed_milestones_fail(bench):
    agent = ScriptedAgent([
        _call("search_contacts", name="x"),  # not one of this scenario's tools
        _call("add_reminder", content="Buy chocolate milk"),  # a required argument missing
        ChatResult(text="I could not do it."),
        ChatResult(text="Still no."),
    ])  # fmt: skip
    task, outcome, score = _play(bench, REMINDER, agent)
    observations = [m["content"] for m in agent.seen[2] if m["role"] == "tool"]
    assert observations[0].startswith("Error:") and "missing a required argument" in observations[1]
    assert score.success is False and score.error_type == "toolsandbox:milestones"
    assert "milestone_similarity=0.000" in (score.error_message or "")


def test_the_agents_closing_reply_reaches_toolsandbox(bench):
    # A milestone on the agent's answer to the user (57 of the 91 base scenarios have
    # one): met once the closing reply is ToolSandbox's AGENT -> USER message. The
    # scenario has no scripted turns, so the user ends the conversation at once.
    agent = ScriptedAgent([
        _call("add_contact", name="Stephen Sondheim", phone_number="+19876543210"),
        ChatResult(text="Stephen Sondheim has been added to your contact"),
    ])  # fmt: skip
    _, outcome, score = _play(bench, CONTACT, agent)
    assert outcome.steps_per_turn == [1] and outcome.termination == "done"
    assert score.success is True, score.error_message
    assert "milestone_similarity=1.000" in (score.error_message or "")


def test_the_scenarios_message_limit_ends_the_episode(bench):
    # ToolSandbox stops a scenario after 30 new messages (two per executed call): the
    # world says so with the step that reaches it, and the loop ends there.
    call = _call(
        "datetime_info_to_timestamp", year=2024, month=3, day=22, hour=17, minute=0, second=0
    )
    agent = ScriptedAgent([call] * 20)
    _, outcome, score = _play(bench, REMINDER, agent)
    assert outcome.termination == "done" and outcome.steps_per_turn == [15]
    assert len(agent.replies) == 5  # no reply asked after the limit
    assert score.success is False and "turn_count=" in (score.error_message or "")
