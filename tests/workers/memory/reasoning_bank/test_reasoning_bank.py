"""ReasoningBank (`workers/memory/reasoning_bank`) on real BFCL V3 tasks: memory items
from successful AND failed trajectories (the benchmark's checker decides which), the
success or failure instruction by that verdict, answers validated with one retry and a
counted deterministic fallback, records stored and searched through the generic
memory service, and the top-k other tasks' items appended to the system prompt under
`self_excluded`, audited."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import json

import pytest
from pydantic import ValidationError

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.llm.types import ChatResult, ContextOverflow, Usage
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.method import MemoryMethod
from distillery.workers.memory.reasoning_bank import build, prompts
from distillery.workers.memory.reasoning_bank.records import MemoryItem
from distillery.workers.memory.registry import builtin_hook_texts, known_methods, memory_method
from distillery.workers.memory.retrieval import Isolation
from tests.support.memory_service import LeakySearch, inject_once, open_search, stored_bank
from tests.support.oracle import play_oracle
from tests.support.records import episode_record
from tests.workers.memory.test_embedding import WordHashEmbedder

# Two near-duplicate pairs of TradingBot tasks (120/146, 124/127) and three file-system
# tasks.
TASKS = [f"multi_turn_base_{n}" for n in (0, 1, 2, 120, 124, 127, 146)]
SYSTEM = "You are an expert in composing functions."

ANSWER = """\
```markdown
# Memory Item 1
## Title Check the state before acting
## Description Use when a request depends on the current directory or an order's state.
## Content Read the state first (list the directory, fetch the order), then act on it.

# Memory Item 2
## Title Finish every part of the request
## Description Use for requests with several sub-goals; not for single lookups.
## Content Make one call per sub-goal in the order asked, and confirm each result.
```"""


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """The oracle teacher's episodes of TASKS (real environments, checker-scored)."""
    tasks, episodes = play_oracle(TASKS, tmp_path_factory.mktemp("episodes"), "rb")
    assert all(e.success for e in episodes)
    # The tests below name episodes by index in task-id (string) order.
    return tasks, sorted(episodes, key=lambda e: e.task_id)


def _failed(episode):
    """The same trajectory as the checker would reject it, cut before its last call."""
    return dataclasses.replace(
        episode,
        success=False,
        error_type="multi_turn:instance_state_mismatch",
        error_message="Model instance for GorillaFileSystem does not match the state",
        episode_id=f"{episode.episode_id}-failed",
        steps=episode.steps[:-1],
    )


class ScriptedLLM:
    """A builder model answering from a script (by the prompt's verdict), recording
    every conversation it was sent."""

    def __init__(self, answers):
        self.answers = answers  # callable(messages) -> str
        self.sent = []

    async def chat(self, messages, **kwargs):
        self.sent.append((list(messages), kwargs))
        return ChatResult(text=self.answers(messages), usage=Usage(100, 40))


# -- registration, settings, planning -------------------------------------------------


def test_registered_with_the_originals_defaults_and_one_build_for_both_settings():
    assert "reasoning_bank" in known_methods()
    method = memory_method("reasoning_bank")
    assert isinstance(method, MemoryMethod) and method.store_prefix == "reasoningbank"
    settings = method.settings({"k_wf": 3, "threshold_wf": 0.4}, {}, None)  # AMD's: ignored
    assert (settings.top_k, settings.threshold) == (1, None)  # the original's n=1, no floor
    with pytest.raises(ValidationError, match="types"):
        method.settings({}, {}, ["wf"])  # it has no memory types
    with pytest.raises(ValidationError, match="top_k"):
        method.settings({}, {"top_k": 0}, None)

    overrides = [
        "benchmark.limit=3",
        "protocol=self_excluded",
        "methods=[zero_shot,reasoning_bank,reasoning_bank_amd_appworld]",
    ]
    cfg = to_config(compose(rewrite_role_overrides(overrides)))
    assert cfg.retrieval_for("reasoning_bank").top_k == 1
    assert cfg.retrieval_for("reasoning_bank_amd_appworld").top_k == 3  # AMD's AppWorld
    graph = plan_sweep([cfg])
    kinds = sorted(s.kind for s in graph.stages.values())
    # One collection, ONE bank for both read settings, three evaluations.
    assert kinds == ["build", "collect", "evaluate", "evaluate", "evaluate"]
    reads = [s for s in graph.stages.values() if s.identity.get("method") == "reasoning_bank"]
    assert sorted(s.identity["retrieval"]["top_k"] for s in reads) == [1, 3]
    for stage in reads:  # what the student is shown is part of its identity
        assert prompts.MEMORY_PREAMBLE in stage.identity["retrieval"]["texts"]
    # A method added to the project changes no other stage's key.
    assert prompts.MEMORY_PREAMBLE not in builtin_hook_texts()


