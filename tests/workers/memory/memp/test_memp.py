"""MemP on real BFCL V3 tasks: registered with the original's defaults, its bank stored
and searched through the generic memory service, the nearest OTHER tasks' procedures
injected into the first user message under `self_excluded` (query variant) or found by
the student's keywords averaged (keyword variant), and every hit audited."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from pydantic import ValidationError

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import to_config
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.llm.types import ChatResult, RequestRejected, Usage
from distillery.workers.memory.memp import prompts
from distillery.workers.memory.memp.records import KEYWORD_COLLECTION, QUERY_COLLECTION
from distillery.workers.memory.memp.settings import QUERY_THRESHOLD
from distillery.workers.memory.method import MemoryMethod
from distillery.workers.memory.registry import builtin_hook_texts, known_methods, memory_method
from distillery.workers.memory.retrieval import Hit, Isolation
from tests.support.records import episode_record
from tests.workers.memory.memp.conftest import open_search
from tests.workers.memory.test_embedding import WordHashEmbedder

SYSTEM = "You are an expert in composing functions."


def test_registered_with_the_originals_defaults_and_planned():
    assert "memp" in known_methods()
    method = memory_method("memp")
    assert isinstance(method, MemoryMethod) and method.store_prefix == "memp"
    s = method.settings({"k_wf": 3}, {}, None)  # AMD's shared defaults: ignored
    assert (s.retrieve, s.k, s.threshold) == ("query", 10, QUERY_THRESHOLD)
    assert (s.content, s.placement) == ("both", "user")
    kw = method.settings({}, {"retrieve": "keywords"}, None)
    assert (kw.k, kw.threshold) == (10, None)  # AveFact has no floor
    assert method.settings({}, {"threshold": None}, None).threshold is None
    with pytest.raises(ValidationError, match="types"):
        method.settings({}, {}, ["wf"])
    with pytest.raises(ValidationError, match="retrieve"):
        method.settings({}, {"retrieve": "random"}, None)

    # The AppWorld port's entry on BFCL: without its context trim, which only AppWorld
    # has (BFCL refuses it: tests/workers/memory/test_port_context.py).
    overrides = ["benchmark.limit=3", "protocol=self_excluded",
                 "methods=[zero_shot,memp,memp_keywords,memp_amd_appworld,"
                 "memp_amd_toolsandbox]",
                 "method_catalog.memp_amd_appworld.retrieval.context_trim=null",
                 "method_catalog.memp_amd_appworld.retrieval.context_buffer=null"]  # fmt: skip
    graph = plan_sweep([to_config(compose(rewrite_role_overrides(overrides)))])
    kinds = sorted(s.kind for s in graph.stages.values())
    # One teacher collection, ONE MemP bank for its two read variants and one bank of
    # the AMD authors' ports (failures kept), which both ports read: the AppWorld port
    # with its student's loop hints, so with an evaluation of its own.
    assert kinds == ["build", "build", "collect", *["evaluate"] * 5]
    # (the identity names the kind; the variants differ in their read settings)
    reads = {
        (s.identity.get("method"), (r := s.identity["retrieval"])["retrieve"], r["k"],
         r["content"], r["placement"]): r
        for s in graph.stages.values()
        if s.kind == "evaluate" and s.identity.get("method") in ("memp", "memp_amd")
    }  # fmt: skip
    assert sorted(reads) == [
        ("memp", "keywords", 10, "both", "user"),
        ("memp", "query", 10, "both", "user"),
        ("memp_amd", "keywords", 3, "script", "system"),  # the AMD authors' student
    ]
    assert all(prompts.MEMORY_HEADER in r["texts"] for r in reads.values())  # identity
    assert prompts.OUTCOME_LABEL in reads[("memp_amd", "keywords", 3, "script", "system")]["texts"]
    assert prompts.MEMORY_HEADER not in builtin_hook_texts()  # no other stage key moves
    port = memory_method("memp_amd")
    assert (
        port.store_prefix == "memp_amd" and port.build_fingerprint() != method.build_fingerprint()
    )
    assert (
        "empty_retrieval_injects_nothing"
        in port.tags(port.settings({}, {}, None), "x")["differences"]
    )


def _bank(oracle, service):
    tasks, episodes = oracle
    method = memory_method("memp")
    bank = asyncio.run(
        method.build(episodes, tasks, type("B", (), {"concurrency": 2})(), None, "all")
    )
    bank_id = method.bank_id(episodes, None, "none", "all")
    service.write_bank(bank_id, bank)
    assert service.has_bank(bank_id) and service.bank_counts(bank_id) == bank.counts()
    return method, bank, bank_id


def _episode(method, task, search, protocol, ask_model=None, **settings):
    """(first user message, system prompt, later turns' messages, hooks) as the loop
    would show them."""
    s = method.settings({}, settings, None)
    isolation = Isolation(protocol)
    hooks = method.hooks(
        task, search, s, lambda src: isolation.allows(src, task.task_id), ask_model
    )

    async def play():
        system = await hooks.before_turn(0, task.turns[0], SYSTEM)
        first = await hooks.user_message(0, task.turns[0])
        later = [
            (await hooks.before_turn(i, t, SYSTEM), await hooks.user_message(i, t))
            for i, t in enumerate(task.turns[1:], 1)
        ]
        return first, system, later

    first, system, later = asyncio.run(play())
    return first, system, later, hooks


def test_query_variant_injects_other_tasks_procedures_into_the_first_message(oracle, service):
    tasks, _ = oracle
    method, bank, bank_id = _bank(oracle, service)
    search = open_search(service, bank_id, "self_excluded")
    by_id = {e.memory_id: e for e in bank.collections[QUERY_COLLECTION]}
    embed = WordHashEmbedder().embed
    records = []
    for task in tasks:
        first, system, later, hooks = _episode(method, task, search, "self_excluded", k=2,
                                               threshold=0.0)  # fmt: skip
        log = hooks.record()
        assert system == SYSTEM  # the original's place is the request, not the system
        assert later == [(SYSTEM, t) for t in task.turns[1:]]  # once, in the first message
        assert first.startswith(task.turns[0] + "\n\n" + prompts.MEMORY_HEADER)
        assert len(log["retrieved"]) == 2 and log["isolation_violations"] == 0
        shown = [by_id[m] for m in log["retrieved"]]
        assert all(e.source.task_id != task.task_id for e in shown)
        for entry in shown:  # script and trajectory ("both"), in rank order
            assert f"{prompts.REQUEST_LABEL} {entry.query}" in first
            assert entry.script in first and entry.trajectory in first
        # Ranked by cosine of the task query to the entries' queries.
        query = embed([task.turns[0]])[0]
        others = sorted(
            (float(query @ embed([e.query])[0]) for e in by_id.values()
             if e.source.task_id != task.task_id),
            reverse=True,
        )  # fmt: skip
        assert log["scores"] == pytest.approx(others[:2], abs=1e-5)
        records.append(episode_record(task.task_id, extra_json=json.dumps(log)))

    metrics = method.metrics(records)
    assert metrics["isolation_violations"] == 0 and metrics["retrievals"] == len(tasks)
    assert metrics["isolation_checked"] == metrics["injected"] == 2 * len(tasks)

    # Under `main` (refused with the oracle teacher) a task's own procedure is its
    # nearest: self_excluded is what kept it out above.
    main = open_search(service, bank_id, "main")
    _, _, _, hooks = _episode(method, tasks[3], main, "main", k=1, threshold=0.0)
    assert by_id[hooks.record()["retrieved"][0]].source.task_id == tasks[3].task_id


def test_the_originals_floor_can_leave_a_task_without_memory(oracle, service):
    tasks, _ = oracle
    method, _, bank_id = _bank(oracle, service)
    search = open_search(service, bank_id, "self_excluded")
    first, system, _, hooks = _episode(method, tasks[0], search, "self_excluded", threshold=0.99)
    assert (first, system) == (tasks[0].turns[0], SYSTEM)
    assert hooks.record()["injected"] == 0


class KeywordModel:
    """The student answering the keyword request."""

    def __init__(self, text: str) -> None:
        self.text, self.asked = text, []

    async def __call__(self, messages):
        self.asked.append(messages)
        return ChatResult(text=self.text, usage=Usage(50, 10))


def test_keyword_variant_averages_the_students_keywords(oracle, service):
    tasks, _ = oracle
    method, bank, bank_id = _bank(oracle, service)
    search = open_search(service, bank_id, "self_excluded")
    task = tasks[3]  # 124: buy AAPL, read the order, cancel it
    model = KeywordModel('<think>hm</think>{"keywords": ["order", "stock", "cancel", "buy"]}')
    first, system, _, hooks = _episode(method, task, search, "self_excluded", model,
                                       retrieve="keywords", k=3, content="script")  # fmt: skip
    log = hooks.record()
    assert task.turns[0] in model.asked[0][0]["content"]
    assert log["keywords"] == ["order", "stock", "cancel", "buy"] and not log["keywords_fallback"]
    assert hooks.model_usage() == (1, Usage(50, 10))  # the student's own tokens
    # Each entry's score: the mean cosine of the keywords to its query + keywords.
    embed = WordHashEmbedder().embed
    keywords = embed(log["keywords"])
    expected = {
        e.memory_id: float(np.mean(embed([e.key_text])[0] @ keywords.T))
        for e in bank.collections[KEYWORD_COLLECTION]
        if e.source.task_id != task.task_id
    }
    ranked = sorted(expected, key=lambda m: -expected[m])[:3]
    assert log["retrieved"] == ranked
    assert log["scores"] == pytest.approx([expected[m] for m in ranked], abs=1e-5)
    by_id = {e.memory_id: e for e in bank.collections[QUERY_COLLECTION]}
    assert by_id[ranked[0]].source.task_id == "multi_turn_base_127"  # its near-duplicate
    for memory_id in ranked:  # the script only
        assert by_id[memory_id].script in first
        assert by_id[memory_id].trajectory not in first
    assert prompts.TRAJECTORY_LABEL not in first and system == SYSTEM


@pytest.mark.parametrize(
    "ask_model", [None, KeywordModel("no idea"), KeywordModel('{"keywords": []}'), "refuse"]
)
def test_without_usable_keywords_the_deterministic_ones_are_used(oracle, service, ask_model):
    tasks, _ = oracle
    method, _, bank_id = _bank(oracle, service)
    search = open_search(service, bank_id, "self_excluded")
    if ask_model == "refuse":

        async def ask_model(messages):
            raise RequestRejected("no")

    _, _, _, hooks = _episode(method, tasks[0], search, "self_excluded", ask_model,
                              retrieve="keywords")  # fmt: skip
    log = hooks.record()
    assert log["keywords_fallback"] is True and log["keywords"]
    assert all(w in tasks[0].turns[0].lower() for w in log["keywords"])
    assert log["injected"] > 0


def test_system_placement_and_trajectory_content(oracle, service):
    tasks, _ = oracle
    method, bank, bank_id = _bank(oracle, service)
    search = open_search(service, bank_id, "self_excluded")
    first, system, _, hooks = _episode(method, tasks[1], search, "self_excluded",
                                       placement="system", content="trajectory", k=1,
                                       threshold=0.0)  # fmt: skip
    assert first == tasks[1].turns[0]
    (memory_id,) = hooks.record()["retrieved"]
    entry = next(e for e in bank.collections[QUERY_COLLECTION] if e.memory_id == memory_id)
    assert system.startswith(SYSTEM + "\n\n" + prompts.MEMORY_HEADER)
    assert entry.trajectory in system and entry.script not in system


class _LeakySearch:
    """A broken search that returns the task's own entry (the audit must catch it)."""

    def __init__(self, entry) -> None:
        self.entry = entry

    async def search(self, collection, queries, task_id, k, threshold, group=None, **kw):
        return [[Hit(self.entry, 0.99, collection)]]


def test_a_hit_the_protocol_forbids_is_counted_and_never_shown(oracle, service):
    tasks, _ = oracle
    method, bank, _ = _bank(oracle, service)
    task = tasks[0]
    own = next(e for e in bank.collections[QUERY_COLLECTION] if e.source.task_id == task.task_id)
    first, system, _, hooks = _episode(method, task, _LeakySearch(own), "self_excluded")
    assert (first, system) == (task.turns[0], SYSTEM)
    log = hooks.record()
    assert log["isolation_violations"] == 1 and log["injected"] == 0
    metrics = method.metrics([episode_record(task.task_id, extra_json=json.dumps(log))])
    assert metrics["isolation_violations"] == 1


def test_descriptors_tags_and_report_columns():
    method = memory_method("memp")
    s = method.settings({}, {"retrieve": "keywords", "k": 3}, None)
    assert method.report_columns(s) == {"k_procedure": 3, "repr_procedure": "both"}
    assert method.tags(s, "all-MiniLM-L6-v2")["memp_retrieve"] == "keywords"
    assert "thresholds_embedder" not in method.tags(s, "all-MiniLM-L6-v2")  # no floor
    floor = method.settings({}, {}, None)
    assert "text-embedding-3-small" in method.tags(floor, "all-MiniLM-L6-v2")["thresholds_embedder"]
    assert "thresholds_embedder" not in method.tags(floor, "text-embedding-3-small")
    assert method.descriptors(s)["memp_threshold"] == "null"
    assert method.label(s) == "memp keywords k=3 both"
