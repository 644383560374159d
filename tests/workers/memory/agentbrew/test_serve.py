"""Serving (Algorithm 3): scope routing by its three signals, Eq. 3's arithmetic with
soft suppression and its floor, the vanilla fallback, and what every episode records."""

from __future__ import annotations

import asyncio
import math

import pytest

from distillery.workers.envs.base import Task, ToolResult
from distillery.workers.memory.agentbrew.notes import COLLECTIONS, Note, Scope
from distillery.workers.memory.agentbrew.serve import NoteHooks, rerank, route
from distillery.workers.memory.agentbrew.settings import AgentBrewSettings, ReadSettings
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.isolation import Hit
from distillery.workers.memory.retrieval import BankRetriever, Isolation
from tests.workers.memory.agentbrew.harness import FakeSearch, WordEmbedder

SOURCE = MemorySource("m1", None, "memory", "teacher", "e1")


def _note(key, *, scope="arith", q0=0.5, shown=0, succeeded=0, trigger=None):
    return Note(
        memory_id=f"note:{key}", source=SOURCE, note_key=key, scope=scope,
        trigger_pattern=trigger or f"problems about {key}", corrective_rule=f"Do {key}.",
        minimal_steps=("one",), tags=(key,), not_applicable_when="", quality_score=q0,
        certified=True, shown=shown, succeeded=succeeded,
    )  # fmt: skip


def _scope(name, description="", tools=()):
    return Scope(f"scope:{name}", SOURCE, name, description or f"{name} tasks", tuple(tools))


def test_routing_takes_explicit_names_then_similarity_then_actions():
    files = _scope("file_system", tools=("cd", "ls"))
    tickets = _scope("ticket_api", tools=("create_ticket",))
    scopes = [(files, 0.9), (tickets, 0.1)]
    # (i) a scope's name in the task, or one of its functions offered by the task.
    assert route("Open a ticket api request", (), scopes, (), 0.0).signal == "explicit"
    assert route("Open a ticket api request", (), scopes, (), 0.0).scope == "ticket_api"
    found = route("Please help", ("create_ticket", "close_ticket"), scopes, (), 0.0)
    assert (found.scope, found.signal) == ("ticket_api", "explicit")
    # (ii) the most similar description, above the threshold.
    assert route("Please help", (), scopes, (), 0.0) == route("x", (), scopes, (), 0.5)
    assert route("Please help", (), scopes, (), 0.0).signal == "similarity"
    # inconclusive (ii): (iii) the functions called so far, else no scope at all.
    low = [(files, 0.05), (tickets, 0.02)]
    assert route("Please help", (), low, (), 0.1).signal == "none"
    found = route("Please help", (), low, ("create_ticket",), 0.1)
    assert (found.scope, found.signal) == ("ticket_api", "actions")
    assert route("anything", (), [], ("cd",), 0.0).scope is None


def test_eq3_reranks_by_similarity_quality_and_frequency_with_a_soft_floor():
    a = _note("a", q0=0.5)  # rho = 0.5, phi = 1
    b = _note("b", q0=1.0, shown=10, succeeded=10)  # rho = 1, phi = 1 / (1 + 0.2 ln 11)
    c = _note("c", q0=0.2)  # rho = 0.2
    hits = [Hit(a, 0.8, "notes"), Hit(b, 0.6, "notes"), Hit(c, 0.5, "notes")]
    ranked = rerank(hits, ReadSettings())
    phi_b = 1 / (1 + 0.2 * math.log(11))
    assert [r.note.note_key for r in ranked] == ["b", "a", "c"]
    assert ranked[0].score == pytest.approx(0.6 * 1.0 * phi_b)
    assert ranked[1].score == pytest.approx(0.8 * 0.5)
    # c (0.1) is below half the top score: dampened (x 0.5), not dropped.
    assert ranked[2].dampened and ranked[2].score == pytest.approx(0.5 * 0.2 * 0.5)
    assert not ranked[0].dampened and not ranked[1].dampened
    # Without suppression: similarity x brew-time quality alone, nothing dampened.
    plain = rerank(hits, ReadSettings(suppression=False))
    assert [(r.note.note_key, round(r.score, 6)) for r in plain] == [
        ("b", 0.6), ("a", 0.4), ("c", 0.1)
    ]  # fmt: skip
    # A candidate with no positive similarity is no evidence of relevance.
    assert rerank([Hit(a, 0.0, "notes")], ReadSettings()) == []


def _bank(notes, scopes):
    embedder = WordEmbedder()
    entries = {
        "notes": (notes, embedder.embed([n.key_text for n in notes])),
        "scopes": (scopes, embedder.embed([s.key_text for s in scopes])),
    }
    return BankRetriever.from_entries(embedder, Isolation("main"), COLLECTIONS, entries)


def _task(text, tools=()):
    docs = tuple({"name": t, "description": ""} for t in tools)
    return Task(task_id="x1", benchmark="bfcl", turns=(text, "and then more"), tools=(),
                function_docs=docs)  # fmt: skip