# -- validation ------------------------------------------------------------------------


def test_answers_are_parsed_into_items_and_bad_ones_named():
    items, problems = build.parse_items(ANSWER)
    assert not problems
    assert items == (
        MemoryItem(
            "Check the state before acting",
            "Use when a request depends on the current directory or an order's state.",
            "Read the state first (list the directory, fetch the order), then act on it.",
        ),
        MemoryItem(
            "Finish every part of the request",
            "Use for requests with several sub-goals; not for single lookups.",
            "Make one call per sub-goal in the order asked, and confirm each result.",
        ),
    )
    # Multi-line fields are joined; a colon after the field name is tolerated.
    (item,) = build.parse_items(
        "# Memory Item 1\n## Title: A\n## Description B\n## Content C\nand D"
    )[0]
    assert item == MemoryItem("A", "B", "C and D")

    def codes(text):
        return [v.code for v in build.parse_items(text)[1]]

    assert codes("Sure! Here are some insights.") == ["no_items"]
    block = "# Memory Item {n}\n## Title T\n## Description D\n## Content C\n"
    assert codes("".join(block.format(n=n) for n in range(1, 5))) == ["too_many"]
    assert codes("# Memory Item 1\n## Title T\n## Description D\n## Content\n") == ["missing_field"]
    assert (
        "lacks content"
        in build.parse_items("# Memory Item 1\n## Title T\n## Description D")[1][0].message
    )


# -- building ---------------------------------------------------------------------------


def test_success_and_failure_get_their_own_instruction_with_one_retry_then_fallback(oracle):
    tasks, episodes = oracle
    success, other = episodes[0], episodes[1]
    failure = _failed(episodes[2])
    unscored = dataclasses.replace(episodes[3], success=None, episode_id="infra")

    def answers(messages):
        prompt = messages[0]["content"]
        first_request = next(t for t in tasks if t.task_id == other.task_id).turns[0]
        if first_request in prompt:  # this trajectory's answers stay invalid
            return "I cannot summarise this."
        if len(messages) == 1 and "FAILED" in prompt:  # first try: too many items
            return "\n".join(
                f"# Memory Item {n}\n## Title T{n}\n## Description D{n}\n## Content C{n}"
                for n in range(1, 5)
            )
        return ANSWER

    llm = ScriptedLLM(answers)
    method = memory_method("reasoning_bank")
    builder = to_config(compose(rewrite_role_overrides([]))).memory.builder
    bank = asyncio.run(
        method.build([success, other, failure, unscored], tasks, builder, llm, "all")
    )
    (success_rec, other_rec, failure_rec) = bank.collections["records"]
    by_task = {t.task_id: t for t in tasks}

    # The verdict picks the instruction; the original's temperature is sent.
    first_prompts = [m[0]["content"] for m, _ in llm.sent if len(m) == 1]
    assert len(first_prompts) == 3  # the unscored episode is never sent
    assert sum(prompts.SUCCESS_PROMPT in p for p in first_prompts) == 2
    (failure_prompt,) = [p for p in first_prompts if prompts.FAILURE_PROMPT in p]
    assert by_task[failure.task_id].turns[0] in failure_prompt
    assert all(kwargs == {"temperature": 1.0} for _, kwargs in llm.sent)
    # The trajectory is shown as reasoning and actions, later user turns where they came.
    calls = [c.call for s in failure.steps for c in s.calls]
    positions = [failure_prompt.index(c) for c in calls]
    assert positions == sorted(positions)
    assert f"[User, turn 2] {by_task[failure.task_id].turns[1]}" in failure_prompt

    # Accepted at once; accepted on the retry that named the violation; fallback.
    assert success_rec.origin == "llm" and len(success_rec.items) == 2
    assert failure_rec.origin == "llm" and failure_rec.outcome == "failure"
    retry = next(m for m, _ in llm.sent if len(m) == 3 and "FAILED" in m[0]["content"])
    assert "4 memory items, at most 3" in retry[2]["content"]
    assert other_rec.origin == "fallback" and len(other_rec.items) == 1
    assert other_rec.items[0].title.startswith("Solved request: ")

    assert bank.stats["rb.requests"] == 1 + 2 + 2
    assert bank.stats["rb.retries"] == 2
    assert bank.stats["rb.accepted"] == 2
    assert bank.stats["rb.fallbacks"] == 1
    assert "rb.deterministic" not in bank.stats
    assert bank.stats["invalid.rb:too_many"] == 1
    assert bank.stats["invalid.rb:no_items"] == 2
    assert bank.stats["skipped.rb:unscored"] == 1
    assert bank.stats["records.success"] == 2 and bank.stats["records.failure"] == 1
    assert bank.stats["rb.tokens_in"] == 500
    for record, episode in [(success_rec, success), (failure_rec, failure)]:
        assert record.source == MemorySource(
            episode.task_id, episode.group_id, "all", "oracle", episode.episode_id
        )
        assert record.key_text == by_task[episode.task_id].turns[0]


