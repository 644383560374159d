"""AgentBrew's memory: notes (the paper's §2.3.2 schema) in disjoint skill scopes, and
the scope-description catalog (§2.5.1), with everything that reads or checks a note's
text: the teacher's JSON validated, lexical similarity (the curator's candidates and
redundancy gate) and the block the student is shown. The leakage check against a
task's ground truth is `leakage.py`.

A note's statistics (`shown`, `succeeded`) are brew-time only: the plays of brew tasks
that showed it and how many of them succeeded (its certifying re-play included). They
give its quality rho (Eq. 3, with the teacher's `quality_score` as prior) and its
frequency penalty phi, frozen once the brew ends: serving updates nothing.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.memory.bounds import delimiter_pattern, neutralise
from distillery.workers.memory.building import Violation, strip_fences, strip_reasoning
from distillery.workers.memory.entries import CollectionSpec, MemorySource

NOTES = "notes"
SCOPES = "scopes"
STORE_PREFIX = "agentbrew"
# Where the student's block starts and a note starts in it (prompts.HEADER, NOTE): inert
# in a note's text (bounds.neutralise), so no note can open another.
DELIMITERS = (r"\[AgentBrew notes\]", r"Note \d+ \(")

# ours: bounds of the teacher's fields (far above what the schema asks for; a reply that
# exceeds one is invalid and retried, not cut).
LIMITS = {
    "note_key": 64,
    "scope": 48,
    "scope_description": 300,
    "trigger_pattern": 600,
    "corrective_rule": 1000,
    "step": 300,
    "tag": 40,
    "not_applicable_when": 600,
}
MAX_STEPS = 8
MAX_TAGS = 8
REQUIRED = (
    "note_key",
    "scope",
    "trigger_pattern",
    "corrective_rule",
    "minimal_steps",
    "tags",
    "not_applicable_when",
    "quality_score",
)


@dataclass(frozen=True)
class Note:
    """One note of the memory (`memory_id` = "note:<note_key>")."""

    memory_id: str
    source: MemorySource  # the brew task and play that certified (or first wrote) it
    note_key: str
    scope: str
    trigger_pattern: str
    corrective_rule: str
    minimal_steps: tuple[str, ...]
    tags: tuple[str, ...]
    not_applicable_when: str
    quality_score: float  # the teacher's initial confidence (q0 of rho)
    certified: bool  # recovered the student in a Ralph re-play (else a direct write)
    shown: int = 0  # brew plays that showed it (u)
    succeeded: int = 0  # of those, successes (s)
    merges: int = 0  # curator merges into it
    merged_from: tuple[str, ...] = ()  # the tasks whose candidates were merged into it

    @property
    def key_text(self) -> str:
        # What retrieval embeds: what should activate it (the paper's trigger_pattern)
        # and its skill labels.
        return f"{self.trigger_pattern} {' '.join(self.tags)}".strip()

    def quality(self, prior_weight: float) -> float:
        """rho(n): the teacher's score as a prior of weight w, updated by the brew plays
        that showed the note: (q0 * w + s) / (w + u)."""
        return (self.quality_score * prior_weight + self.succeeded) / (prior_weight + self.shown)

    def frequency_penalty(self, beta: float) -> float:
        """phi(n) = 1 / (1 + beta * ln(1 + u)), u the brew plays that showed it."""
        return 1.0 / (1.0 + beta * math.log1p(self.shown))

    def texts(self) -> tuple[str, ...]:
        return (
            self.trigger_pattern,
            self.corrective_rule,
            *self.minimal_steps,
            *self.tags,
            self.not_applicable_when,
        )

    def fields(self) -> dict[str, Any]:
        """The schema's fields, as the teacher and the curator read a note."""
        return {
            "note_key": self.note_key,
            "scope": self.scope,
            "trigger_pattern": self.trigger_pattern,
            "corrective_rule": self.corrective_rule,
            "minimal_steps": list(self.minimal_steps),
            "tags": list(self.tags),
            "not_applicable_when": self.not_applicable_when,
            "quality_score": self.quality_score,
        }


