"""The curator's candidates (§2.3.3: "lexical and semantic similarity"): a paraphrased
duplicate with few shared words reaches the curator through the stage's embedder even in
a scope of many notes, and is merged; a distinct note is kept; both similarities are in
the event log. The teacher's draft prompt lists the scope's note keys and triggers,
bounded, so it can update a rule by its key."""

from __future__ import annotations

import asyncio
import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from distillery.orchestrator.execution.ordered_stage import Reply
from distillery.workers.memory.agentbrew import prompts
from distillery.workers.memory.agentbrew.leakage import check_truth
from distillery.workers.memory.agentbrew.notes import (
    Catalog,
    Draft,
    Note,
    Scope,
    most_similar,
)
from distillery.workers.memory.agentbrew.program import BrewProgram, StudentProfile
from distillery.workers.memory.entries import MemorySource
from tests.workers.memory.agentbrew.harness import settings

# A toy sentence embedder: words mapped to concepts, so a paraphrase embeds close to its
# original while sharing few words with it (what a sentence embedder does).
CONCEPTS = {
    "fraction": "frac", "fractions": "frac", "ratio": "frac", "ratios": "frac",
    "quotient": "frac", "quotients": "frac",
    "simplify": "reduce", "reduce": "reduce", "cancel": "reduce", "lowest": "reduce",
    "common": "shared", "shared": "shared", "factor": "factor", "factors": "factor",
    "divisor": "factor", "divisors": "factor",
}  # fmt: skip


class ConceptEmbedder:
    dim = 512

    def embed(self, texts: list[str]) -> np.ndarray:
        rows = []
        for text in texts:
            v = np.zeros(self.dim)
            for word in re.findall(r"[a-z]+", text.lower()):
                v[zlib.crc32(str(CONCEPTS.get(word, word)).encode()) % self.dim] += 1
            rows.append(v / (np.linalg.norm(v) or 1))
        return np.array(rows)


SOURCE = MemorySource("t0", None, "memory", "student", "e0")


def _draft(key: str, trigger: str, rule: str, tags=()) -> Draft:
    return Draft(key, "arithmetic", "arithmetic", trigger, rule, ("step one",), tuple(tags),
                 "never", 0.8)  # fmt: skip


# Five notes of one scope (more than the 3 lexical candidates), one of them the rule the
# paraphrase restates.
EXISTING = [
    _draft("simplify-fractions", "a fraction with a common factor in numerator and denominator",
           "Cancel the common factor before multiplying."),
    _draft("carry-digits", "adding long columns of digits", "Write each carry above the column."),
    _draft("units-check", "answers with units of measure", "Convert every quantity to one unit."),
    _draft("percent-base", "a percent of a changed amount", "Apply the percent to the new base."),
    _draft("order-ops", "expressions with brackets and powers", "Evaluate brackets first."),
]  # fmt: skip
PARAPHRASE = _draft("reduce-ratios-first", "ratios whose quotients have a shared divisor",
                    "Reduce to lowest terms first.")  # fmt: skip
DISTINCT = _draft("round-at-end", "rounding money amounts", "Round only the final total.")


@dataclass
class Ctx:
    """The part of a TaskContext the curator uses, its curator a callable."""

    curator: Any
    embedder: Any = field(default_factory=ConceptEmbedder)
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    prompts: list[str] = field(default_factory=list)
    task: Any = None
    plays: list[Any] = field(default_factory=list)

    def __post_init__(self):
        self.task = type("T", (), {"task_id": "t9", "turns": ("x",)})()
        self.plays = [type("P", (), {"attempt": 2})()]

    async def similarities(self, queries, keys):
        return (self.embedder.embed(queries) @ self.embedder.embed(keys).T).tolist()

    async def ask(self, role, messages):
        self.prompts.append(messages[0]["content"])
        return Reply(text=self.curator(messages[0]["content"]))

    def event(self, kind, **data):
        self.events.append((kind, data))

    def source(self, play):
        return SOURCE