def test_a_refused_request_falls_back_at_once(oracle):
    tasks, episodes = oracle

    class Overflowing:
        async def chat(self, messages, **kwargs):
            raise ContextOverflow("too long")

    builder = build.ReasoningBankBuilder(Overflowing(), "all")
    (record,) = asyncio.run(builder.build_all(episodes[:1], tasks, 4))
    assert record.origin == "fallback"
    assert builder.stats.as_dict()["invalid.rb:request_context_overflow"] == 1


def test_without_a_builder_model_each_trajectory_gives_one_deterministic_item(oracle):
    tasks, episodes = oracle
    failure = _failed(episodes[0])
    method = memory_method("reasoning_bank")
    builder = to_config(compose(rewrite_role_overrides([]))).memory.builder
    bank = asyncio.run(method.build([*episodes, failure], tasks, builder, None, "all"))
    records = bank.collections["records"]
    assert len(records) == len(TASKS) + 1
    assert bank.stats["rb.deterministic"] == len(TASKS) + 1  # by design, not fallbacks
    assert "rb.fallbacks" not in bank.stats and "rb.requests" not in bank.stats
    for record, episode in zip(records, [*episodes, failure], strict=True):
        (item,) = record.items
        assert record.origin == "deterministic"
        calls = [c.call for s in episode.steps for c in s.calls]
        assert len(calls) <= build.FALLBACK_CALLS  # the executed calls, in order:
        assert "; ".join(" ".join(c.split()) for c in calls) in item.content
    (item,) = records[-1].items
    assert records[-1].outcome == "failure" and item.title.startswith("Failed request: ")
    assert "multi_turn:instance_state_mismatch" in item.content
    assert "does not match the state" in item.content


def test_the_bank_id_is_its_content(oracle):
    tasks, episodes = oracle
    method = memory_method("reasoning_bank")
    bank_id = method.bank_id(episodes, None, "none", "all")
    assert bank_id == method.bank_id(list(reversed(episodes)), None, "none", "all")
    assert bank_id != method.bank_id(episodes, None, "gpt-5-mini", "all")  # who writes
    assert bank_id != method.bank_id(episodes, None, "none", "memory")
    # Failures are memory too: a verdict or a failed episode more is another bank.
    flipped = [dataclasses.replace(episodes[0], success=False), *episodes[1:]]
    assert bank_id != method.bank_id(flipped, None, "none", "all")
    assert bank_id != method.bank_id([*episodes, _failed(episodes[0])], None, "none", "all")
    unscored = dataclasses.replace(episodes[0], success=None, episode_id="x")
    assert bank_id == method.bank_id([*episodes, unscored], None, "none", "all")


