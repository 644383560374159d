"""MemP's build on real BFCL oracle episodes: the builder LLM's script and keywords are
validated, retried once with the violations named, and replaced by the counted
deterministic procedure when still invalid, refused or when no model is configured."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import pytest

from distillery.workers.llm.types import ChatResult, ContextOverflow, Usage
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.memp.build import (
    MAX_STEPS,
    fallback_script,
    keywords_of,
    render_trajectory,
    validate_answer,
)
from distillery.workers.memory.memp.records import KEYWORD_COLLECTION, QUERY_COLLECTION
from distillery.workers.memory.registry import memory_method

GOOD = {"script": "1. List the files.\n2. Move the file into the folder.", "keywords": [
    "move", "file", "folder", "directory"]}  # fmt: skip


class ScriptedLLM:
    """A builder model answering each request with `answer(messages)`."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.requests: list[list[dict]] = []

    async def chat(self, messages, **kwargs):
        self.requests.append(messages)
        text = self.answer(messages)
        if isinstance(text, Exception):
            raise text
        return ChatResult(text=text, usage=Usage(100, 20))


def _build(oracle, llm, episodes=None):
    tasks, all_episodes = oracle
    builder = type("B", (), {"concurrency": 3})()
    return asyncio.run(
        memory_method("memp").build(episodes or all_episodes, tasks, builder, llm, "all")
    )


def test_valid_answers_are_used_and_both_keys_stored(oracle):
    tasks, episodes = oracle
    llm = ScriptedLLM(lambda messages: json.dumps(GOOD))
    bank = _build(oracle, llm)
    assert bank.prefix == "memp" and bank.counts() == {QUERY_COLLECTION: 6, KEYWORD_COLLECTION: 6}
    assert bank.stats["script.requests"] == 6 and bank.stats["script.accepted"] == 6
    assert "script.fallbacks" not in bank.stats and bank.stats["fallback_procedures"] == 0
    by_task = {t.task_id: t for t in tasks}
    for entry, keyed, episode in zip(
        bank.collections[QUERY_COLLECTION], bank.collections[KEYWORD_COLLECTION], episodes,
        strict=True,
    ):  # fmt: skip
        query = by_task[episode.task_id].turns[0]
        assert entry.source == MemorySource(
            episode.task_id, episode.group_id, "all", "oracle", episode.episode_id
        )
        assert entry.script == GOOD["script"] and entry.keywords == tuple(GOOD["keywords"])
        assert entry.key_text == query  # the original keys by the task query
        assert keyed.memory_id == entry.memory_id and keyed.script == entry.script
        assert keyed.key_text == " ".join([query, *GOOD["keywords"]])
        # The trajectory: every executed call, in order, with its observation.
        lines = entry.trajectory.splitlines()
        calls = [c.call for s in episode.steps for c in s.calls if not c.rejected]
        assert [ln.split(" -> ", 1)[0] for ln in lines if not ln.startswith("[turn")] == calls
    # The builder saw the request and the executed calls.
    prompt = llm.requests[0][0]["content"]
    assert by_task[episodes[0].task_id].turns[0] in prompt
    assert render_trajectory(episodes[0]) in prompt


def test_an_invalid_answer_is_retried_once_naming_the_violations(oracle):
    def answer(messages):
        if len(messages) == 1:
            return "Here is the script: first list files, then move them."
        assert "JSON object" in messages[-1]["content"]  # the violation is named
        return "```json\n" + json.dumps(GOOD) + "\n```"

    bank = _build(oracle, ScriptedLLM(answer))
    assert bank.stats["script.retries"] == 6 and bank.stats["script.accepted"] == 6
    assert bank.stats["invalid.script:json"] == 6
    assert all(not e.fallback for e in bank.collections[QUERY_COLLECTION])


def test_two_invalid_answers_or_a_refusal_give_the_counted_deterministic_procedure(oracle):
    tasks, episodes = oracle
    too_long = {**GOOD, "script": "\n".join(f"{i}. step" for i in range(1, MAX_STEPS + 3))}
    refuse = ContextOverflow("too long")
    answers = iter([json.dumps(too_long), json.dumps({**GOOD, "keywords": ["one"]}), refuse])
    llm = ScriptedLLM(lambda messages: next(answers))
    bank = _build(oracle, llm, episodes=[episodes[0], episodes[2]])
    first, second = bank.collections[QUERY_COLLECTION]
    assert first.fallback and second.fallback
    assert bank.stats["script.fallbacks"] == 2 and bank.stats["fallback_procedures"] == 2
    assert bank.stats["invalid.script:steps"] == 1
    assert bank.stats["invalid.script:keyword_count"] == 1
    assert bank.stats["invalid.script:request_context_overflow"] == 1
    assert bank.stats["script.requests"] == 3  # two for the first, one refused
    by_task = {t.task_id: t for t in tasks}
    assert first.script == fallback_script(episodes[0])
    assert first.keywords == keywords_of(by_task[episodes[0].task_id].turns[0])
    # Numbered steps of the executed functions, in order, as the prompt asks them.
    steps = first.script.splitlines()
    assert steps[0].startswith("1. Call ") and len(steps) <= MAX_STEPS
    assert all(s.split(". ", 1)[0] == str(i) for i, s in enumerate(steps, 1))