def _notes() -> dict[str, Note]:
    return {n.memory_id: n for n in (d.note(SOURCE, True, 1, 1) for d in EXISTING)}


def _curate(draft: Draft, curator, truths=(), **brew) -> tuple[Ctx, Note | None]:
    program = BrewProgram(
        settings(**brew), StudentProfile("org/s"), lambda t: tuple(truths) if t == "t9" else ()
    )
    ctx = Ctx(curator)
    result = {"outcome": "certified", "draft": draft.fields(), "tools": [], "shown": 1,
              "succeeded": 1, "attempt": 2}  # fmt: skip
    scopes = {"arithmetic": Scope("scope:arithmetic", SOURCE, "arithmetic", "arithmetic", ())}
    written, _ = asyncio.run(program._curate(ctx, result, _notes(), scopes))
    return ctx, written


def merging_curator(prompt: str) -> str:
    """A curator model judging meaning: it merges into the shown note closest in
    embedding similarity when that is at least 0.5 (a restated rule), else adds."""
    shown = re.findall(r"embedding similarity ([0-9.]+)\)\n```json\n\{\n  \"note_key\": \"([^\"]+)\"",
                       prompt)  # fmt: skip
    best = max(shown, key=lambda pair: float(pair[0]), default=("0", ""))
    if float(best[0]) >= 0.5:
        note = {"trigger_pattern": "a fraction or ratio with a common factor",
                "corrective_rule": "Cancel the common factor first.",
                "minimal_steps": ["find the common factor", "cancel it"], "tags": ["math"],
                "not_applicable_when": "never"}  # fmt: skip
        return json.dumps({"decision": "merge", "target": best[1], "reason": "same rule",
                           "note": note})  # fmt: skip
    return json.dumps({"decision": "add", "target": "", "reason": "new"})


def test_a_paraphrased_duplicate_reaches_the_curator_and_is_merged():
    ctx, written = _curate(PARAPHRASE, merging_curator)
    (prompt,) = ctx.prompts
    assert "simplify-fractions" in prompt and "embedding similarity" in prompt
    assert written is not None and written.note_key == "simplify-fractions"
    assert written.merges == 1
    ((kind, event),) = [e for e in ctx.events if e[0] == "curated"]
    assert event["decision"] == "merge" and event["target"] == "simplify-fractions"
    found = {c["note_key"]: c for c in event["candidates"]}
    # Lexically it is far (it would not be among the 3 lexical candidates) ...
    assert found["simplify-fractions"]["lexical"] < 0.1
    lexical_only = most_similar(PARAPHRASE, list(_notes().values()), 3)
    assert "simplify-fractions" not in [note.note_key for note, _ in lexical_only]
    # ... semantically it is the nearest.
    assert max(found.values(), key=lambda c: c["semantic"])["note_key"] == "simplify-fractions"


def test_the_semantic_redundancy_gate_merges_when_the_curator_says_add():
    def adds(prompt):
        return json.dumps({"decision": "add", "target": "", "reason": "new"})

    _, written = _curate(PARAPHRASE, adds, semantic_redundancy_threshold=0.5)
    assert written is not None and written.note_key == "simplify-fractions"
    ctx, written = _curate(PARAPHRASE, adds)  # 0.95: not that close
    assert written is not None and written.note_key == "reduce-ratios-first"


def test_a_distinct_note_is_kept():
    ctx, written = _curate(DISTINCT, merging_curator)
    assert written is not None and written.note_key == "round-at-end" and written.merges == 0
    ((_, event),) = [e for e in ctx.events if e[0] == "curated"]
    assert event["decision"] == "add" and len(event["candidates"]) >= 3


