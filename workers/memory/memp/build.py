"""Building a MemP bank: one procedure per successful teacher trajectory.

The original's offline build (zjunlp/MemP `Memory._cold_start` with build policy
"direct") asks the builder model once per trajectory for the procedure; here the one
call also returns the query's keywords (the AMD authors' AppWorld build asks for them
in a second call, `generate_memp_memories.py`). The answer is validated; an invalid
one is retried once naming what was wrong (`building.LLMClient`), and a second invalid
one, a refused request or no builder model (the oracle teacher: "none") gives the
deterministic procedure: numbered steps of the executed calls and keywords picked from
the query, counted as `script.fallbacks` or `script.deterministic`.

Only successful trajectories are kept: the original builds from the expert
trajectories of the training set, and its "validation" update keeps only rewarded ones.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any, cast

from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.building import (
    BuildStats,
    LLMClient,
    Violation,
    gather_ordered,
    strip_fences,
)
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.memp import prompts
from distillery.workers.memory.memp.records import (
    COLLECTIONS,
    KEYWORD_COLLECTION,
    QUERY_COLLECTION,
    STORE_PREFIX,
    KeywordProcedure,
    Procedure,
)

KIND = "script"  # the BuildStats kind of this method's entries
# Script length: the AMD authors' proceduralize prompt asks 5-15 steps; a BFCL
# trajectory can be a single call, so one step is accepted.
MIN_STEPS, MAX_STEPS = 1, 15
MAX_SCRIPT_CHARS = 2500
# Keywords: 5-10 in the AMD authors' keyword prompt; fewer are accepted for a short query.
MIN_KEYWORDS, MAX_KEYWORDS = 3, 10
MAX_KEYWORD_CHARS = 60
OBSERVATION_CHARS = 300  # per executed call in the stored trajectory
TRAJECTORY_CHARS = 6000  # the whole stored trajectory (and what the builder is shown)

_STEP = re.compile(r"^\s*(\d+)[.)]\s+\S")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{2,}")
# Words that tell no request apart (for the deterministic keyword extraction).
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "with",
        "from",
        "into",
        "onto",
        "that",
        "this",
        "these",
        "those",
        "then",
        "than",
        "there",
        "their",
        "them",
        "they",
        "you",
        "your",
        "yours",
        "our",
        "ours",
        "his",
        "her",
        "its",
        "are",
        "was",
        "were",
        "been",
        "being",
        "have",
        "has",
        "had",
        "does",
        "did",
        "will",
        "would",
        "could",
        "should",
        "shall",
        "may",
        "might",
        "can",
        "must",
        "not",
        "but",
        "all",
        "any",
        "each",
        "every",
        "some",
        "such",
        "also",
        "just",
        "only",
        "very",
        "more",
        "most",
        "other",
        "same",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "please",
        "want",
        "need",
        "like",
        "make",
        "made",
        "let",
        "get",
        "got",
        "use",
        "using",
        "used",
        "about",
        "after",
        "before",
        "over",
        "under",
        "again",
        "once",
        "here",
        "both",
        "few",
        "nor",
        "own",
        "too",
        "out",
        "off",
        "now",
        "one",
        "two",
        "three",
    ]
)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" ... [{len(text) - limit} cut]"


def render_trajectory(episode: Any) -> str:
    """The executed calls with their observations, one per line, turn by turn (a
    rejected call was never executed: left out)."""
    lines: list[str] = []
    turn = None
    for step in episode.steps:
        for call in step.calls:
            if call.rejected:
                continue
            if step.turn != turn:
                turn = step.turn
                lines.append(f"[turn {turn + 1}]")
            obs = " ".join((call.content or "").split())
            lines.append(f"{call.call} -> {_cut(obs, OBSERVATION_CHARS)}")
    return _cut("\n".join(lines), TRAJECTORY_CHARS)


def fallback_script(episode: Any) -> str:
    """Numbered steps of the executed functions, in order (repeats of the same function
    in a row merged), at most MAX_STEPS."""
    names: list[str] = []
    for step in episode.steps:
        for call in step.calls:
            if call.rejected:
                continue
            name = call.function or call.call.split("(", 1)[0]
            if not names or names[-1] != name:
                names.append(name)
    if len(names) > MAX_STEPS:
        names = [*names[: MAX_STEPS - 1], "the remaining calls of the same pattern"]
    return "\n".join(f"{i}. Call {name}." for i, name in enumerate(names, 1))


def keywords_of(text: str, limit: int = MAX_KEYWORDS) -> tuple[str, ...]:
    """Deterministic keywords of a query: its words of 3+ characters that are no stop
    words, lower-cased, first occurrence order (the AMD authors' fallback,
    `extract_keywords_simple`, keeps words minus stop words as a set; a list keeps
    this deterministic)."""
    out: list[str] = []
    for word in _WORD.findall(text):
        low = word.lower()
        if low not in _STOP and low not in out:
            out.append(low)
    return tuple(out[:limit])


def json_object(text: str) -> Any:
    text = strip_fences(text.strip())
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        if 0 <= start < end:
            try:
                return json.loads(text[start : end + 1])
            except json.JSONDecodeError:
                return None
    return None


def clean_keywords(value: Any) -> tuple[tuple[str, ...], list[Violation]]:
    """Keywords of a model's answer (trimmed, deduplicated) and what is wrong with them."""
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        return (), [Violation("keywords", '"keywords" must be a list of strings')]
    out: list[str] = []
    for word in value:
        word = " ".join(word.split())
        if word and word.lower() not in (o.lower() for o in out):
            out.append(word)
    problems = []
    if not MIN_KEYWORDS <= len(out) <= MAX_KEYWORDS:
        problems.append(
            Violation(
                "keyword_count",
                f"give {MIN_KEYWORDS} to {MAX_KEYWORDS} distinct keywords, not {len(out)}",
            )
        )
    if any(len(k) > MAX_KEYWORD_CHARS for k in out):
        problems.append(
            Violation("keyword_length", f"each keyword at most {MAX_KEYWORD_CHARS} characters")
        )
    return tuple(out), problems


