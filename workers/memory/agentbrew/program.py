"""The brew (Algorithms 1 and 2, the curator of §2.3.3): the program of the `brew` stage
kind, run by the outcome-driven stage framework (`orchestrator/execution/ordered_stage.py`) on
each task of the memory split, in order.

`play_task` (Algorithm 1 and the Ralph loop of Algorithm 2): the student plays the task
reading the notes brewed so far; a success ends the task without the teacher. A failure
asks the teacher (student-aware, §2.4.2) for one note from the task, the student's
trajectory and the environment's report (never a reference solution); the note is
staged provisionally (only this task's re-plays read it) and the task re-played, up to
R_max times, the teacher revising the note from the latest failure between re-plays. A
recovery certifies it (Eq. 2). A note never certified is rolled back, or handed to the
curator uncertified (`unvalidated: curate`, a "direct write" when it passes). A note
holding the task's ground truth is refused (`gold: refuse`) or counted.

`commit_task` (the curator, in task order): quality gate, then deduplication against the
memory's notes (`dedup_against`; an exact copy merged at once; otherwise lexical and
semantic candidates, the curator model's verdict: add, merge
into an existing note_key, reject), the redundancy gate, and an append-only write:
nothing is ever deleted; a merge updates a note in place. Every brew task's first play
also updates the statistics of the notes it was shown (their quality and frequency).

Every decision is an event of the stage's log (`ctx.event`): drafted, revised,
validated, not_certified, teacher_invalid, gold_refused, curated (with its decision,
gate and reason), so a researcher reads why each note was written, certified or not.
The program decides only from what its context returns: a killed brew resumes to the
same memory and event log.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from distillery.workers.memory.agentbrew import prompts
from distillery.workers.memory.agentbrew.leakage import SameAnswer, check_truth
from distillery.workers.memory.agentbrew.notes import (
    NOTES,
    SCOPES,
    Candidate,
    Catalog,
    Draft,
    Note,
    Scope,
    curator_candidates,
    json_object,
    parse_draft,
    slug,
)
from distillery.workers.memory.agentbrew.settings import AgentBrewSettings
from distillery.workers.memory.agentbrew.trajectory import (
    called_functions,
    render_attempt,
    render_report,
    task_text,
)
from distillery.workers.memory.building import Violation

Truths = Callable[[str], tuple[str, ...]]  # task id -> its ground-truth texts


@dataclass(frozen=True)
class StudentProfile:
    """Who the teacher writes for (student-aware prompting): the brew student's served
    model id and size, from its model config, and its known weaknesses."""

    model: str
    params_b: float | None = None
    weaknesses: str | None = None

    def size(self) -> str:
        return f", a model of {self.params_b:g} billion parameters" if self.params_b else ""


class BrewProgram:
    """The brew stage's `TaskProgram` (see the module docstring)."""

    def __init__(
        self,
        settings: AgentBrewSettings,
        student: StudentProfile,
        truths: Truths,
        same: SameAnswer | None = None,
    ):
        self.settings = settings
        self.brew = settings.brew
        self.student = student
        self.truths = truths
        self.same = same  # the benchmark's equivalence of two final answers

    def texts(self) -> tuple[str, ...]:
        return prompts.TEXTS

    # -- Algorithm 1 and 2 ------------------------------------------------------------

    async def play_task(self, ctx: Any) -> Any:
        play = await ctx.play()
        if play.success:
            return None
        brew = self.brew
        catalog = Catalog(
            {s.name: s for s in ctx.committed(SCOPES)},
            tuple(ctx.committed(NOTES)),
            brew.prompt_notes_per_scope,
        )
        draft = await self._teacher(ctx, self._draft_prompt(ctx, play, catalog), catalog)
        if draft is None:
            ctx.event("teacher_invalid", revision=0)
            return {"outcome": "teacher_invalid"}
        if self._refused(ctx, draft, 0):
            return {"outcome": "gold_refused"}
        ctx.event("drafted", note=draft.fields(), after_attempt=play.attempt)
        tools = called_functions(play.record)
        shown = succeeded = 0
        for r in range(1, brew.r_max + 1):
            ctx.stage(NOTES, [draft.note(ctx.source(play), False, 0, 0)])
            play = await ctx.play()
            shown, succeeded = 1, int(bool(play.success))
            if play.success:
                ctx.event("validated", note_key=draft.note_key, attempt=play.attempt)
                return self._result("certified", draft, tools, shown, succeeded, play.attempt)
            tools = _union(tools, called_functions(play.record))
            if r == brew.r_max:
                break
            prompt = self._revise_prompt(ctx, play, draft, catalog)
            revised = await self._teacher(ctx, prompt, catalog)
            if revised is None:  # the last valid note stands, uncertified
                ctx.event("teacher_invalid", revision=r)
                break
            if self._refused(ctx, revised, r):
                ctx.rollback()
                return {"outcome": "gold_refused"}
            draft = revised
            ctx.event("revised", note=draft.fields(), after_attempt=play.attempt)
        if brew.r_max:
            ctx.rollback()  # RollbackProvisional: the slot is emptied either way
        ctx.event("not_certified", note_key=draft.note_key, policy=brew.unvalidated)
        if brew.unvalidated == "rollback":
            return {"outcome": "rolled_back"}
        return self._result("uncertified", draft, tools, shown, succeeded, play.attempt)

    @staticmethod
    def _result(
        outcome: str, draft: Draft, tools: tuple[str, ...], shown: int, succeeded: int, attempt: int
    ) -> dict[str, Any]:
        return {
            "outcome": outcome,
            "draft": draft.fields(),
            "tools": list(tools),
            "shown": shown,
            "succeeded": succeeded,
            "attempt": attempt,
        }

    def _refused(self, ctx: Any, draft: Draft, revision: int) -> bool:
        """The leakage guard: a draft holding its task's ground truth is refused (or,
        `gold: count`, only recorded)."""
        truths = self.truths(ctx.task.task_id)
        check = check_truth(draft.texts(), truths, self.brew.gold_min_chars, self.same)
        if not check.leaks:
            return False
        refuse = self.brew.gold == "refuse"
        ctx.event(
            "gold_refused" if refuse else "gold_found",
            note_key=draft.note_key,
            revision=revision,
            found=list(check.found),
        )
        return refuse

    def _merge_leaks(self, ctx: Any, written: Note, target: Note, event: dict[str, Any]) -> bool:
        """Whether a curator's merged note holds ground truth and is refused (a curator
        rejection, gate `gold`: the target note stays as it was); `gold: count` only
        records it (`gold_found`)."""
        truths = (*self.truths(ctx.task.task_id), *self.truths(target.source.task_id))
        check = check_truth(written.texts(), truths, self.brew.gold_min_chars, self.same)
        if not check.leaks:
            return False
        if self.brew.gold != "refuse":
            ctx.event("gold_found", note_key=written.note_key, revision="merge",
                      found=list(check.found))  # fmt: skip
            return False
        ctx.event("curated", decision="reject", gate="gold", **event, target=target.note_key,
                  reason="the merged note holds a task's ground truth", found=list(check.found))  # fmt: skip
        return True

    # -- the teacher ---------------------------------------------------------------------

    def _context(self, ctx: Any, play: Any) -> str:
        return prompts.CONTEXT.format(
            task=task_text(ctx.task),
            trajectory=render_attempt(play.record, self.brew),
            report=render_report(play.record, self.brew),
        )

    def _who(self) -> dict[str, str]:
        return {
            "student_model": self.student.model,
            "student_size": self.student.size(),
            "weaknesses": self.student.weaknesses or prompts.DEFAULT_WEAKNESSES,
        }

    def _draft_prompt(self, ctx: Any, play: Any, catalog: Catalog) -> str:
        common = {
            "context": self._context(ctx, play),
            "scopes": catalog.describe(),
            "schema": prompts.SCHEMA,
            "rules": prompts.SCHEMA_RULES,
        }
        if self.brew.student_aware:
            return prompts.STUDENT_AWARE_DRAFT.format(**common, **self._who())
        return prompts.PLAIN_DRAFT.format(**common)

    def _revise_prompt(self, ctx: Any, play: Any, draft: Draft, catalog: Catalog) -> str:
        common = {
            "note": json.dumps(draft.fields(), indent=2, ensure_ascii=False),
            "context": self._context(ctx, play),
            "scopes": catalog.describe(),
            "schema": prompts.SCHEMA,
            "rules": prompts.SCHEMA_RULES,
        }
        if self.brew.student_aware:
            return prompts.STUDENT_AWARE_REVISE.format(**common, **self._who())
        return prompts.PLAIN_REVISE.format(**common)

    async def _teacher(self, ctx: Any, prompt: str, catalog: Catalog) -> Draft | None:
        draft, _ = await ask_valid(
            ctx, "teacher", prompt, lambda text: parse_draft(text, catalog.scopes)
        )
        return draft

    # -- the curator (commit, in task order) ----------------------------------------------

    async def commit_task(self, ctx: Any, result: Any) -> None:
        notes = {n.memory_id: n for n in ctx.committed(NOTES)}
        scopes = {s.name: s for s in ctx.committed(SCOPES)}
        changed: dict[str, Note] = {}
        # Downstream usage: the notes this task's first play was shown, and its outcome.
        first = ctx.plays[0] if ctx.plays else None
        if first is not None:
            for memory_id in _shown(first.record):
                if memory_id in notes:
                    note = notes[memory_id]
                    notes[memory_id] = changed[memory_id] = replace(
                        note,
                        shown=note.shown + 1,
                        succeeded=note.succeeded + int(bool(first.success)),
                    )
        new_scopes: list[Scope] = []
        if isinstance(result, dict) and result.get("outcome") in ("certified", "uncertified"):
            written, scope = await self._curate(ctx, result, notes, scopes)
            if written is not None:
                changed[written.memory_id] = written
            if scope is not None:
                new_scopes.append(scope)
        if changed:
            ctx.commit(NOTES, [changed[k] for k in sorted(changed)])
        if new_scopes:
            ctx.commit(SCOPES, new_scopes)

    async def _curate(
        self, ctx: Any, result: dict[str, Any], notes: dict[str, Note], scopes: dict[str, Scope]
    ) -> tuple[Note | None, Scope | None]:
        brew, read = self.brew, self.settings.brew.read
        certified = result["outcome"] == "certified"
        draft = Draft(**{**result["draft"], "minimal_steps": tuple(result["draft"]["minimal_steps"]),
                         "tags": tuple(result["draft"]["tags"])})  # fmt: skip
        source = ctx.source(ctx.plays[-1])
        candidate = draft.note(source, certified, result["shown"], result["succeeded"])
        quality = candidate.quality(read.prior_weight)
        event = {"note_key": draft.note_key, "scope": draft.scope, "certified": certified,
                 "quality": round(quality, 6)}  # fmt: skip
        if quality < brew.min_quality:
            ctx.event("curated", decision="reject", gate="quality", **event,
                      reason=f"quality {quality:.3f} < min_quality {brew.min_quality}")  # fmt: skip
            return None, None
        against = sorted(
            (n for n in notes.values() if brew.dedup_against == "memory" or n.scope == draft.scope),
            key=lambda n: n.memory_id,
        )
        none_yet = (
            "no note in memory yet"
            if brew.dedup_against == "memory"
            else "no note in its scope yet"
        )
        decision, target, reason, merged, gate = "add", None, none_yet, None, None
        copy = next((n for n in against if _same_rule(n, candidate)), None)
        if copy is None:  # an exact copy in any scope is never added (see below)
            copy = next((n for n in notes.values() if _same_rule(n, candidate)), None)
        if copy is not None:
            decision, target, reason, gate = (
                "merge",
                copy,
                f"an exact copy of {copy.note_key}",
                "duplicate",
            )
        elif against:
            (cosines,) = await ctx.similarities([candidate.key_text], [n.key_text for n in against])
            similar = curator_candidates(draft, against, cosines, brew.curator_candidates)
            event["candidates"] = [
                {"note_key": c.note.note_key, "lexical": round(c.lexical, 4),
                 "semantic": round(c.semantic, 4)}
                for c in similar
            ]  # fmt: skip
            decision, target, reason, merged = await self._verdict(
                ctx, candidate, similar, certified
            )
            if decision == "add":
                near = _near_duplicate(similar, brew)
                if near is not None:
                    target, reason = near
                    decision, merged, gate = "merge", None, "redundancy"
        if decision == "reject":
            ctx.event("curated", decision="reject", gate="curator", **event, reason=reason)
            return None, None
        if decision == "merge" and target is not None:
            written = _merged(target, candidate, merged, ctx.task.task_id)
            # The leakage guard again on the merged text (the curator wrote it): the
            # ground truth of this task and of the task the target was brewed on.
            if merged is not None and self._merge_leaks(ctx, written, target, event):
                return None, None
            ctx.event("curated", decision="merge", gate=gate, **event, target=target.note_key,
                      reason=reason, note=written.fields())  # fmt: skip
        else:
            written = candidate
            if written.memory_id in notes:  # the key is taken (in another scope): a new key
                key = f"{draft.note_key}-{slug(ctx.task.task_id)}"[:80]
                written = replace(written, memory_id=f"note:{key}", note_key=key)
            ctx.event("curated", decision="add", gate=gate, **event, reason=reason,
                      note=written.fields())  # fmt: skip
        tools = tuple(result.get("tools") or ())
        scope = scopes.get(written.scope)
        if scope is None:
            description = draft.scope_description or written.scope.replace("_", " ")
            scope = Scope(f"scope:{written.scope}", source, written.scope, description, tools)
        elif set(tools) - set(scope.tools):
            scope = replace(scope, tools=_union(scope.tools, tools))
        else:
            scope = None
        return written, scope

    async def _verdict(
        self, ctx: Any, candidate: Note, similar: list[Candidate], certified: bool
    ) -> tuple[str, Note | None, str, Draft | None]:
        """The curator model's decision over the candidate and its most similar notes:
        (decision, target note, reason, merged note); one retry, then a counted,
        deterministic fallback (add, or a merge where a redundancy gate holds)."""
        by_key = {c.note.note_key: c.note for c in similar}
        existing = "\n".join(
            f"{i}. (lexical similarity {c.lexical:.2f}, embedding similarity {c.semantic:.2f})"
            f"\n```json\n{json.dumps(c.note.fields(), indent=2, ensure_ascii=False)}\n```"
            for i, c in enumerate(similar, 1)
        )
        prompt = prompts.CURATOR.format(
            certification=prompts.CERTIFIED if certified else prompts.UNCERTIFIED,
            candidate=json.dumps(candidate.fields(), indent=2, ensure_ascii=False),
            scope=candidate.scope,
            existing=existing,
        )

        def validate(text: str) -> tuple[Any, list[Violation]]:
            data = json_object(text)
            if data is None:
                return None, [Violation("no_json", "no JSON object found in your answer")]
            decision = data.get("decision")
            if decision not in ("add", "merge", "reject"):
                return None, [Violation("decision", 'decision must be "add", "merge" or "reject"')]
            reason = str(data.get("reason") or "")[:500]
            if decision != "merge":
                return (decision, None, reason, None), []
            target = by_key.get(str(data.get("target") or ""))
            if target is None:
                return None, [Violation("target", f"target must be one of {sorted(by_key)}")]
            note = data.get("note")
            if not isinstance(note, dict):
                return None, [Violation("note", 'a merge needs the merged note in "note"')]
            merged, problems = parse_draft(json.dumps(note), (), merge=True, scope=target.scope)
            return ((decision, target, reason, merged), []) if merged else (None, problems)

        verdict, invalid = await ask_valid(ctx, "curator", prompt, validate)
        if verdict is not None:
            return verdict
        ctx.event("curator_invalid", note_key=candidate.note_key, problems=invalid)
        near = _near_duplicate(similar, self.brew)
        if near is not None:
            return "merge", near[0], f"curator answer invalid; {near[1]}", None
        return "add", None, "curator answer invalid; no near duplicate", None