@dataclass(frozen=True)
class Scope:
    """One skill scope of the catalog (`memory_id` = "scope:<name>"): its description
    (routing signal ii) and the functions the student called in the failures its notes
    were written from (signals i and iii)."""

    memory_id: str
    source: MemorySource  # the brew task whose note opened it
    name: str
    description: str
    tools: tuple[str, ...] = ()

    @property
    def key_text(self) -> str:
        return f"{self.name.replace('_', ' ')}: {self.description}"


COLLECTIONS = (
    CollectionSpec(NOTES, Note, group_field="scope"),
    CollectionSpec(SCOPES, Scope),
)


@dataclass(frozen=True)
class Draft:
    """A note as the teacher (or the curator's merge) wrote it, validated."""

    note_key: str
    scope: str
    scope_description: str
    trigger_pattern: str
    corrective_rule: str
    minimal_steps: tuple[str, ...]
    tags: tuple[str, ...]
    not_applicable_when: str
    quality_score: float
    neutralised: int = 0  # markers made inert in its text (bounds.neutralise)

    def fields(self) -> dict[str, Any]:
        return {
            "note_key": self.note_key,
            "scope": self.scope,
            "scope_description": self.scope_description,
            "trigger_pattern": self.trigger_pattern,
            "corrective_rule": self.corrective_rule,
            "minimal_steps": list(self.minimal_steps),
            "tags": list(self.tags),
            "not_applicable_when": self.not_applicable_when,
            "quality_score": self.quality_score,
        }

    def texts(self) -> tuple[str, ...]:
        return (
            self.trigger_pattern,
            self.corrective_rule,
            *self.minimal_steps,
            *self.tags,
            self.not_applicable_when,
            self.scope_description,
        )

    def note(
        self,
        source: MemorySource,
        certified: bool,
        shown: int,
        succeeded: int,
    ) -> Note:
        return Note(
            memory_id=f"note:{self.note_key}",
            source=source,
            note_key=self.note_key,
            scope=self.scope,
            trigger_pattern=self.trigger_pattern,
            corrective_rule=self.corrective_rule,
            minimal_steps=self.minimal_steps,
            tags=self.tags,
            not_applicable_when=self.not_applicable_when,
            quality_score=self.quality_score,
            certified=certified,
            shown=shown,
            succeeded=succeeded,
        )


# -- reading the teacher's JSON --------------------------------------------------------

_FENCED = re.compile(r"```(?:json)?\s*\n(.*?)\n?\s*```", re.DOTALL | re.IGNORECASE)
_SLUG = re.compile(r"[^a-z0-9]+")


def slug(text: str, sep: str = "-") -> str:
    return _SLUG.sub(sep, text.strip().lower()).strip(sep)


def json_object(text: str) -> dict[str, Any] | None:
    """The last JSON object of a reply: its last fenced block that parses as one, else
    the last balanced {...} that does (reasoning and prose around it are ignored)."""
    text = strip_reasoning(text or "")
    for block in reversed(_FENCED.findall(text)):
        found = _loads(block)
        if found is not None:
            return found
    found = _loads(strip_fences(text))
    if found is not None:
        return found
    ends = [i for i, c in enumerate(text) if c == "}"]
    for end in reversed(ends[-20:]):  # bounded: a reply of megabytes costs little
        depth = 0
        for start in range(end, max(-1, end - 20_000), -1):
            depth += {"}": 1, "{": -1}.get(text[start], 0)
            if depth == 0:
                found = _loads(text[start : end + 1])
                if found is not None:
                    return found
                break
    return None


def _loads(text: str) -> dict[str, Any] | None:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _text(data: Mapping[str, Any], name: str, problems: list[Violation], *, lo: int = 1) -> str:
    value = data.get(name)
    limit = LIMITS[name]
    if not isinstance(value, str):
        problems.append(Violation(f"type:{name}", f"{name} must be a string"))
        return ""
    value = value.strip()
    if len(value) < lo:
        problems.append(Violation(f"empty:{name}", f"{name} must not be empty"))
    elif len(value) > limit:
        problems.append(Violation(f"length:{name}", f"{name} must be at most {limit} characters"))
    return value