# -- retrieval and injection ---------------------------------------------------------------


def _search(tmp_path, bank_id, bank, protocol):
    service = stored_bank(tmp_path / "q", bank_id, bank, WordHashEmbedder())
    return service, open_search(service, bank_id, protocol, "reasoning_bank"), Isolation(protocol)


_inject = functools.partial(inject_once, system=SYSTEM)


def test_the_items_of_the_nearest_other_tasks_join_the_system_prompt(oracle, tmp_path):
    tasks, episodes = oracle
    method = memory_method("reasoning_bank")
    builder = to_config(compose(rewrite_role_overrides([]))).memory.builder
    failure = _failed(episodes[3])
    scored = [*episodes, failure]
    bank = asyncio.run(method.build(scored, tasks, builder, None, "all"))
    bank_id = method.bank_id(scored, None, "none", "all")
    by_id = {r.memory_id: r for r in bank.collections["records"]}
    service, search, isolation = _search(tmp_path, bank_id, bank, "self_excluded")
    logs = []
    try:
        for task in tasks:
            prompt, log = _inject(method, task, search, isolation)
            (hit,) = log["retrievals"]  # the original's top-1
            assert hit["source_task_id"] != task.task_id and hit["allowed"]
            assert log["isolation_checked"] == 1 and log["isolation_violations"] == 0
            # After the benchmark's system prompt, as the original appends it.
            assert prompt.startswith(f"{SYSTEM}\n\n{prompts.MEMORY_PREAMBLE}\n\n")
            (item,) = by_id[hit["memory_id"]].items
            assert prompt.endswith(
                f"# Memory Item 1\n## Title {item.title}\n## Description "
                f"{item.description}\n## Content {item.content}"
            )
            logs.append(log)
            # The AMD authors' AppWorld setting: the top 3 records, items numbered on.
            prompt3, log3 = _inject(method, task, search, isolation, top_k=3)
            assert len(log3["retrievals"]) == 3 and log3["injected_records"] == 3
            assert {h["source_task_id"] for h in log3["retrievals"]}.isdisjoint({task.task_id})
            assert "# Memory Item 3\n" in prompt3 and "# Memory Item 4\n" not in prompt3
            scores = [h["score"] for h in log3["retrievals"]]
            assert scores == sorted(scores, reverse=True)  # ranked by query similarity
            assert log3["retrievals"][0] == hit
        trading = {f"multi_turn_base_{n}" for n in (120, 124, 127, 146)}
        found = [
            log["retrievals"][0]["source_task_id"] in trading
            for t, log in zip(tasks, logs, strict=True)
            if t.task_id in trading
        ]
        # Task similarity with the test's bag-of-words embedder (cruder than a real
        # one): 120 and 127 find 124, the other TradingBot tasks a file-system one.
        assert sum(found) >= 2, logs

        # Under `main` a task's own record is its nearest: self_excluded kept it out.
        own_search = open_search(service, bank_id, "main", "x")
        _, own = _inject(method, tasks[4], own_search, Isolation("main"))
        assert own["retrievals"][0]["source_task_id"] == tasks[4].task_id
    finally:
        service.close()

    stored = [
        episode_record(t.task_id, extra_json=json.dumps(r))
        for t, r in zip(tasks, logs, strict=True)
    ]
    metrics = method.metrics(stored)
    assert metrics["isolation_violations"] == 0 and metrics["isolation_checked"] == len(tasks)
    assert metrics["injected_records"] == len(tasks) == metrics["injected_items"]


def test_a_hit_the_protocol_forbids_is_counted_and_never_shown(oracle):
    tasks, episodes = oracle
    method = memory_method("reasoning_bank")
    builder = to_config(compose(rewrite_role_overrides([]))).memory.builder
    bank = asyncio.run(method.build(episodes, tasks, builder, None, "all"))
    task = tasks[0]
    own = next(r for r in bank.collections["records"] if r.source.task_id == task.task_id)
    prompt, log = _inject(method, task, LeakySearch(own), Isolation("self_excluded"))
    assert prompt == SYSTEM
    assert log["isolation_violations"] == 1 and log["injected_records"] == 0
    assert log["retrievals"][0]["allowed"] is False
