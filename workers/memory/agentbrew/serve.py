"""How the student reads the notes (Algorithm 3, Eq. 3): route the task to one skill
scope, rerank that scope's candidates by similarity x quality x frequency penalty with
soft suppression, show the top k in the system prompt; no note: the vanilla student.
The same hooks serve the brew's own plays (Retrieve in Algorithms 1 and 2), where a
re-play also shows what the brew staged for its task (the provisional slot).

Nothing here writes: the notes' statistics are the brew's, frozen (a parallel
evaluation is deterministic). Every episode records the ids of the notes it was shown,
the route, the scores and the isolation audit in its `extra_json`.

Scope routing (§2.5.1), in order: (i) explicit: a scope's name, or a function its notes
were written about, named in the task (its text or the functions it offers); (ii) the
scope description most similar to the task, above `route_min_similarity`; (iii) the
functions the student has called so far, at the start of a later turn (runtime cues:
none exist before the first request). Notes are ranked within the routed scope only,
never over the whole pool.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.envs.base import Task, ToolResult
from distillery.workers.memory.agentbrew.notes import NOTES, SCOPES, Note, Scope, render_block
from distillery.workers.memory.agentbrew.settings import ReadSettings
from distillery.workers.memory.audit import allowed_hits, audit_log
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.isolation import Hit

MAX_SCOPES = 1000  # a catalog is read whole (ours: far above any brew's scopes)


@dataclass(frozen=True)
class Route:
    scope: str | None
    signal: str  # explicit | similarity | actions | none


def _phrase(name: str) -> str:
    return " ".join(name.lower().replace("_", " ").replace("-", " ").split())


def _words(text: str) -> str:
    return " " + " ".join(re.findall(r"[a-z0-9]+", text.lower())) + " "


def route(
    task_text: str,
    offered: Sequence[str],
    scopes: Sequence[tuple[Scope, float]],
    actions: Sequence[str],
    min_similarity: float,
) -> Route:
    """The scope of a task (see the module docstring); `scopes` with each one's cosine to
    the task; `offered`: the functions the task offers; `actions`: those called so far."""
    if not scopes:
        return Route(None, "none")
    text = _words(task_text)
    named = {n.lower() for n in offered}
    explicit = []
    for scope, similarity in scopes:
        name_hit = f" {_phrase(scope.name)} " in text
        tool_hits = sum(1 for t in scope.tools if t.lower() in named or f" {_phrase(t)} " in text)
        if name_hit or tool_hits:
            explicit.append((int(name_hit) + tool_hits, similarity, scope.name))
    if explicit:
        return Route(max(explicit, key=lambda e: (e[0], e[1], _desc(e[2])))[2], "explicit")
    best, similarity = max(scopes, key=lambda pair: (pair[1], _desc(pair[0].name)))
    if similarity > min_similarity:
        return Route(best.name, "similarity")
    called = {a.lower() for a in actions}
    if called:
        by_actions = [
            (sum(1 for t in s.tools if t.lower() in called), sim, s.name) for s, sim in scopes
        ]
        top = max(by_actions, key=lambda e: (e[0], e[1], _desc(e[2])))
        if top[0] > 0:
            return Route(top[2], "actions")
    return Route(None, "none")


def _desc(name: str) -> tuple[int, ...]:
    # Ties go to the alphabetically first name (a key that sorts higher for it).
    return tuple(-ord(c) for c in name)


@dataclass(frozen=True)
class Ranked:
    note: Note
    similarity: float
    quality: float
    penalty: float
    score: float
    dampened: bool


def rerank(hits: Sequence[Hit], settings: ReadSettings) -> list[Ranked]:
    """Eq. 3 with soft suppression: score = sim x rho x phi; a note below `floor` x the
    top score is dampened (x `damping`), not dropped; best first (ties by id). Without
    suppression: sim x rho (the brew-time quality alone)."""
    scored = []
    for hit in hits:
        note: Note = hit.entry
        if hit.score <= settings.min_similarity:
            continue
        quality = note.quality(settings.prior_weight)
        penalty = note.frequency_penalty(settings.frequency_beta) if settings.suppression else 1.0
        scored.append((note, hit.score, quality, penalty, hit.score * quality * penalty))
    top = max((s[4] for s in scored), default=0.0)
    out = []
    for note, similarity, quality, penalty, score in scored:
        dampened = settings.suppression and top > 0 and score < settings.floor * top
        final = score * settings.damping if dampened else score
        out.append(Ranked(note, similarity, quality, penalty, final, dampened))
    return sorted(out, key=lambda r: (-r.score, r.note.memory_id))


def offered_functions(task: Task) -> tuple[str, ...]:
    names = []
    for tool in task.tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(function, dict) and function.get("name"):
            names.append(str(function["name"]))
    for doc in task.function_docs:
        if isinstance(doc, dict) and doc.get("name"):
            names.append(str(doc["name"]))
    return tuple(dict.fromkeys(names))


def _empty_log() -> dict[str, Any]:
    log = audit_log(staged_shown=0, notes_shown=0, vanilla=1, candidates=0, dampened=0, attempt=1)
    log.update(shown=[], route="none", scope=None, route_turn=None, scores=[])
    return log


@dataclass
class NoteHooks:
    """One episode's hooks (see the module docstring)."""

    task: Task
    search: Any  # memory_service.BankSearch
    settings: ReadSettings
    allows: Callable[[MemorySource], bool]
    log: dict[str, Any] = field(default_factory=_empty_log)
    _query: str = ""
    _block: str = ""
    _actions: list[str] = field(default_factory=list)
    _routed: bool = False

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            self._query = user_text
            self.log["attempt"] = self.search.attempt
            await self._read(0)
        elif not self._routed and self._actions:
            await self._read(turn_index)  # (iii): runtime cues, from this turn on
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt

    async def _read(self, turn: int) -> None:
        s = self.settings
        staged = [e for e in self.search.staged if isinstance(e, Note)]
        notes: list[Note] = []
        if self.search.has_bank:
            found = await self._route(turn)
            if found.scope is not None:
                self._routed = True
                self.log.update(route=found.signal, scope=found.scope, route_turn=turn)
                (hits,) = await self.search.search(
                    NOTES, [self._query], self.task.task_id, s.candidates, None, group=found.scope
                )
                kept = allowed_hits(hits, self.allows, self.log, _details)
                staged_ids = {n.memory_id for n in staged}
                ranked = [r for r in rerank(kept, s) if r.note.memory_id not in staged_ids]
                self.log["candidates"] = len(ranked)
                self.log["dampened"] = sum(r.dampened for r in ranked)
                chosen = ranked[: s.k]
                self.log["scores"] = [
                    {"memory_id": r.note.memory_id, "similarity": round(r.similarity, 6),
                     "quality": round(r.quality, 6), "penalty": round(r.penalty, 6),
                     "score": round(r.score, 6), "dampened": r.dampened}
                    for r in chosen
                ]  # fmt: skip
                notes = [r.note for r in chosen]
        shown = [*staged, *notes]  # a re-play's staged note first (Algorithm 2)
        self.log["shown"] = [n.memory_id for n in shown]
        self.log["staged_shown"] = len(staged)
        self.log["notes_shown"] = len(shown)
        self.log["vanilla"] = int(not shown)
        self._block = render_block(shown, s.note_max_chars)

    async def _route(self, turn: int) -> Route:
        (hits,) = await self.search.search(
            SCOPES, [self._query], self.task.task_id, MAX_SCOPES, None
        )
        scopes = [(h.entry, h.score) for h in hits if self.allows(h.entry.source)]
        actions = self._actions if turn > 0 else []
        return route(
            self._query,
            offered_functions(self.task),
            scopes,
            actions,
            self.settings.route_min_similarity,
        )

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        for result in observations:
            if result.function and not result.rejected and result.function not in self._actions:
                self._actions.append(result.function)
        return observations

    def model_usage(self) -> tuple[int, Any]:
        from distillery.workers.llm.types import Usage

        return 0, Usage()  # the hooks never ask the student's model

    def record(self) -> dict[str, Any]:
        return dict(self.log)


def _details(entry: Any) -> dict[str, Any]:
    return {"scope": getattr(entry, "scope", None)}