def _same_rule(note: Note, candidate: Note) -> bool:
    """Whether `candidate` says exactly what `note` says (trigger, rule and steps, case
    and spacing aside): a copy, whatever its key or scope."""

    def rule(n: Note) -> tuple[str, ...]:
        return tuple(
            " ".join(t.lower().split())
            for t in (n.trigger_pattern, n.corrective_rule, *n.minimal_steps)
        )

    return rule(note) == rule(candidate)


def _near_duplicate(similar: list[Candidate], brew: Any) -> tuple[Note, str] | None:
    """The redundancy gates: the most lexically similar note at or above
    `redundancy_threshold`, else the most semantically similar at or above
    `semantic_redundancy_threshold` (with why), else None."""
    lexical = max(similar, key=lambda c: c.lexical)
    if lexical.lexical >= brew.redundancy_threshold:
        return (
            lexical.note,
            f"lexical similarity {lexical.lexical:.3f} >= {brew.redundancy_threshold}",
        )
    semantic = max(similar, key=lambda c: c.semantic)
    if semantic.semantic >= brew.semantic_redundancy_threshold:
        limit = brew.semantic_redundancy_threshold
        return semantic.note, f"embedding similarity {semantic.semantic:.3f} >= {limit}"
    return None


def _merged(target: Note, candidate: Note, merged: Draft | None, task_id: str) -> Note:
    """The target note updated in place (same id): the curator's merged text (or its
    own where there is none), both notes' statistics, certified if either is."""
    text = merged if merged is not None else target
    return replace(
        target,
        trigger_pattern=text.trigger_pattern,
        corrective_rule=text.corrective_rule,
        minimal_steps=tuple(text.minimal_steps),
        tags=tuple(text.tags),
        not_applicable_when=text.not_applicable_when,
        quality_score=max(target.quality_score, candidate.quality_score),
        certified=target.certified or candidate.certified,
        shown=target.shown + candidate.shown,
        succeeded=target.succeeded + candidate.succeeded,
        merges=target.merges + 1,
        merged_from=(*target.merged_from, task_id),
    )


async def ask_valid(
    ctx: Any, role: str, prompt: str, validate: Callable[[str], tuple[Any, list[Violation]]]
) -> tuple[Any, list[str]]:
    """`role`'s first valid answer's value (one retry naming the violations), else None
    and the codes of the last violations (the caller counts and skips, never crashes)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
    problems: list[Violation] = []
    for attempt in range(2):
        reply = await ctx.ask(role, messages)
        value, problems = validate(reply.text or "")
        if not problems:
            return value, []
        if attempt == 0:
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text or ""},
                {"role": "user", "content": prompts.RETRY.format(
                    problems="; ".join(p.message for p in problems))},
            ]  # fmt: skip
    return None, [p.code for p in problems]


def _shown(record: Any) -> list[str]:
    try:
        log = json.loads(record.extra_json or "{}")
    except ValueError:
        return []
    shown = log.get("shown") if isinstance(log, dict) else None
    return [str(s) for s in shown] if isinstance(shown, list) else []


def _union(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys([*a, *b]))