def validate_answer(text: str) -> tuple[tuple[str, tuple[str, ...]] | None, list[Violation]]:
    """(script, keywords) of a builder answer, or the violations."""
    data = json_object(text)
    if not isinstance(data, dict):
        return None, [Violation("json", 'the answer is not one JSON object {"script", "keywords"}')]
    problems: list[Violation] = []
    script = data.get("script")
    if isinstance(script, list) and all(isinstance(s, str) for s in script):
        # Steps as a list: numbered as asked.
        script = "\n".join(
            s.strip() if _STEP.match(s) else f"{i}. {s.strip()}"
            for i, s in enumerate(script, 1)
            if s.strip()
        )
    if not isinstance(script, str) or not script.strip():
        problems.append(Violation("script", '"script" must be a non-empty text'))
    else:
        script = script.strip()
        steps = [line for line in script.splitlines() if _STEP.match(line)]
        if not MIN_STEPS <= len(steps) <= MAX_STEPS:
            problems.append(
                Violation(
                    "steps",
                    f'"script" needs {MIN_STEPS} to {MAX_STEPS} numbered steps '
                    f'("1. ...", one per line), not {len(steps)}',
                )
            )
        if len(script) > MAX_SCRIPT_CHARS:
            problems.append(
                Violation("script_length", f'"script" at most {MAX_SCRIPT_CHARS} characters')
            )
    keywords, keyword_problems = clean_keywords(data.get("keywords"))
    problems += keyword_problems
    if problems:
        return None, problems
    return (cast(str, script), keywords), []


def builder_prompt(query: str, trajectory: str, failed: bool = False) -> str:
    template = prompts.FAILURE_SCRIPT_PROMPT if failed else prompts.SCRIPT_PROMPT
    return template.format(
        query=query,
        trajectory=trajectory,
        min_steps=MIN_STEPS,
        max_steps=MAX_STEPS,
        min_keywords=MIN_KEYWORDS,
        max_keywords=MAX_KEYWORDS,
    )


async def build_procedures(
    episodes: Sequence[Any],
    tasks: Sequence[Any],
    llm: Any,
    split: str,
    concurrency: int,
    chat_kwargs: dict[str, Any] | None = None,
    failures: bool = False,
) -> tuple[list[Procedure], BuildStats]:
    """One procedure per successful episode with calls, in episode order; with
    `failures` (the AMD authors' ports), per failed one too, labelled."""
    by_id = {t.task_id: t for t in tasks}
    stats = BuildStats()
    client = LLMClient(llm, KIND, stats, chat_kwargs, retry_prompt=prompts.RETRY_PROMPT)
    chosen = []
    for episode in episodes:
        task = by_id.get(episode.task_id)
        if not (episode.success is True or (failures and episode.success is False)):
            stats.skipped[f"{KIND}:unsuccessful"] += 1
        elif task is None or not task.turns:
            stats.skipped[f"{KIND}:no_task"] += 1
        elif not render_trajectory(episode):
            stats.skipped[f"{KIND}:no_calls"] += 1
        else:
            chosen.append((episode, task.turns[0]))

    async def one(item: tuple[Any, str]) -> Procedure:
        episode, query = item
        trajectory = render_trajectory(episode)
        failed = episode.success is not True
        answer = await client.ask(builder_prompt(query, trajectory, failed), validate_answer)
        if answer is None:
            client.count_fallback()
            script, keywords, fallback = fallback_script(episode), keywords_of(query), True
        else:
            (script, keywords), fallback = answer, False
        return Procedure(
            memory_id=f"memp:{episode.episode_id}",
            source=MemorySource(
                episode.task_id, episode.group_id, split, episode.agent, episode.episode_id
            ),
            query=query,
            script=script,
            trajectory=trajectory,
            keywords=keywords,
            fallback=fallback,
            outcome="failure" if failed else "success",
        )

    return await gather_ordered(chosen, one, concurrency), stats


def memp_bank(
    procedures: Sequence[Procedure],
    stats: BuildStats,
    episodes: int,
    store_prefix: str = STORE_PREFIX,
) -> BuiltBank:
    """Both collections of the same procedures (query key, query + keywords key)."""
    keyed = [KeywordProcedure(**p.__dict__) for p in procedures]
    counts = {
        **stats.as_dict(),
        "episodes": episodes,
        "procedures": len(procedures),
        "fallback_procedures": sum(p.fallback for p in procedures),
    }
    if any(p.outcome != "success" for p in procedures):
        counts["failure_procedures"] = sum(p.outcome != "success" for p in procedures)
    return BuiltBank(
        store_prefix,
        COLLECTIONS,
        {QUERY_COLLECTION: list(procedures), KEYWORD_COLLECTION: keyed},
        counts,
    )


def bank_content_id(episodes: Sequence[Any], fingerprint: str, writer: str, split: str) -> str:
    """Content hash of what decides the bank: the episodes' outcomes and calls (with
    observations), the builder model, the split and the builder's texts and version."""
    rows = sorted(
        (
            e.task_id,
            e.agent,
            e.episode_id,
            e.success is True,
            [(c.call, c.content, c.rejected) for s in e.steps for c in s.calls],
        )
        for e in episodes
    )
    payload = {"fingerprint": fingerprint, "writer": writer, "split": split, "episodes": rows}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
