"""Naive trajectory RAG (`workers/memory/trajectory_rag`) on real BFCL V3 tasks: the
oracle teacher's episodes are built into a bank deterministically (no builder model
is asked, even when one is configured), stored and searched through the generic
memory service, and a task's system prompt receives the nearest OTHER task's whole
trajectory under `self_excluded`, cut to the configured budget and audited."""

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
from distillery.orchestrator.stages.stage import agent_prompt_fingerprint
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.method import MemoryMethod
from distillery.workers.memory.registry import builtin_hook_texts, known_methods, memory_method
from distillery.workers.memory.retrieval import Isolation
from distillery.workers.memory.trajectory_rag.prompts import HEADER, MARKER, render_trajectory
from tests.support.memory_service import LeakySearch, inject_once, open_search, stored_bank
from tests.support.oracle import play_oracle
from tests.support.records import episode_record
from tests.workers.memory.test_embedding import WordHashEmbedder

# Two near-duplicate pairs of TradingBot tasks (120/146 and 124/127 ask for the same
# procedures) and three file-system tasks.
TASKS = [f"multi_turn_base_{n}" for n in (0, 1, 2, 120, 124, 127, 146)]
SYSTEM = "You are an expert in composing functions."


@pytest.fixture(scope="module")
def oracle(tmp_path_factory):
    """The oracle teacher's episodes of TASKS (real environments, checker-scored)."""
    tasks, episodes = play_oracle(TASKS, tmp_path_factory.mktemp("episodes"), "trajrag")
    assert all(e.success for e in episodes)
    # The tests below name episodes by index in task-id (string) order.
    return tasks, sorted(episodes, key=lambda e: e.task_id)


class RefusingLLM:
    """A builder model that must not be asked: the build is deterministic."""

    async def chat(self, messages, **kwargs):
        raise AssertionError("trajectory_rag asked a builder model")


def test_registered_with_its_own_defaults_and_planned():
    assert "trajectory_rag" in known_methods()
    method = memory_method("trajectory_rag")
    assert isinstance(method, MemoryMethod) and method.store_prefix == "trajrag"
    settings = method.settings({"k_wf": 3, "threshold_wf": 0.4}, {}, None)  # AMD's: ignored
    assert (settings.k, settings.threshold) == (1, None)  # top-1, no floor
    assert (settings.max_chars, settings.max_observation_chars) == (6000, 500)
    with pytest.raises(ValidationError, match="types"):
        method.settings({}, {}, ["wf"])  # it has no memory types
    with pytest.raises(ValidationError, match="k"):
        method.settings({}, {"k": 0}, None)

    overrides = [
        "benchmark.limit=3",
        "protocol=self_excluded",
        "methods=[zero_shot,trajectory_rag]",
    ]
    graph = plan_sweep([to_config(compose(rewrite_role_overrides(overrides)))])
    assert sorted(k.kind for k in graph.stages) == ["build", "collect", "evaluate", "evaluate"]
    (evaluate,) = [s for s in graph.stages.values() if s.identity.get("method") == "trajectory_rag"]
    assert evaluate.identity["retrieval"]["k"] == 1
    assert HEADER in evaluate.identity["retrieval"]["texts"]  # what it shows is identity
    # A method added to the project changes no other stage's key: its texts are not
    # among those every episode stage hashes.
    assert HEADER not in builtin_hook_texts()
    assert agent_prompt_fingerprint("bfcl_multi_turn_base")


def test_build_keeps_every_successful_trajectory_whole_and_asks_no_model(oracle):
    tasks, episodes = oracle
    method = memory_method("trajectory_rag")
    failed = dataclasses.replace(episodes[0], success=False, episode_id="failed-0")
    bank = asyncio.run(method.build([*episodes, failed], tasks, None, RefusingLLM(), "all"))
    entries = bank.collections["traj"]
    assert bank.counts() == {"traj": len(TASKS)}
    assert bank.stats["traj.deterministic"] == len(TASKS)  # counted, not a fallback
    assert bank.stats["skipped.traj:unsuccessful"] == 1
    assert "traj.fallbacks" not in bank.stats
    by_task = {t.task_id: t for t in tasks}
    for entry, episode in zip(entries, episodes, strict=True):
        assert entry.source == MemorySource(
            episode.task_id, episode.group_id, "all", "oracle", episode.episode_id
        )
        assert entry.key_text == by_task[episode.task_id].turns[0]
        assert entry.turns == tuple(by_task[episode.task_id].turns)
        executed = [(s.turn, c.call, c.content) for s in episode.steps for c in s.calls]
        assert [(s.turn, s.call, s.observation) for s in entry.steps] == executed

    # The bank's identity is its content: not the writer, not the episodes' order.
    bank_id = method.bank_id(episodes, None, "none", "all")
    assert bank_id == method.bank_id(list(reversed(episodes)), None, "gpt-5-mini", "all")
    assert bank_id == method.bank_id([*episodes, failed], None, "none", "all")
    assert bank_id != method.bank_id(episodes, None, "none", "memory")
    changed = dataclasses.replace(episodes[1], steps=episodes[1].steps[:-1])
    assert bank_id != method.bank_id([episodes[0], changed, *episodes[2:]], None, "none", "all")


