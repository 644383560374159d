"""Building SASM's bank: segment each teacher trajectory into categorised subtasks,
then abstract each subtask into an experience (two builder-LLM requests per segment
kind, as the AMD authors' AppWorld port does: decomposer, then extractor per subtask).

Every answer is validated; an invalid one is retried once naming the violations
(`building.LLMClient`), a second invalid one falls back to a deterministic entry:

- segmentation ("seg"): one subtask per user turn that has steps, its category by a
  fixed rule over the called functions (`rule_category`), its description the turn's
  request;
- experience ("exp"): the segment's concrete calls as bullets (✓ when the trajectory
  succeeded, ✗ with the error for a failed call).

With no builder model (the oracle teacher) both are deterministic by design and
counted as such. Trajectories are taken whatever the checker said (the port builds
from successful and failed ones alike unless `--only-success`; the extractor writes
✗ bullets for failures); unscored episodes (infra failures) are skipped and counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, cast

from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.building import (
    BuilderLLM,
    BuildStats,
    LLMClient,
    Violation,
    gather_ordered,
    strip_fences,
)
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.sasm import prompts
from distillery.workers.memory.sasm.records import (
    CATEGORIES,
    COLLECTIONS,
    STORE_PREFIX,
    SubtaskExperience,
)
from distillery.workers.trajectories import EpisodeRecord

# The port's decomposer asks for 3-7 subtasks per trajectory; 7 is the cap here.
MAX_SEGMENTS = 7
# The port's extractor asks for 3-8 bullets; fewer are accepted (a one-call subtask).
MAX_BULLETS = 8
DESCRIPTION_WORDS = 40  # a fallback description: the request's first words
ASSISTANT_CHARS = 300  # the assistant's own text of a step, shown to the segmenter

_AUTH = re.compile(r"login|log_in|logout|authenticat|auth_|_auth|token", re.IGNORECASE)
_EXPLORE_VERBS = frozenset({"cd", "ls", "pwd", "find", "tree", "locate"})
# Verbs that read (a function's name's first word); generic, no benchmark's names.
_QUERY_VERBS = frozenset(
    {
        "get", "list", "show", "view", "display", "search", "find", "check", "read",
        "cat", "grep", "wc", "du", "diff", "head", "tail", "sort", "retrieve", "lookup",
        "query", "fetch", "count", "compare", "estimate", "calculate", "compute",
    }
)  # fmt: skip


def rule_category(functions: Sequence[str]) -> str:
    """The deterministic category of a segment from the functions it called: a login
    is `authenticate`; only navigation is `explore`; only reads (and pure math) are
    `query`; anything else changes state: `execute`. `verify` needs to know the
    intent, which a rule cannot; it is left to the builder LLM."""
    names = [f for f in functions if f]
    if not names:
        return "explore"
    if any(_AUTH.search(n) for n in names):
        return "authenticate"
    verbs = [n.lower().split("_")[0] for n in names]
    if all(v in _EXPLORE_VERBS for v in verbs):
        return "explore"
    if all(v in _QUERY_VERBS or v in _EXPLORE_VERBS for v in verbs):
        return "query"
    return "execute"


@dataclass(frozen=True)
class Step:
    """One model step of a trajectory, numbered from 1 over the whole episode."""

    number: int
    turn: int
    assistant: str
    calls: tuple[tuple[str, str, str, str | None], ...]  # (function, call, result, error)


@dataclass(frozen=True)
class Segment:
    category: str
    description: str
    first: int  # inclusive, 1-based
    last: int


def steps_of(episode: EpisodeRecord) -> list[Step]:
    """The episode's steps that executed a call or said something, numbered."""
    out: list[Step] = []
    for record in episode.steps:
        calls = tuple(
            (c.function or c.call.split("(")[0].strip(), c.call, c.content, c.error)
            for c in record.calls
            if not c.rejected
        )
        text = (record.assistant_text or "").strip()
        if calls or text:
            out.append(Step(len(out) + 1, record.turn, text, calls))
    return out


def render_steps(steps: Sequence[Step], observation_chars: int) -> str:
    lines: list[str] = []
    for step in steps:
        lines.append(f"[Step {step.number}] (user turn {step.turn + 1})")
        if step.assistant:
            lines.append(f"  Agent says: {_clip(step.assistant, ASSISTANT_CHARS)}")
        for _, call, result, error in step.calls:
            lines.append(f"  Call: {call}")
            shown = f"ERROR {error}" if error else result
            lines.append(f"  Result: {_clip(shown, observation_chars)}")
    return "\n".join(lines)