def test_the_teachers_prompt_lists_the_scopes_note_keys_and_triggers_bounded():
    scope = Scope("scope:arithmetic", SOURCE, "arithmetic", "sums and ratios", ())
    notes = tuple(d.note(SOURCE, True, 1, 1) for d in EXISTING)
    long = _draft("long-trigger", "x " * 400, "Do it.").note(SOURCE, True, 1, 1)
    text = Catalog({"arithmetic": scope}, (*notes, long), notes_per_scope=4).describe()
    assert text.startswith("- arithmetic: sums and ratios")
    assert prompts.SCOPE_NOTES in text
    listed = re.findall(r"^  - ([a-z-]+): ", text, re.MULTILINE)
    assert listed == sorted(n.note_key for n in (*notes, long))[:4]
    assert prompts.SCOPE_MORE.format(n=2) in text
    assert max(len(line) for line in text.splitlines()) < 200  # triggers cut
    assert "notes in it" not in Catalog({"arithmetic": scope}, notes, 0).describe()


def test_a_merged_note_is_checked_for_the_tasks_answer_again():
    def leaking(prompt):
        merged = json.loads(merging_curator(prompt))
        merged["note"]["corrective_rule"] = "Cancel first; the answer is 2."
        return json.dumps(merged)

    ctx, written = _curate(PARAPHRASE, leaking, truths=("2",))
    assert written is None  # refused: the target note stays as it was
    ((_, event),) = [e for e in ctx.events if e[0] == "curated"]
    assert (event["decision"], event["gate"], event["found"]) == ("reject", "gold", ["2"])
    ctx, written = _curate(PARAPHRASE, leaking, truths=("2",), gold="count")
    assert written is not None and written.merges == 1
    assert any(kind == "gold_found" for kind, _ in ctx.events)
    _, written = _curate(PARAPHRASE, merging_curator, truths=("2",))  # no answer in it
    assert written is not None and written.merges == 1


@pytest.mark.parametrize(
    "text, leaks",
    [
        ("so the answer is 2.", True),
        ("Answer: 2", True),
        ("final answer = $2$", True),
        ("write it as \\boxed{2}", True),
        ("the result is 2", True),
        ("multiply by 2 and add 12", False),  # an ordinary number, not an answer
        ("the answer is 2.5", False),
        ("the answer is 24", False),
    ],
)
def test_a_short_answer_is_caught_where_stated_as_the_final_answer(text, leaks):
    check = check_truth([text], ["2"], 2)
    assert check.leaks is leaks and check.unchecked == 1


def _in_scope(draft: Draft, scope: str) -> Draft:
    from dataclasses import replace as with_fields

    return with_fields(draft, scope=scope, scope_description=scope)


def test_a_paraphrase_filed_under_another_scope_is_merged_against_the_whole_memory():
    """§2.3.3 (i): "compare n against existing entries in M" — not only its scope's."""
    ctx, written = _curate(_in_scope(PARAPHRASE, "ratios"), merging_curator)
    curated = [data for kind, data in ctx.events if kind == "curated"][-1]
    assert curated["decision"] == "merge" and curated["target"] == "simplify-fractions"
    assert written is not None and written.scope == "arithmetic"  # the target keeps its scope
    # The first version compared it with its own scope only: added, a second copy.
    ctx, written = _curate(_in_scope(PARAPHRASE, "ratios"), merging_curator,
                           dedup_against="scope")  # fmt: skip
    curated = [data for kind, data in ctx.events if kind == "curated"][-1]
    assert curated["decision"] == "add" and curated["reason"] == "no note in its scope yet"


def test_an_exact_copy_is_never_added_whatever_its_key_or_scope():
    copy = _in_scope(EXISTING[1], "columns")
    for dedup in ("memory", "scope"):
        copy_with_new_key = Draft(
            "carry-twice", copy.scope, copy.scope_description, copy.trigger_pattern.upper(),
            copy.corrective_rule, copy.minimal_steps, (), "never", 0.8,
        )  # fmt: skip
        ctx, written = _curate(copy_with_new_key, lambda prompt: pytest.fail("asked"),
                               dedup_against=dedup)  # fmt: skip
        curated = [data for kind, data in ctx.events if kind == "curated"][-1]
        assert curated["decision"] == "merge" and curated["gate"] == "duplicate", dedup
        assert curated["target"] == "carry-digits"
        assert written is not None and written.memory_id == "note:carry-digits"