def test_the_student_reads_the_top_k_notes_of_its_scope_or_stays_vanilla():
    notes = [_note(k, trigger=f"fractions problem {k}") for k in ("p", "q", "r", "s")]
    notes.append(_note("t", scope="geometry", trigger="fractions problem t"))
    bank = _bank(notes, [_scope("arith", tools=("add",)), _scope("geometry")])
    hooks = NoteHooks(_task("A fractions problem", tools=("add",)), FakeSearch(bank, 1, ()),
                      AgentBrewSettings(k=2), lambda s: True)  # fmt: skip
    prompt = asyncio.run(hooks.before_turn(0, "A fractions problem", "SYSTEM"))
    log = hooks.record()
    assert log["route"] == "explicit" and log["scope"] == "arith"
    assert len(log["shown"]) == 2 and "note:t" not in log["shown"]  # never another scope
    assert prompt.startswith("[AgentBrew notes]") and prompt.endswith("\n\nSYSTEM")
    assert log["vanilla"] == 0 and log["candidates"] == 4 and len(log["scores"]) == 2
    assert log["isolation_checked"] == 4 and log["isolation_violations"] == 0

    # No bank (nothing brewed): the vanilla student, its prompt untouched, counted.
    empty = NoteHooks(_task("A fractions problem"), FakeSearch(None, 1, ()), AgentBrewSettings(),
                      lambda s: True)  # fmt: skip
    assert asyncio.run(empty.before_turn(0, "A fractions problem", "SYSTEM")) == "SYSTEM"
    assert empty.record()["vanilla"] == 1 and empty.record()["shown"] == []


def test_a_replay_shows_its_staged_note_first_and_later_turns_route_by_actions():
    bank = _bank([_note("p", trigger="zzz"), _note("q", trigger="yyy")],
                 [_scope("arith", "qqq", tools=("add",))])  # fmt: skip
    staged = _note("new", trigger="www")
    # (ii) inconclusive; every candidate kept whatever its similarity.
    settings = AgentBrewSettings(route_min_similarity=0.99, min_similarity=-1.0)
    hooks = NoteHooks(_task("Something unrelated"), FakeSearch(bank, 2, (staged,)), settings,
                      lambda s: True)  # fmt: skip
    first = asyncio.run(hooks.before_turn(0, "Something unrelated", "SYS"))
    assert hooks.record()["shown"] == ["note:new"] and hooks.record()["attempt"] == 2
    assert hooks.record()["route"] == "none" and "Note 1 (new)" in first
    # The student calls `add` in turn 1: from turn 2 on its scope is read.
    asyncio.run(hooks.after_step(0, "", [ToolResult("add(1)", "2", function="add")]))
    later = asyncio.run(hooks.before_turn(1, "and then more", "SYS"))
    log = hooks.record()
    assert log["route"] == "actions" and log["route_turn"] == 1 and log["scope"] == "arith"
    assert log["shown"][0] == "note:new" and len(log["shown"]) == 3
    assert "Note 3 (" in later


def test_the_relative_floor_never_changes_which_notes_are_read_or_their_order():
    """What docs/methods/agentbrew.md says of the floor: it multiplies scores that are
    already below the top by a factor <= 1, so the top-k and their order are those of
    Eq. 3 without it; it changes only the recorded scores (and the `dampened` count).
    The frequency penalty phi is what reorders."""
    import random

    rng = random.Random(7)
    no_floor = ReadSettings(damping=1.0)
    for trial in range(300):
        notes = [_note(f"n{i}", q0=rng.random(), shown=rng.randrange(5), succeeded=0)
                 for i in range(rng.randrange(1, 12))]  # fmt: skip
        hits = [Hit(n, rng.uniform(0.01, 1), "notes") for n in notes]
        settings = ReadSettings(floor=rng.uniform(0.05, 1), damping=rng.uniform(0, 0.99))
        with_floor = [r.note.memory_id for r in rerank(hits, settings)]
        without = [r.note.memory_id for r in rerank(hits, no_floor)]
        assert with_floor == without, trial


def test_with_damping_zero_the_floor_orders_the_dampened_notes_by_id():
    """The one case where the floor changes what is read (docs/methods/agentbrew.md):
    `damping: 0` puts every dampened note at 0, so they tie and go by id; when fewer
    than `k` notes clear the floor, the id decides which dampened notes fill the rest."""
    notes = [_note("top"), _note("b_high"), _note("a_low")]
    hits = [Hit(notes[0], 0.9, "notes"), Hit(notes[1], 0.3, "notes"), Hit(notes[2], 0.2, "notes")]
    without = [r.note.note_key for r in rerank(hits, ReadSettings(damping=1.0))]
    zero = [r.note.note_key for r in rerank(hits, ReadSettings(floor=0.5, damping=0.0))]
    assert without[:2] == ["top", "b_high"] and zero[:2] == ["top", "a_low"]