def render_requests(turns: Sequence[str]) -> str:
    return "\n".join(f"Turn {i + 1}: {t}" for i, t in enumerate(turns))


def _clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_object(text: str) -> tuple[Any, Violation | None]:
    body = strip_fences(text or "")
    match = re.search(r"\{.*\}", body, re.DOTALL)
    if not match:
        return None, Violation("no_json", "no JSON object found")
    try:
        return json.loads(match.group(0)), None
    except json.JSONDecodeError as exc:
        return None, Violation("bad_json", f"invalid JSON ({exc.msg})")


# -- validation ----------------------------------------------------------------------


def parse_segments(
    text: str, n_steps: int, max_segments: int = MAX_SEGMENTS
) -> tuple[list[Segment] | None, list[Violation]]:
    """The segmentation answer: 1..max_segments subtasks, known categories, non-empty
    descriptions, inclusive step ranges in order, without gaps or overlaps, covering
    steps 1..n_steps."""
    value, problem = _json_object(text)
    if problem:
        return None, [problem]
    items = value.get("subtasks") if isinstance(value, dict) else None
    if not isinstance(items, list) or not items:
        return None, [Violation("shape", 'expected {"subtasks": [...]} with at least one item')]
    problems: list[Violation] = []
    if len(items) > max_segments:
        problems.append(
            Violation("too_many", f"{len(items)} subtasks, at most {max_segments} allowed")
        )
    segments: list[Segment] = []
    expected = 1
    for i, item in enumerate(items, 1):
        if not isinstance(item, dict):
            problems.append(Violation("shape", f"subtask {i} is not an object"))
            continue
        z, d = item.get("z"), item.get("d")
        first, last = item.get("start_step"), item.get("end_step")
        if z not in CATEGORIES:
            problems.append(
                Violation("category", f"subtask {i}: z={z!r} is not one of {', '.join(CATEGORIES)}")
            )
        if not isinstance(d, str) or not d.strip():
            problems.append(Violation("description", f"subtask {i}: d must be a non-empty string"))
        if not (_is_int(first) and _is_int(last)):
            problems.append(
                Violation("steps", f"subtask {i}: start_step/end_step must be integers")
            )
            continue
        if first != expected or last < first or last > n_steps:
            problems.append(
                Violation(
                    "steps",
                    f"subtask {i}: steps {first}-{last}; it must start at step {expected} "
                    f"and end at or before step {n_steps}",
                )
            )
        expected = last + 1
        if not problems:
            # No problem: z is one of CATEGORIES and d a non-empty string (checked above).
            segments.append(Segment(cast(str, z), " ".join(cast(str, d).split()), first, last))
    if not problems and expected != n_steps + 1:
        problems.append(
            Violation("coverage", f"the subtasks end at step {expected - 1}, not {n_steps}")
        )
    return (segments, []) if not problems else (None, problems)


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_experience(text: str, succeeded: bool) -> tuple[str | None, list[Violation]]:
    """The extraction answer: {"e": bullets}, 1..MAX_BULLETS lines starting "- ✓" or
    "- ✗" (only ✓ for a successful trajectory)."""
    value, problem = _json_object(text)
    if problem:
        return None, [problem]
    e = value.get("e") if isinstance(value, dict) else None
    if not isinstance(e, str) or not e.strip():
        return None, [
            Violation("shape", 'expected {"e": "<bullet points>"} with a non-empty string')
        ]
    lines = [line.strip() for line in e.strip().splitlines() if line.strip()]
    problems = []
    if len(lines) > MAX_BULLETS:
        problems.append(Violation("too_many", f"{len(lines)} bullets, at most {MAX_BULLETS}"))
    marks = ("- ✓",) if succeeded else ("- ✓", "- ✗")
    bad = [line for line in lines if not line.startswith(marks)]
    if bad:
        wanted = " or ".join(f'"{m} "' for m in marks)
        problems.append(
            Violation("bullet", f"every line must start with {wanted}: {bad[0][:60]!r}")
        )
    return ("\n".join(lines), []) if not problems else (None, problems)


# -- deterministic entries ----------------------------------------------------------


def turn_segments(steps: Sequence[Step], turns: Sequence[str]) -> list[Segment]:
    """One subtask per user turn with steps (the fallback segmentation)."""
    out = []
    for turn in sorted({s.turn for s in steps}):
        mine = [s for s in steps if s.turn == turn]
        functions = [f for s in mine for f, *_ in s.calls]
        request = turns[turn] if turn < len(turns) else f"user turn {turn + 1}"
        words = " ".join(request.split()).split(" ")
        description = " ".join(words[:DESCRIPTION_WORDS])
        out.append(Segment(rule_category(functions), description, mine[0].number, mine[-1].number))
    return out