def _search(tmp_path, bank_id, bank, protocol):
    service = stored_bank(tmp_path / "q", bank_id, bank, WordHashEmbedder())
    return service, open_search(service, bank_id, protocol, "trajectory_rag"), Isolation(protocol)


_inject = functools.partial(inject_once, system=SYSTEM)


def test_the_nearest_other_trajectory_is_injected_under_self_excluded(oracle, tmp_path):
    tasks, episodes = oracle
    method = memory_method("trajectory_rag")
    bank = asyncio.run(method.build(episodes, tasks, None, None, "all"))
    bank_id = method.bank_id(episodes, None, "none", "all")
    by_task = {e.source.task_id: e for e in bank.collections["traj"]}
    service, search, isolation = _search(tmp_path, bank_id, bank, "self_excluded")
    records = []
    try:
        for task in tasks:
            prompt, record = _inject(method, task, search, isolation)
            (hit,) = record["retrievals"]  # top-1
            assert hit["source_task_id"] != task.task_id and hit["allowed"]
            assert record["isolation_checked"] == 1 and record["isolation_violations"] == 0
            assert prompt.startswith(MARKER) and prompt.endswith(f"\n\n{SYSTEM}")
            shown = by_task[hit["source_task_id"]]
            # The whole trajectory: every request and every executed call, in order.
            positions = [prompt.index(f"call: {s.call}") for s in shown.steps]
            assert positions == sorted(positions)
            for turn in shown.turns:
                assert " ".join(turn.split()) in prompt
            records.append(record)
        # Task similarity: each injected trajectory is the other task whose first
        # request is nearest to the task's own (cosine of the same embedder).
        embed = WordHashEmbedder().embed
        keys = {e.source.task_id: embed([e.key_text])[0] for e in bank.collections["traj"]}
        for task, record in zip(tasks, records, strict=True):
            query = embed([task.turns[0]])[0]
            others = {t: float(query @ v) for t, v in keys.items() if t != task.task_id}
            best = max(others.values())
            assert others[record["retrievals"][0]["source_task_id"]] == pytest.approx(best)

        # Under `main` (what the oracle teacher is refused) a task's own trajectory is
        # its nearest one: self_excluded above is what kept it out.
        own_search = open_search(service, bank_id, "main", "x")
        _, own = _inject(method, tasks[4], own_search, Isolation("main"))
        assert own["retrievals"][0]["source_task_id"] == tasks[4].task_id
    finally:
        service.close()

    stored = [
        episode_record(t.task_id, extra_json=json.dumps(r))
        for t, r in zip(tasks, records, strict=True)
    ]
    metrics = method.metrics(stored)
    assert metrics["isolation_violations"] == 0 and metrics["isolation_checked"] == len(tasks)
    assert metrics["injected"] == len(tasks) and metrics["truncated"] == 0
    assert metrics["injected_chars_mean"] > 0


def test_the_budget_cuts_whole_lines_and_says_so(oracle):
    tasks, episodes = oracle
    entries = asyncio.run(
        memory_method("trajectory_rag").build(episodes, tasks, None, None, "all")
    ).collections["traj"]
    entry = max(entries, key=lambda e: len(e.steps))
    whole, cut = render_trajectory(entry, 1, 0.9, 100_000, 4000)
    assert not cut and whole.count("call: ") == len(entry.steps)
    short, cut = render_trajectory(entry, 1, 0.9, 600, 4000)
    assert cut and len(short) <= 600 + 80  # the budget plus the cut line
    shown = short.count("call: ")
    assert short.endswith(f"[trajectory cut here: {shown} of {len(entry.steps)} calls shown]")
    assert set(short.splitlines()[:-1]) <= set(whole.splitlines())  # lines whole
    long_obs = max((s for e in entries for s in e.steps), key=lambda s: len(s.observation))
    assert len(long_obs.observation) > 30
    tiny, _ = render_trajectory(entry, 1, 0.9, 100_000, 20)
    for line in tiny.splitlines():
        if line.startswith(("  result: ", "  error: ")):
            assert len(line.split(": ", 1)[1]) <= 20 + 2


def test_a_hit_the_protocol_forbids_is_counted_and_never_shown(oracle):
    tasks, episodes = oracle
    method = memory_method("trajectory_rag")
    bank = asyncio.run(method.build(episodes, tasks, None, None, "all"))
    task = tasks[0]
    own = next(e for e in bank.collections["traj"] if e.source.task_id == task.task_id)
    isolation = Isolation("self_excluded")
    prompt, record = _inject(method, task, LeakySearch(own), isolation)
    assert prompt == SYSTEM
    assert record["isolation_violations"] == 1 and record["injected"] == 0
    assert record["retrievals"][0]["allowed"] is False