def test_without_a_builder_model_every_entry_is_deterministic_not_a_fallback(oracle):
    tasks, episodes = oracle
    failed = dataclasses.replace(episodes[0], success=False, episode_id="failed-0")
    bank = _build(oracle, None, episodes=[*episodes, failed])
    assert bank.counts()[QUERY_COLLECTION] == 6
    assert bank.stats["script.deterministic"] == 6
    assert bank.stats["skipped.script:unsuccessful"] == 1  # only what worked is kept
    assert "script.fallbacks" not in bank.stats and "script.requests" not in bank.stats
    # Deterministic keywords: the query's content words, stop words left out.
    query = next(t for t in tasks if t.task_id == episodes[0].task_id).turns[0]
    words = keywords_of(query)
    assert words and all(w == w.lower() and w in query.lower() for w in words)
    assert not {"the", "and", "please", "into"} & set(words)


@pytest.mark.parametrize(
    ("answer", "codes"),
    [
        ("not json", ["json"]),
        (json.dumps({"script": "", "keywords": GOOD["keywords"]}), ["script"]),
        (json.dumps({"script": "List files then move.", "keywords": GOOD["keywords"]}), ["steps"]),
        (json.dumps({"script": GOOD["script"], "keywords": "move, file"}), ["keywords"]),
        (json.dumps({"script": GOOD["script"], "keywords": ["a", "A", "b"]}), ["keyword_count"]),
        (json.dumps({"script": GOOD["script"], "keywords": ["x" * 61, "b", "c"]}),
         ["keyword_length"]),
    ],
)  # fmt: skip
def test_validation_names_each_violation(answer, codes):
    value, problems = validate_answer(answer)
    assert value is None and [p.code for p in problems] == codes


def test_a_script_given_as_a_list_of_steps_is_numbered():
    answer = json.dumps(
        {"script": ["List the files.", "2. Move one."], "keywords": GOOD["keywords"]}
    )
    (script, keywords), problems = validate_answer(answer)
    assert not problems and script == "1. List the files.\n2. Move one."


def test_the_bank_id_is_its_content(oracle):
    _, episodes = oracle
    method = memory_method("memp")
    bank_id = method.bank_id(episodes, None, "none", "all")
    assert bank_id == method.bank_id(list(reversed(episodes)), None, "none", "all")
    assert bank_id != method.bank_id(episodes, None, "gpt-5-mini", "all")  # who writes
    assert bank_id != method.bank_id(episodes, None, "none", "memory")
    changed = dataclasses.replace(episodes[1], steps=episodes[1].steps[:-1])
    assert bank_id != method.bank_id([episodes[0], changed, *episodes[2:]], None, "none", "all")


def test_the_ports_bank_keeps_failed_trajectories_labelled(oracle):
    """The AMD authors' ports (`memp_amd`) proceduralize failed teacher trajectories
    too, asking for what went wrong, and label every procedure with its verdict."""
    tasks, episodes = oracle
    failed = [dataclasses.replace(e, success=False) for e in episodes[:2]]
    mixed = [*failed, *episodes[2:4]]
    llm = ScriptedLLM(lambda messages: json.dumps(GOOD))
    builder = type("B", (), {"concurrency": 2})()
    port = memory_method("memp_amd")
    bank = asyncio.run(port.build(mixed, tasks, builder, llm, "all"))
    outcomes = [e.outcome for e in bank.collections[QUERY_COLLECTION]]
    assert outcomes == ["failure", "failure", "success", "success"]
    assert bank.prefix == "memp_amd" and bank.stats["failure_procedures"] == 2
    asked = [m[-1]["content"] for m in llm.requests]
    assert sum("The attempt FAILED" in text for text in asked) == 2
    # The original keeps the successes only.
    original = asyncio.run(memory_method("memp").build(mixed, tasks, builder, llm, "all"))
    assert [e.outcome for e in original.collections[QUERY_COLLECTION]] == ["success"] * 2
