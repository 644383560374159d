"""Function examples on ToolSandbox as the AMD authors' student picks them
(`fn_ranking=call_ngrams`, fn_ranking.py): character 2/3-gram vectors of the failing
step's calls against each example's reasoning, and the tool's description added to a
failing call's result with or without an example (`fn_description`)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
import pytest

from distillery.workers.envs.base import Task, ToolResult
from distillery.workers.memory.amd import fn_ranking
from distillery.workers.memory.amd.bank import build_bank
from distillery.workers.memory.amd.hooks import AmdHooks
from distillery.workers.memory.amd.method import AmdMethod
from distillery.workers.memory.amd.records import FunctionRecord, MemorySource
from distillery.workers.memory.amd.settings import (
    APPWORLD,
    TOOLSANDBOX,
    RetrievalConfig,
    composed_profile_settings,
)
from distillery.workers.memory.amd.toolsandbox_prompts import CALL_REASONING_LABEL
from distillery.workers.memory.config import BuilderConfig
from tests.workers.memory.amd import test_call_reasoning as built
from tests.workers.memory.amd.test_builders import ScriptedLLM, make_episode

SEND = "send_message_with_phone_number"
TOOLS = (
    {
        "type": "function",
        "function": {
            "name": SEND,
            "description": "Send a message to a recipient using their phone number.",
            "parameters": {
                "type": "object",
                "properties": {
                    "phone_number": {"type": "string", "description": "The phone number"},
                    "content": {"type": "string", "description": "The message"},
                },
                "required": ["phone_number", "content"],
            },
        },
    },
)


def _record(memory_id: str, instruction: str, reasoning: str = "") -> FunctionRecord:
    source = MemorySource(memory_id.split(":")[1], None, "all", "gpt-5-mini", memory_id)
    return FunctionRecord(
        memory_id, source, SEND, f"{SEND}(phone_number=<PHONE>, content=<TEXT>)",
        "None", instruction, reasoning=reasoning,
    )  # fmt: skip


# The turn's instruction is closest to LATE's, so the embedding ranking picks it; the
# failing step's calls (a contact looked up, then the message sent) match HOMER's
# reasoning, which is what the authors' ranking compares them with.
LATE = _record(
    "fn:epA:3",
    "Send a message to Fredrik saying I'm on my way",
    "The phone number is already known from the user, so the text is sent at once.",
)
HOMER = _record(
    "fn:epB:5",
    "Tell Homer I will be late",
    "search_contacts returned the contact's phone_number for the name, so "
    "send_message_with_phone_number sends the content to that phone_number.",
)
CLOCK = _record("fn:epC:2", "Text mom", "Get the current timestamp before the reminder.")
RECORDS = (CLOCK, HOMER, LATE)


@dataclass
class _Hit:
    entry: FunctionRecord
    score: float


class _EmbeddingLookup:
    """A memory service double: a function's records ranked by word overlap of the
    asked instruction with each record's (a stand-in for the embedder's cosine)."""

    def __init__(self, records: tuple[FunctionRecord, ...] = RECORDS) -> None:
        self.records = records
        self.asked: list[tuple] = []

    async def functions(self, function, instruction, task_id, k, threshold):
        self.asked.append((function, instruction, k, threshold))
        words = set(instruction.lower().split())
        hits = [
            _Hit(r, len(words & set(r.instruction.lower().split())) / 10)
            for r in self.records
            if r.function == function
        ]
        return sorted(hits, key=lambda h: -h.score)[:k]


STEP = [
    ToolResult("search_contacts(name='Homer')", '[{"phone_number": "+1 555"}]', None,
               "search_contacts", "c1"),
    ToolResult(f"{SEND}(phone_number='+1 555', content='late')", "Error: invalid",
               "invalid", SEND, "c2"),
]  # fmt: skip
TURN = "Send a message to Fredrik saying I'm on my way"


def _config(**values) -> RetrievalConfig:
    return TOOLSANDBOX.label(
        RetrievalConfig.model_validate({**TOOLSANDBOX.retrieval, "k_fn": 1, **values})
    )


def _failing_result(config: RetrievalConfig, lookup: Any = None, tools=TOOLS) -> str:
    hooks = AmdHooks(
        "t1", lookup or cast(Any, _EmbeddingLookup()), config, lambda source: True,
        profile=TOOLSANDBOX, tools=tools,
    )  # fmt: skip
    return asyncio.run(hooks.after_step(0, TURN, list(STEP)))[1].content


def test_the_ngrams_are_their_character_2_and_3_grams_of_the_lower_cased_text():
    ab = fn_ranking.ngram_vector("AB")  # one 2-gram, no 3-gram
    assert ab.shape == (256,) and np.count_nonzero(ab) == 1 and float(ab.max()) == 1.0
    assert np.array_equal(ab, fn_ranking.ngram_vector("ab"))
    abc = fn_ranking.ngram_vector("abc")  # ab, bc, abc
    assert abs(float(abc @ abc) - 1.0) < 1e-6 and float(abc @ ab) > 0
    assert not fn_ranking.ngram_vector("a").any()  # no n-gram: scores 0
    assert fn_ranking.similarities("x", ["a"]) == [0.0]


def test_the_recent_calls_are_the_step_s_calls_as_the_history_shows_them():
    calls = [ToolResult(f"f{i}(x={i})", "", None, f"f{i}") for i in range(5)]
    # memory_augmented_agent.py:224-229: the others' last three, latest first.
    assert fn_ranking.recent_calls(calls, 2) == (
        'Previous: f4({"x": 4}); f3({"x": 3}); f1({"x": 1}) | Current: f2({"x": 2})'
    )
    assert fn_ranking.recent_calls(calls[:1], 0) == 'Current: f0({"x": 0})'
    sent = fn_ranking.call_text(STEP[1])
    assert sent == f"{SEND}({json.dumps({'phone_number': '+1 555', 'content': 'late'})})"
    refused = ToolResult("not a call(", "Error", "refused", None, rejected=True)
    assert fn_ranking.call_text(refused) == "not a call("


def test_call_ngrams_picks_the_example_whose_reasoning_matches_the_recent_calls():
    lookup = _EmbeddingLookup()
    hinted = _failing_result(_config(), lookup)
    # Every record of the tool was asked for (no threshold), then ranked by n-grams.
    assert lookup.asked == [(SEND, TURN, fn_ranking.CANDIDATES, None)]
    assert "Tell Homer I will be late" in hinted and "Fredrik" not in hinted
    # The embedding ranking (ours, a named option) picks the instruction's neighbour.
    embedded = _failing_result(_config(fn_ranking="embedding"))
    assert "Fredrik" in embedded and "Homer" not in embedded


def test_the_ranking_follows_their_store_rule_by_rule():
    context = fn_ranking.recent_calls(STEP, 1)
    rank = fn_ranking.rank_examples

    def ids(ranked: list[fn_ranking.RankedExample]) -> list[str]:
        return [r.entry.memory_id for r in ranked]

    ordered = fn_ranking.bank_order(RECORDS)
    assert [r.memory_id for r in ordered] == ["fn:epA:3", "fn:epB:5", "fn:epC:2"]
    later = fn_ranking.bank_order([_record("fn:e:10", "x"), _record("fn:e:9", "x")])
    assert [r.memory_id for r in later] == ["fn:e:9", "fn:e:10"]  # steps as numbers
    assert ids(rank(ordered, context, TURN, 1)) == ["fn:epB:5"]
    # At most k records: every one, in stored order, unranked (store.py:194).
    assert ids(rank(ordered, context, TURN, 3)) == ["fn:epA:3", "fn:epB:5", "fn:epC:2"]
    # Records without a reasoning are left out while any has one (store.py:198).
    bare = _record("fn:epD:1", HOMER.reasoning)
    assert "fn:epD:1" not in ids(rank([*ordered, bare], context, TURN, 3))
    # None has one: the task query against each record's query (store.py:208-215).
    plain = [_record(r.memory_id, r.instruction) for r in ordered]
    assert ids(rank(plain, context, "Text mom now", 1)) == ["fn:epC:2"]
    assert ids(rank(plain, "", "", 2)) == ["fn:epA:3", "fn:epB:5"]  # nothing to rank by
    # Equal similarity: the record stored later first (np.argsort(sims)[::-1]).
    twins = [_record(f"fn:epE:{i}", "q", "same reasoning") for i in (1, 2, 3)]
    assert ids(rank(twins, context, TURN, 2)) == ["fn:epE:3", "fn:epE:2"]


def test_the_description_is_added_with_no_example():
    hinted = _failing_result(_config(), _EmbeddingLookup(records=()))
    assert hinted.startswith("Error: invalid\n\n[Function Description] " + SEND)
    assert "  - phone_number (string) (required): The phone number" in hinted
    assert "[Function memory]" not in hinted
    # With examples it leads them; from the task's tools only (an unlisted tool: none).
    assert _failing_result(_config()).index("[Function Description]") < (
        _failing_result(_config()).index("[Function memory]")
    )
    assert "[Function Description]" not in _failing_result(_config(), tools=())
    off = _failing_result(_config(fn_description=False), _EmbeddingLookup(records=()))
    assert off == "Error: invalid"


def test_the_method_gives_the_hooks_the_task_s_tools():
    class Search:
        async def search(self, collection, queries, task_id, k, threshold, group=None):
            return [[]]

    task = Task("t1", "toolsandbox", ("Text Homer.",), TOOLS, (), "t1")
    hooks = AmdMethod().hooks(task, Search(), _config(), lambda s: True, None)  # type: ignore[arg-type]
    result = asyncio.run(hooks.after_step(0, TURN, list(STEP)))[1].content
    assert "[Function Description] " + SEND in result


def test_toolsandbox_composes_the_authors_ranking_and_it_is_in_the_identity():
    assert composed_profile_settings("toolsandbox")["fn_ranking"] == "call_ngrams"
    assert RetrievalConfig().fn_ranking == "embedding"  # BFCL
    assert "fn_ranking" not in composed_profile_settings("appworld")
    assert _config().read_settings()["fn_ranking"] == "call_ngrams"
    assert _config(fn_ranking="embedding").read_settings() != _config().read_settings()
    # BFCL's keys hold neither (existing keys unchanged); without Function memory no key.
    assert "fn_ranking" not in RetrievalConfig().read_settings()
    assert "fn_ranking" not in _config(types=("wf", "st")).read_settings()
    # Nor through the profile's digest: a Workflow-only stage on ToolSandbox keeps its key.
    without = {k: v for k, v in TOOLSANDBOX.retrieval.items() if k != "fn_ranking"}
    assert TOOLSANDBOX.model_copy(update={"retrieval": without}).version() == (
        TOOLSANDBOX.version()
    )


def test_call_ngrams_is_refused_where_actions_are_code():
    config = APPWORLD.label(RetrievalConfig(fn_ranking="call_ngrams"))
    with pytest.raises(ValueError, match="actions are code"):
        AmdHooks("t1", cast(Any, _EmbeddingLookup()), config, lambda s: True, profile=APPWORLD)


# --- reasoning built on ToolSandbox (call_reasoning.py), then ranked by and shown -------


def _built_send_records() -> list[FunctionRecord]:
    """The send records of two ToolSandbox trajectories built with a scripted builder
    model: one looks the contact up first (its reasoning says so), one does not."""

    def answer(messages: list[dict]) -> str:
        prompt = messages[-1]["content"]
        if messages[0]["role"] != "system":  # Workflow, Subtask: any answer (fallbacks)
            return "-"
        if "The call it makes next: search_contacts" in prompt:
            return built.WHY_SEARCH
        if "Calls made before it" in prompt:
            return built.WHY_SEND
        return "The user gave the number, so the text goes out at once."

    direct = [(0, [(f"{SEND}(phone_number='+15550002', content='omw')", '"m"', None, False)])]
    episodes = [
        built._toolsandbox_episode(),
        replace(make_episode("ts_2", calls=direct, turns=[TURN]), benchmark="toolsandbox"),
    ]
    tasks = [
        Task("ts_1", "toolsandbox", tuple(built.TS_TURNS), (), tuple(built.TS_DOCS.values())),
        Task("ts_2", "toolsandbox", (TURN,), (), tuple(built.TS_DOCS.values())),
    ]
    bank = asyncio.run(
        build_bank(episodes, tasks, BuilderConfig(), ScriptedLLM(answer), "all", False)
    )
    return [r for r in bank.collections["fn"] if r.function == SEND]


def test_built_reasoning_is_what_call_ngrams_ranks_by():
    looked_up, direct = fn_ranking.bank_order(_built_send_records())
    assert looked_up.reasoning.startswith("search_contacts returned") and direct.reasoning
    context = fn_ranking.recent_calls(STEP, 1)  # a contact looked up, then the send
    # The task query is the direct trajectory's instruction: the fallback would pick it;
    # the reasoning path picks the record whose reasoning matches the recent calls.
    assert fn_ranking.rank_examples([looked_up, direct], context, TURN, 1)[0].entry == looked_up
    bare = [replace(r, reasoning="") for r in (looked_up, direct)]
    assert fn_ranking.rank_examples(bare, context, TURN, 1)[0].entry.memory_id == direct.memory_id


def test_the_hint_shows_why_the_example_s_call_was_made():
    hinted = _failing_result(_config())  # HOMER, with its reasoning
    assert f"{CALL_REASONING_LABEL}\n{HOMER.reasoning}\nInstruction: {HOMER.instruction}" in (
        hinted
    )
    bare = _EmbeddingLookup(records=tuple(replace(r, reasoning="") for r in RECORDS))
    assert CALL_REASONING_LABEL not in _failing_result(_config(), bare)