def _texts(
    data: Mapping[str, Any], name: str, limit: int, most: int, problems: list[Violation]
) -> tuple[str, ...]:
    value = data.get(name)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        problems.append(Violation(f"type:{name}", f"{name} must be a list of strings"))
        return ()
    items = tuple(v.strip() for v in value if v.strip())
    if not 1 <= len(items) <= most:
        problems.append(Violation(f"count:{name}", f"{name} must hold 1 to {most} items"))
    if any(len(v) > limit for v in items):
        problems.append(
            Violation(f"length:{name}", f"each item of {name} must be at most {limit} characters")
        )
    return items


def parse_draft(
    text: str, scopes: Iterable[str], *, merge: bool = False, scope: str | None = None
) -> tuple[Draft | None, list[Violation]]:
    """A teacher's note (or, `merge`, the curator's merged note, whose key and scope are
    the target's: `scope`), validated against the schema; the violations otherwise."""
    data = json_object(text)
    if data is None:
        return None, [Violation("no_json", "no JSON object found in your answer")]
    if merge:
        data = {**data, "note_key": data.get("note_key") or "merged", "scope": scope}
        data.setdefault("quality_score", 0.5)
        data.setdefault("scope_description", "")
    problems: list[Violation] = []
    missing = [n for n in REQUIRED if n not in data]
    if missing:
        return None, [Violation("missing", f"missing field(s): {', '.join(missing)}")]
    key = slug(_text(data, "note_key", problems))[: LIMITS["note_key"]]
    if not merge and len(key) < 3:
        problems.append(Violation("note_key", "note_key must be a kebab-case id of 3+ characters"))
    scope_name = slug(_text(data, "scope", problems), "_")[: LIMITS["scope"]]
    if len(scope_name) < 2:
        problems.append(Violation("scope", "scope must be a snake_case name of 2+ characters"))
    known = set(scopes)
    described = data.get("scope_description", "")
    description = ""
    if scope_name not in known and not merge:
        description = _text(data, "scope_description", problems, lo=10)
    elif isinstance(described, str):
        description = described.strip()[: LIMITS["scope_description"]]
    trigger = _text(data, "trigger_pattern", problems, lo=10)
    rule = _text(data, "corrective_rule", problems, lo=10)
    steps = _texts(data, "minimal_steps", LIMITS["step"], MAX_STEPS, problems)
    tags = tuple(
        slug(t, "_") for t in _texts(data, "tags", LIMITS["tag"], MAX_TAGS, problems) if slug(t)
    )
    not_when = _text(data, "not_applicable_when", problems, lo=0)
    quality = data.get("quality_score")
    if isinstance(quality, bool) or not isinstance(quality, int | float) or not 0 <= quality <= 1:
        problems.append(Violation("quality_score", "quality_score must be a number from 0 to 1"))
        quality = 0.0
    if problems:
        return None, problems
    pattern = delimiter_pattern(DELIMITERS)
    count = 0

    def inert(value: str) -> str:
        nonlocal count
        out, n = neutralise(value, pattern)
        count += n
        return out

    return (
        Draft(
            note_key=key,
            scope=scope_name,
            scope_description=inert(description),
            trigger_pattern=inert(trigger),
            corrective_rule=inert(rule),
            minimal_steps=tuple(inert(s) for s in steps),
            tags=tags,
            not_applicable_when=inert(not_when),
            quality_score=round(float(quality), 4),
            neutralised=count,
        ),
        [],
    )


# -- similarity ------------------------------------------------------------------------

_SPACE = re.compile(r"\s+")

_WORD = re.compile(r"[a-z0-9]+")
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "for",
        "from",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "that",
        "the",
        "then",
        "this",
        "to",
        "when",
        "with",
        "before",
        "after",
        "each",
        "every",
        "do",
        "not",
    ]
)


def tokens(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in STOPWORDS)


def lexical_similarity(a: Draft | Note, b: Draft | Note) -> float:
    """Token Jaccard of trigger pattern and corrective rule (the curator's lexical side)."""
    left = tokens(f"{a.trigger_pattern} {a.corrective_rule}")
    right = tokens(f"{b.trigger_pattern} {b.corrective_rule}")
    if not left or not right:
        return 0.0
    return len(left & right) / len(left | right)


