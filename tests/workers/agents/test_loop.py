"""The agent loop on real BFCL environments with scripted policies (no HTTP), played by
BFCL's conventions; and the same loop played by other conventions (the defaults a
benchmark gets when it declares none)."""

from __future__ import annotations

import ast
import asyncio
import json

import pytest

from distillery.workers.agents.loop import OBSERVATION_NAME, run_agent_loop
from distillery.workers.agents.policies import OraclePolicy, wire_messages
from distillery.workers.envs.conventions import (
    DEFAULT_CONVENTIONS,
    UNANSWERED_CALL,
    AgentConventions,
    conventions_of,
)
from distillery.workers.envs.registry import make_benchmark
from distillery.workers.llm.types import ChatResult, RequestRejected, Usage


@pytest.fixture(scope="module")
def bench():
    return make_benchmark("bfcl_multi_turn_base")


@pytest.fixture(scope="module")
def task0(bench):
    (task,) = bench.load_tasks(task_ids=["multi_turn_base_0"])
    return task


class ScriptedPolicy:
    """Answers from a fixed list of ChatResults, then with empty text."""

    def __init__(self, replies, action_format="prompt"):
        self.replies = list(replies)
        self.action_format = action_format
        self.seen = []

    async def respond(self, messages, tools):
        self.seen.append((list(messages), tools))
        if self.replies:
            reply = self.replies.pop(0)
            if isinstance(reply, Exception):
                raise reply
            return reply
        return ChatResult(text="done")

    async def close(self):
        return None


def _play(bench, task, policy, max_steps=20, conventions=None):
    env = bench.make_env(task, f"test-{id(policy)}")
    conventions = conventions or conventions_of(bench)
    try:
        outcome = asyncio.run(run_agent_loop(env, policy, max_steps, conventions=conventions))
        return outcome, env.score()
    finally:
        env.close()


def _oracle(bench, task):
    return OraclePolicy(bench.oracle_turns(task), conventions_of(bench).oracle_reply)


def test_oracle_solves_through_the_loop(bench, task0):
    outcome, score = _play(bench, task0, _oracle(bench, task0))
    assert score.success, score.error_message
    assert outcome.termination == "done"
    assert outcome.steps_per_turn == [len(t) for t in bench.oracle_turns(task0)]
    # Real user turns and observations are told apart in the prompt format.
    users = [m for m in outcome.messages if m["role"] == "user"]
    assert sum(1 for m in users if m.get("name") != OBSERVATION_NAME) == len(task0.turns)


def test_prompt_format_observations_and_usage(bench, task0):
    policy = ScriptedPolicy(
        [ChatResult(text="[cd(folder='document')]", usage=Usage(100, 7), latency_s=0.5)]
    )
    outcome, score = _play(bench, task0, policy)
    assert not score.success
    assert outcome.tokens_in == 100 and outcome.tokens_out == 7
    assert outcome.n_llm_calls == 1 + len(task0.turns)  # one call, then one stop per turn
    obs = outcome.messages[3]
    assert obs["role"] == "user" and obs["name"] == OBSERVATION_NAME
    # BFCL's format: the repr of tool messages named by the decoded calls.
    payload = ast.literal_eval(obs["content"])
    assert payload == [
        {
            "role": "tool",
            "name": "cd(folder='document')",
            "content": outcome.steps[0].calls[0].content,
        }
    ]
    assert outcome.steps[0].calls[0].error is None
    assert outcome.steps[0].tokens_in == 100
    # Tools are only sent in the native format.
    assert policy.seen[0][1] is None