def steps_experience(steps: Sequence[Step], succeeded: bool) -> str:
    """The segment's calls as bullets (the fallback experience)."""
    lines = []
    for step in steps:
        for _, call, _, error in step.calls:
            if error:
                lines.append(f"- ✗ {call} failed: {_clip(error, 120)}")
            else:
                lines.append(f"- {'✓' if succeeded else '✗'} {call}")
    if not lines:
        lines = [f"- {'✓' if succeeded else '✗'} (no call: the agent answered in text)"]
    return "\n".join(lines)


# -- the builder ---------------------------------------------------------------------


class SasmBuilder:
    """(z, d, e) entries from every scored trajectory, concurrently, in input order."""

    def __init__(
        self,
        llm: BuilderLLM | None,
        *,
        split: str,
        observation_chars: int,
        chat_kwargs: Mapping[str, Any] | None = None,
        stats: BuildStats | None = None,
    ) -> None:
        self.split, self.observation_chars = split, observation_chars
        self.stats = stats if stats is not None else BuildStats()
        retry = prompts.RETRY_PROMPT
        self._segmenter = LLMClient(llm, "seg", self.stats, chat_kwargs, retry_prompt=retry)
        self._extractor = LLMClient(llm, "exp", self.stats, chat_kwargs, retry_prompt=retry)

    async def build(
        self,
        episodes: Sequence[EpisodeRecord],
        turns_by_task: Mapping[str, Sequence[str]],
        concurrency: int,
    ) -> BuiltBank:
        usable = []
        for episode in episodes:
            if episode.success is None:
                self.stats.skipped["seg:unscored"] += 1
            elif not steps_of(episode):
                self.stats.skipped["seg:no_steps"] += 1
            else:
                usable.append(episode)
        per_episode = await gather_ordered(
            usable, lambda ep: self.entries(ep, turns_by_task.get(ep.task_id, ())), concurrency
        )
        entries = [e for group in per_episode for e in group]
        stats = self.stats.as_dict()
        stats["entries"] = len(entries)
        for category in CATEGORIES:
            stats[f"entries.{category}"] = sum(e.category == category for e in entries)
        return BuiltBank(STORE_PREFIX, COLLECTIONS, {COLLECTIONS[0].name: entries}, stats)

    async def entries(
        self, episode: EpisodeRecord, turns: Sequence[str]
    ) -> list[SubtaskExperience]:
        steps = steps_of(episode)
        succeeded = episode.success is True
        segments = await self.segment(steps, turns)
        source = MemorySource(
            episode.task_id, episode.group_id, self.split, episode.agent, episode.episode_id
        )
        bodies = await gather_ordered(
            segments,
            lambda seg: self.experience(seg, steps[seg.first - 1 : seg.last], succeeded),
            1,  # the episodes already run concurrently
        )
        return [
            SubtaskExperience(
                memory_id=f"sasm:{episode.episode_id}:{i}",
                source=source,
                category=seg.category,
                description=seg.description,
                experience=body,
                steps=tuple(c for s in steps[seg.first - 1 : seg.last] for _, c, _, _ in s.calls),
                task_succeeded=succeeded,
                first_step=seg.first,
                last_step=seg.last,
            )
            for i, (seg, body) in enumerate(zip(segments, bodies, strict=True))
        ]

    async def segment(self, steps: Sequence[Step], turns: Sequence[str]) -> list[Segment]:
        prompt = prompts.SEGMENT_PROMPT.format(
            categories=prompts.CATEGORY_GUIDE,
            n_steps=len(steps),
            max_subtasks=MAX_SEGMENTS,
            requests=render_requests(turns),
            trajectory=render_steps(steps, self.observation_chars),
        )
        segments = await self._segmenter.ask(prompt, lambda t: parse_segments(t, len(steps)))
        if segments is None:
            self._segmenter.count_fallback()
            segments = turn_segments(steps, turns)
        return segments

    async def experience(self, segment: Segment, steps: Sequence[Step], succeeded: bool) -> str:
        prompt = prompts.EXTRACT_PROMPT.format(
            category=segment.category,
            description=segment.description,
            outcome="succeeded" if succeeded else "failed",
            segment=render_steps(steps, self.observation_chars),
            polarity=prompts.POLARITY_SUCCESS if succeeded else prompts.POLARITY_FAILURE,
        )
        body = await self._extractor.ask(prompt, lambda t: parse_experience(t, succeeded))
        if body is None:
            self._extractor.count_fallback()
            body = steps_experience(steps, succeeded)
        return body