def most_similar(draft: Draft, notes: Sequence[Note], n: int) -> list[tuple[Note, float]]:
    """The `n` notes most lexically similar to `draft`, best first (ties by key); a note
    whose key the draft reuses comes first whatever its similarity."""
    scored = sorted(
        ((note, lexical_similarity(draft, note)) for note in notes),
        key=lambda pair: (pair[0].note_key != draft.note_key, -pair[1], pair[0].note_key),
    )
    return scored[:n]


@dataclass(frozen=True)
class Candidate:
    """A note of the scope the curator compares a draft with, and why: its lexical
    (token Jaccard) and embedding (cosine under the stage's embedder) similarity."""

    note: Note
    lexical: float
    semantic: float


def curator_candidates(
    draft: Draft, notes: Sequence[Note], semantic: Sequence[float], n: int
) -> list[Candidate]:
    """The notes the curator sees (§2.3.3: "lexical and semantic similarity"): the union
    of the `n` most lexically and the `n` most semantically similar of the scope
    (`semantic[i]` is `notes[i]`'s cosine), a note whose key the draft reuses first, then
    by the larger of the two similarities (ties by key)."""
    lexical = {note.memory_id: sim for note, sim in most_similar(draft, notes, len(notes))}
    cosine = {note.memory_id: float(sim) for note, sim in zip(notes, semantic, strict=True)}
    by_lexical = [note for note, _ in most_similar(draft, notes, n)]
    by_semantic = sorted(notes, key=lambda m: (-cosine[m.memory_id], m.note_key))[:n]
    chosen = {note.memory_id: note for note in (*by_lexical, *by_semantic)}
    out = [Candidate(note, lexical[k], cosine[k]) for k, note in chosen.items()]
    # The key reused first, then the more similar; among equals, the draft's own scope.
    out.sort(key=lambda c: (c.note.note_key != draft.note_key, -max(c.lexical, c.semantic),
                            c.note.scope != draft.scope, c.note.note_key))  # fmt: skip
    return out


# -- what the student is shown -------------------------------------------------------------


def render_note(note: Note, index: int, max_chars: int) -> str:
    from distillery.workers.memory.agentbrew.prompts import NOTE

    steps = "\n".join(f"{i}. {s}" for i, s in enumerate(note.minimal_steps, 1))
    text = NOTE.format(
        index=index,
        key=note.note_key,
        trigger=note.trigger_pattern,
        rule=note.corrective_rule,
        steps=steps,
        not_when=note.not_applicable_when or "-",
    )
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def render_block(notes: Sequence[Note], max_chars: int) -> str:
    from distillery.workers.memory.agentbrew.prompts import HEADER

    if not notes:
        return ""
    return "\n\n".join([HEADER, *(render_note(n, i, max_chars) for i, n in enumerate(notes, 1))])


@dataclass
class Catalog:
    """The scope catalog as a program reads it (name -> scope), with the notes of each
    scope the teacher is shown (their keys and triggers, bounded)."""

    scopes: dict[str, Scope] = field(default_factory=dict)
    notes: tuple[Note, ...] = ()
    notes_per_scope: int = 20
    trigger_chars: int = 160

    def describe(self) -> str:
        from distillery.workers.memory.agentbrew import prompts

        if not self.scopes:
            return prompts.NO_SCOPES
        lines = []
        for scope in self.scopes.values():
            lines.append(f"- {scope.name}: {scope.description}")
            mine = sorted((n for n in self.notes if n.scope == scope.name),
                          key=lambda n: n.note_key)  # fmt: skip
            if not mine or self.notes_per_scope == 0:
                continue
            lines.append(prompts.SCOPE_NOTES)
            for note in mine[: self.notes_per_scope]:
                trigger = _SPACE.sub(" ", note.trigger_pattern).strip()
                if len(trigger) > self.trigger_chars:
                    trigger = trigger[: self.trigger_chars] + " …"
                lines.append(prompts.SCOPE_NOTE.format(key=note.note_key, trigger=trigger))
            if len(mine) > self.notes_per_scope:
                lines.append(prompts.SCOPE_MORE.format(n=len(mine) - self.notes_per_scope))
        return "\n".join(lines)
