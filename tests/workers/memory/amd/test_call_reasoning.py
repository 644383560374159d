"""Why each stored call was made (call_reasoning.py): a ToolSandbox build asks the
builder model for every Function record's reasoning, as the AMD authors' ToolSandbox
builder asks its think model (builder.py:250); BFCL and AppWorld builds ask nothing
more and keep their bank ids."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from distillery.workers.envs.base import Task
from distillery.workers.memory.amd import toolsandbox_prompts
from distillery.workers.memory.amd.bank import bank_id_for, build_bank
from distillery.workers.memory.amd.call_reasoning import MAX_WORDS, validate_reasoning
from distillery.workers.memory.amd.settings import APPWORLD, BFCL, TOOLSANDBOX, BenchmarkProfile
from distillery.workers.memory.config import BuilderConfig
from distillery.workers.trajectories import EpisodeRecord
from tests.workers.memory.amd.test_builders import (
    DOCS,
    TURNS,
    ScriptedLLM,
    make_episode,
)

# A short ToolSandbox trajectory: a contact looked up, then a message sent to it.
SEARCH = "search_contacts(name='Homer')"
SEND = "send_message_with_phone_number(phone_number='+15550001', content='late')"
TS_CALLS = [
    (0, [(SEARCH, '[{"name": "Homer", "phone_number": "+15550001"}]', None, False)]),
    (0, [(SEND, '"msg-42"', None, False)]),
]
TS_TURNS = ["Tell Homer that I will be late"]
TS_DOCS = {
    "search_contacts": {"name": "search_contacts", "parameters": {"properties": {"name": {}}}},
    "send_message_with_phone_number": {
        "name": "send_message_with_phone_number",
        "parameters": {"properties": {"phone_number": {}, "content": {}}},
    },
}
WHY_SEARCH = "The phone number of the contact is unknown, so the contact is looked up by name."
WHY_SEND = "search_contacts returned the phone_number, so the message is sent to it."


def _toolsandbox_episode() -> EpisodeRecord:
    return replace(make_episode("ts_1", calls=TS_CALLS, turns=TS_TURNS), benchmark="toolsandbox")


def _task(benchmark: str, task_id: str, turns: list[str], docs: dict) -> Task:
    return Task(task_id, benchmark, tuple(turns), (), tuple(docs.values()))


def _build(episode: EpisodeRecord, task: Task, llm: ScriptedLLM | None):
    return asyncio.run(
        build_bank([episode], [task], BuilderConfig(concurrency=1), llm, "all", False)
    )


def _workflow_and_subtask_replies() -> list[str]:
    insight = (
        "Look up the contact with search_contacts before messaging <NAME>, then send with "
        "send_message_with_phone_number. Verify the send result before replying. A common "
        "failure is messaging a name instead of a phone number."
    )
    segments = [{"start_step": 1, "end_step": 2, "label": "message a contact",
                 "description": "Find the contact and send the message."}]  # fmt: skip
    return [insight, json.dumps(segments)]


def test_a_toolsandbox_build_stores_each_call_s_reasoning():
    llm = ScriptedLLM(*_workflow_and_subtask_replies(), WHY_SEARCH, WHY_SEND)
    task = _task("toolsandbox", "ts_1", TS_TURNS, TS_DOCS)
    bank = _build(_toolsandbox_episode(), task, llm)
    functions = bank.collections["fn"]
    assert [f.reasoning for f in functions] == [WHY_SEARCH, WHY_SEND]
    asked = llm.calls[2:]
    assert len(asked) == 2  # one request per stored call
    system, user = asked[1]
    assert system == {"role": "system", "content": toolsandbox_prompts.CALL_REASONING_SYSTEM}
    # Their inputs (builder.py:272-286): the task, the earlier calls with results cut to
    # 100 characters, the call itself, arguments as JSON; values masked (ours).
    prompt = user["content"]
    assert 'Calls made before it:\n  search_contacts({"name": ' in prompt
    assert 'The call it makes next: send_message_with_phone_number({"phone_number": "<' in prompt
    assert "+15550001" not in prompt and "Homer" not in prompt
    assert "Calls made before it" not in asked[0][1]["content"]  # the first call: none
    assert bank.stats["fn_reasoning.requests"] == 2
    assert bank.stats["fn_reasoning.accepted"] == 2
    assert bank.stats["fn_reasoning.tokens_in"] == 100  # counted in the build's cost


def test_a_bad_answer_is_retried_once_then_stored_empty_and_counted():
    too_long = " ".join(["word"] * (MAX_WORDS + 1)) + "."
    llm = ScriptedLLM(
        *_workflow_and_subtask_replies(), "<|im_start|>assistant", WHY_SEARCH, "", too_long
    )
    bank = _build(_toolsandbox_episode(), _task("toolsandbox", "ts_1", TS_TURNS, TS_DOCS), llm)
    assert [f.reasoning for f in bank.collections["fn"]] == [WHY_SEARCH, ""]
    stats = bank.stats
    assert stats["fn_reasoning.requests"] == 4 and stats["fn_reasoning.retries"] == 2
    assert stats["fn_reasoning.fallbacks"] == 1
    assert stats["invalid.fn_reasoning:control_token"] == 1
    assert stats["invalid.fn_reasoning:empty"] == 1
    assert stats["invalid.fn_reasoning:too_long"] == 1
    assert "invalid" in llm.calls[3][-1]["content"]  # the retry names what was wrong


# The id this episode's bank had before reasoning was built (BuilderConfig(), builder
# "none"): a BFCL build's identity did not move.
BFCL_BANK_ID = "3bc98d2bd75a75eaa790a0dac90eaa1062d376464dc8144b9db132be92008f71"


def test_a_bfcl_build_asks_nothing_more_and_keeps_its_bank_id():
    episode = make_episode()
    scripted = ScriptedLLM(lambda messages: "an answer")  # every request answered
    bank = _build(episode, _task("bfcl_multi_turn_base", episode.task_id, TURNS, DOCS), scripted)
    assert all(f.reasoning == "" for f in bank.collections["fn"])
    assert scripted.calls and not any(m[0]["role"] == "system" for m in scripted.calls)
    assert not any(k.startswith("fn_reasoning") for k in bank.stats)
    assert not BFCL.function_reasoning and not BFCL.builds_differently
    assert bank_id_for([episode], BuilderConfig(), "none", "all", False) == BFCL_BANK_ID


def test_the_switch_is_the_profile_s_and_in_its_identity_only_when_on():
    assert TOOLSANDBOX.function_reasoning and TOOLSANDBOX.builds_differently
    assert not APPWORLD.function_reasoning
    assert APPWORLD.version() == "f2a14276e8fbfe42"  # as before: AppWorld's banks keep their ids
    # AppWorld's digest is what it was without the field.
    without = APPWORLD.model_dump(exclude={"function_reasoning"})
    assert "function_reasoning" not in json.dumps(without)
    off = TOOLSANDBOX.model_copy(update={"function_reasoning": False})
    assert off.version() != TOOLSANDBOX.version()
    # A build on ToolSandbox has an id of its own (the profile's digest holds the prompts).
    ts = _toolsandbox_episode()
    bfcl_like = replace(ts, benchmark="bfcl_multi_turn_base")
    assert bank_id_for([ts], BuilderConfig(), "m", "all", False) != bank_id_for(
        [bfcl_like], BuilderConfig(), "m", "all", False
    )


def test_reasoning_needs_call_actions():
    with pytest.raises(ValueError, match="call actions"):
        BenchmarkProfile(name="x", actions="code", function_reasoning=True)


def test_the_validation_bounds_the_answer():
    assert validate_reasoning("  It is  needed.\n") == ("It is needed.", [])
    assert [p.code for p in validate_reasoning("")[1]] == ["empty"]
    assert [p.code for p in validate_reasoning("Fine. <think>x</think>")[1]] == ["control_token"]
    five = "One. Two. Three. Four. Five."
    assert [p.code for p in validate_reasoning(five)[1]] == ["too_long"]