def test_native_format_answers_every_tool_call_id(bench, task0):
    reply = ChatResult(
        text="",
        tool_calls=[
            {"id": "a", "name": "cd", "arguments": json.dumps({"folder": "document"})},
            {"id": "b", "name": "rm_rf", "arguments": "{}"},
            {"id": "c", "name": "ls", "arguments": "{}"},
        ],
    )
    policy = ScriptedPolicy([reply], action_format="native")
    outcome, _ = _play(bench, task0, policy)
    tool_messages = [m for m in outcome.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["a", "b", "c"]
    assert policy.seen[0][1] and policy.seen[0][1][0]["type"] == "function"
    calls = outcome.steps[0].calls
    assert [c.rejected for c in calls] == [False, True, False]
    assert outcome.messages[1]["tool_calls"][0]["function"]["name"] == "cd"
    assert outcome.messages[0]["role"] == "user"  # no system prompt in native mode


def test_invalid_json_arguments_end_the_turn_as_in_bfcl(bench, task0):
    reply = ChatResult(
        text="",
        tool_calls=[
            {"id": "a", "name": "cd", "arguments": json.dumps({"folder": "document"})},
            {"id": "b", "name": "ls", "arguments": "{not json"},
        ],
    )
    policy = ScriptedPolicy([reply], action_format="native")
    outcome, _ = _play(bench, task0, policy)
    assert not outcome.steps  # nothing ran
    assert outcome.steps_per_turn[0] == 0
    # The next message is the next user turn: BFCL answers none of the calls.
    assert outcome.messages[2] == {"role": "user", "content": task0.turns[1]}


def test_request_rejected_ends_and_is_scored(bench, task0):
    policy = ScriptedPolicy([RequestRejected("context length exceeded")])
    outcome, score = _play(bench, task0, policy)
    assert outcome.termination == "request_rejected"
    assert score.success is False


def test_step_limit_is_bfcls(bench, task0):
    # BFCL quits once its counter exceeds the limit: limit + 1 steps, the turn kept.
    policy = ScriptedPolicy([ChatResult(text="[pwd()]")] * 10)
    outcome, score = _play(bench, task0, policy, max_steps=4)
    assert outcome.termination == "step_limit"
    assert outcome.steps_per_turn == [5]
    assert score.error_type == "multi_turn:force_terminated"  # turns 2..4 never played


def test_exactly_the_limit_then_text_ends_the_turn_normally(bench, task0):
    policy = ScriptedPolicy([ChatResult(text="[pwd()]")] * 4 + [ChatResult(text="done")])
    outcome, _ = _play(bench, task0, policy, max_steps=4)
    assert outcome.termination == "done"
    assert outcome.steps_per_turn[0] == 4


class BlockHooks:
    """Proactive memory on the second turn only."""

    async def before_turn(self, turn_index, user_text, system_prompt):
        return f"[memory]\n\n{system_prompt}" if turn_index == 1 else system_prompt

    async def after_step(self, turn_index, user_text, observations):
        return observations


def test_native_system_message_only_when_memory_is_injected(bench, task0):
    policy = ScriptedPolicy([], action_format="native")
    env = bench.make_env(task0, "hooks")
    try:
        asyncio.run(run_agent_loop(env, policy, 20, BlockHooks(), conventions=bench.conventions))
    finally:
        env.close()
    firsts = [messages[0] for messages, _ in policy.seen]
    assert firsts[0]["role"] == "user"  # BFCL's FC handlers send no system prompt
    assert firsts[1] == {"role": "system", "content": "[memory]"}
    assert firsts[2]["role"] == "user"  # and it goes again when memory does


class HintHooks(BlockHooks):
    """BlockHooks, and a hint appended to every observation (reactive memory)."""

    async def after_step(self, turn_index, user_text, observations):
        from dataclasses import replace

        return [replace(o, content=o.content + "\n[hint]") for o in observations]


def test_every_model_call_and_injection_is_recorded(bench, task0):
    """A reply with no action (prose: a small model's usual failure) is a model call of
    the record too, as is one the client could not use; what hooks inject is recorded
    where it went."""
    from distillery.workers.llm.types import InvalidReply

    replies = [
        ChatResult(text="[pwd()]", usage=Usage(50, 5), latency_s=0.25, attempts=2),
        ChatResult(text="I think the folder is fine.", usage=Usage(60, 8), finish_reason="stop"),
        InvalidReply("content is int 42"),
    ]
    policy = ScriptedPolicy(replies)
    env = bench.make_env(task0, "records")
    try:
        outcome = asyncio.run(
            run_agent_loop(env, policy, 20, HintHooks(), conventions=bench.conventions)
        )
    finally:
        env.close()
    calls = outcome.model_calls
    assert [(c.turn, c.step, c.outcome) for c in calls] == [
        (0, 0, "action"),
        (0, 1, "no_action"),
        (1, 0, "invalid_reply"),
    ]
    assert calls[0].attempts == 2 and calls[0].tokens_in == 50 and calls[0].latency_s == 0.25
    assert calls[0].action_s >= 0 and calls[1].text == "I think the folder is fine."
    assert calls[2].error == "content is int 42" and calls[2].tokens_in == 0
    # Each call's request is the transcript's first `request_messages` messages.
    assert [len(m) for m, _ in policy.seen] == [c.request_messages for c in calls]
    assert calls[0].started_at <= calls[1].started_at <= calls[2].started_at
    assert [(i.turn, i.step, i.where, i.text) for i in outcome.injections] == [
        (0, 0, "observation", "[hint]"),
        (1, -1, "system_prompt", "[memory]"),
    ]


@pytest.mark.parametrize("ids", [("x", "x", "x"), (None, None, None), (1, {"a": 1}, "")])
def test_each_observation_goes_to_its_own_call_whatever_the_ids(bench, task0, ids):
    """Repeated, missing or non-string ids (a policy that bypasses the client's repair):
    each call gets its own id and the observation of exactly that call."""
    calls = [
        ("pwd", {}),  # executed
        ("no_such_tool", {}),  # rejected
        ("ls", {}),  # executed
    ]
    reply = ChatResult(
        text="",
        tool_calls=[
            {"id": i, "name": name, "arguments": json.dumps(args)}
            for i, (name, args) in zip(ids, calls, strict=True)
        ],
    )
    policy = ScriptedPolicy([reply], action_format="native")
    outcome, _ = _play(bench, task0, policy)
    assistant = outcome.messages[1]  # native mode: no system prompt (BFCL's FC handlers)
    sent_ids = [c["id"] for c in assistant["tool_calls"]]
    assert len(set(sent_ids)) == 3 and all(isinstance(i, str) and i for i in sent_ids)
    answers = {m["tool_call_id"]: m["content"] for m in outcome.messages[2:5]}
    assert list(answers) == sent_ids
    pwd, rejected, ls = (answers[i] for i in sent_ids)
    assert '"current_working_directory"' in pwd
    assert "no_such_tool" in rejected and "Error during execution" in rejected  # BFCL wording
    assert '"current_directory_content"' in ls
    assert "not executed" not in pwd + ls


def test_an_invalid_reply_ends_the_episode_as_the_models_failure(bench, task0):
    from distillery.workers.llm.types import InvalidReply

    policy = ScriptedPolicy([ChatResult(text="[pwd()]"), InvalidReply("content is int 42")])
    outcome, score = _play(bench, task0, policy)
    assert outcome.termination == "invalid_reply" and "int 42" in outcome.rejection
    assert score.success is False


# ------------------------------------------------------- conventions of other benchmarks


def test_bfcl_declares_its_own_conventions_and_others_get_the_defaults(bench):
    bfcl = conventions_of(bench)
    assert bfcl != DEFAULT_CONVENTIONS
    assert (bfcl.step_limit, DEFAULT_CONVENTIONS.step_limit) == ("exceeded", "at_most")
    assert conventions_of(object()) is DEFAULT_CONVENTIONS  # declares nothing

    class Wrong:
        name = "wrong"
        conventions = {"step_limit": "at_most"}

    with pytest.raises(TypeError, match="'wrong': conventions must be an AgentConventions"):
        conventions_of(Wrong)
    with pytest.raises(ValueError, match="step_limit must be one of at_most, exceeded"):
        AgentConventions(step_limit="one_more")


def test_default_step_limit_is_at_most_the_limit(bench, task0):
    policy = ScriptedPolicy([ChatResult(text="[pwd()]")] * 10)
    outcome, _ = _play(bench, task0, policy, max_steps=4, conventions=DEFAULT_CONVENTIONS)
    assert outcome.termination == "step_limit"
    assert outcome.steps_per_turn == [4]  # BFCL's count would make 5


def test_default_prompt_results_are_one_json_user_message(bench, task0):
    policy = ScriptedPolicy([ChatResult(text="[cd(folder='document'), pwd()]")])
    outcome, _ = _play(bench, task0, policy, conventions=DEFAULT_CONVENTIONS)
    obs = outcome.messages[3]
    assert obs["role"] == "user" and obs["name"] == OBSERVATION_NAME
    calls = outcome.steps[0].calls
    assert json.loads(obs["content"]) == [
        {"call": "cd(folder='document')", "result": calls[0].content},
        {"call": "pwd()", "result": calls[1].content},
    ]
    # The marker is bookkeeping: the model is sent the benchmark's message alone.
    (sent,) = (m for m in wire_messages(policy.seen[1][0]) if m["content"] == obs["content"])
    assert sent == {"role": "user", "content": obs["content"]}


def test_the_benchmarks_feedback_and_oracle_replies_are_used(bench, task0):
    """A benchmark's own conventions reach the loop and the oracle: its feedback
    messages (tool messages answer every call id, user messages are marked) and its way
    of writing a ground-truth step as a reply."""
    fed = []

    def feedback(tool_calls, observations):
        fed.append((list(tool_calls), [o.call for o in observations]))
        return [
            {"role": "user", "content": "results: " + "; ".join(o.content for o in observations)}
        ]

    written = []

    def reply(step):
        written.append(step)
        return f"[{step},]"  # still a call list, written the benchmark's way

    own = AgentConventions(prompt_results=feedback, oracle_reply=reply)
    oracle = OraclePolicy(bench.oracle_turns(task0), own.oracle_reply)
    outcome, score = _play(bench, task0, oracle, conventions=own)
    assert score.success, score.error_message  # the reply still decodes to the same calls
    assert written == [step for turn in bench.oracle_turns(task0) for step in turn]
    assert [calls for _, calls in fed] == [[s.calls[0].call] for s in outcome.steps]
    assert all(tool_calls == [] for tool_calls, _ in fed)  # the prompt format has none
    assistant = [m["content"] for m in outcome.messages if m["role"] == "assistant"]
    assert assistant[0] == f"[{written[0]},]"
    observations = [m for m in outcome.messages if m.get("name") == OBSERVATION_NAME]
    assert len(observations) == len(outcome.steps)
    assert all(m["content"].startswith("results: ") for m in observations)


def test_default_native_results_answer_every_call_id(bench, task0):
    reply = ChatResult(
        text="",
        tool_calls=[
            {"id": "a", "name": "pwd", "arguments": "{}"},
            {"id": "b", "name": "ls", "arguments": "{}"},
        ],
    )
    policy = ScriptedPolicy([reply], action_format="native")
    outcome, _ = _play(bench, task0, policy, conventions=DEFAULT_CONVENTIONS)
    answers = [m for m in outcome.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in answers] == ["a", "b"]
    assert all(m["content"] != UNANSWERED_CALL for m in answers)
