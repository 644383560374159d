"""Building a trajectory RAG bank: one entry per successful teacher episode.

On a benchmark that grades a closing reply (the answer benchmarks: GSM8K, MATH, MBPP,
HumanEval), that reply is the entry's `answer` (the trajectory of an answer episode is
its one reply). Deterministic by design (the method's point is that nothing is distilled), so no
builder LLM is asked even when one is configured; every entry is counted as
`traj.deterministic` and every episode left out as `skipped.traj:<reason>`, so a
bank's stats say what it holds and why.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.building import BuildStats
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.trajectory_rag.records import (
    COLLECTION,
    COLLECTIONS,
    STORE_PREFIX,
    STORED_ANSWER_CHARS,
    STORED_OBSERVATION_CHARS,
    TeacherTrajectory,
    TrajectoryStep,
)
from distillery.workers.memory.transcript import closing_reply

KIND = "traj"  # the BuildStats kind of this method's entries


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} chars cut]"


def trajectory_steps(episode: Any) -> tuple[TrajectoryStep, ...]:
    """The executed calls of an episode with their observations, in order. A rejected
    call (one the environment refused to parse) was never executed: it is left out."""
    return tuple(
        TrajectoryStep(
            step.turn,
            call.call,
            _cut(call.content, STORED_OBSERVATION_CHARS),
            call.error is not None,
        )
        for step in episode.steps
        for call in step.calls
        if not call.rejected
    )


def graded_answer(episode: Any) -> str:
    """The episode's graded closing reply where its benchmark grades one (its
    trajectory contents hold ANSWER), cut to STORED_ANSWER_CHARS; else empty."""
    from distillery.workers.envs.base import ANSWER
    from distillery.workers.envs.registry import trajectory_contents

    if ANSWER not in trajectory_contents(episode.benchmark, None):
        return ""
    return _cut(closing_reply(episode), STORED_ANSWER_CHARS)


def _skip_reason(episode: Any, task: Any) -> str | None:
    if episode.success is not True:
        return "unsuccessful"  # naive transfer keeps only what worked
    if task is None or not task.turns:
        return "no_task"
    if not trajectory_steps(episode) and not graded_answer(episode):
        return "no_calls"  # nothing to show the student
    return None


def build_trajectories(
    episodes: Sequence[Any], tasks: Sequence[Any], split: str
) -> tuple[list[TeacherTrajectory], BuildStats]:
    """Entries of the successful episodes (in episode order) and the build's counts."""
    by_id = {t.task_id: t for t in tasks}
    stats = BuildStats()
    entries: list[TeacherTrajectory] = []
    for episode in episodes:
        task = by_id.get(episode.task_id)
        reason = _skip_reason(episode, task)
        if reason or task is None:  # no task: a reason is given
            stats.skipped[f"{KIND}:{reason}"] += 1
            continue
        stats.deterministic[KIND] += 1
        entries.append(
            TeacherTrajectory(
                memory_id=f"traj:{episode.episode_id}",
                source=MemorySource(
                    episode.task_id, episode.group_id, split, episode.agent, episode.episode_id
                ),
                request=task.turns[0],
                turns=tuple(task.turns),
                steps=trajectory_steps(episode),
                answer=graded_answer(episode),
            )
        )
    return entries, stats


def built_bank(entries: list[TeacherTrajectory], stats: BuildStats, n_episodes: int) -> BuiltBank:
    return BuiltBank(
        STORE_PREFIX,
        COLLECTIONS,
        {COLLECTION: entries},
        {**stats.as_dict(), "trajectories": n_episodes},
    )


def bank_content_id(episodes: Sequence[Any], code_version: str, split: str) -> str:
    """Content hash of what decides the entries: the successful episodes' calls and
    observations (the writer is not in it: no model writes this bank)."""
    solved = sorted(
        (
            e.task_id,
            e.group_id or "",
            e.agent,
            e.episode_id,
            [(s.turn, s.call, s.observation, s.error) for s in trajectory_steps(e)],
            # An answer only where one is stored: a tool-use bank's id is as it was.
            *([answer] if (answer := graded_answer(e)) else []),
        )
        for e in episodes
        if e.success is True
    )
    payload = {
        "kind": "trajectory_rag",
        "code": code_version,
        "split": split,
        "stored_observation_chars": STORED_OBSERVATION_CHARS,
        "solved": solved,
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
