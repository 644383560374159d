"""A scripted brew of nine arithmetic tasks (see `TASKS`): a student that solves a task
only with a note carrying the task's skill marker (`<skill>`) in its prompt, a JSON
teacher that writes the marker into its note (late, never, with the task's answer, or
not as JSON, by skill) and a curator that adds new rules and merges a reused key."""

from __future__ import annotations

import json
import re
from typing import Any

from distillery.workers.envs.base import Task

# (task id, skill, its gold answer); skill None: solved without a note.
SPECS = [
    ("t0", None, "12"),
    ("t1", "fractions", "7/12"),
    ("t2", "fractions", "5/6"),
    ("t3", "percent", "45"),  # the first note lacks the marker: certified by a revision
    ("t4", "hopeless", "3"),  # no note helps: rolled back after R_max re-plays
    ("t5", "decimals", "0.75"),  # the teacher reuses key use-fractions: merged
    ("t6", "angles", "137"),  # the note states the gold answer: refused
    ("t7", "units", "250"),  # the teacher answers no JSON, twice: skipped
    ("t8", "percent", "30"),  # solved on its first play by t3's note
]
SCOPE = {"angles": "geometry"}  # every other skill: arithmetic
TASKS = [
    Task(
        task_id=task_id,
        benchmark="gsm8k",
        turns=(
            f"An {SCOPE.get(skill or '', 'arithmetic')} word problem number {task_id[1:]}. "
            f"Skill: {skill or 'counting'}.",
        ),
        tools=(),
        function_docs=(),
    )
    for task_id, skill, _ in SPECS
]
SKILL = {task_id: skill for task_id, skill, _ in SPECS}
GOLD = {task_id: (gold,) for task_id, _, gold in SPECS}


def truths(task_id: str) -> tuple[str, ...]:
    return GOLD.get(task_id, ())


def student(task: Task, system: str) -> bool:
    skill = SKILL[task.task_id]
    return skill is None or f"<{skill}>" in system


def _note(skill: str, *, marker: bool = True, key: str | None = None, quality: float = 0.8):
    rule = f"Apply the {skill} method step by step" + (f" <{skill}>." if marker else ".")
    return {
        "note_key": key or f"use-{skill}",
        "scope": SCOPE.get(skill, "arithmetic"),
        "scope_description": f"{SCOPE.get(skill, 'arithmetic')} problems with numbers",
        "trigger_pattern": f"An arithmetic word problem that needs {skill}.",
        "corrective_rule": rule,
        "minimal_steps": [f"Find the {skill} in the problem.", "Compute, then check."],
        "tags": [skill],
        "not_applicable_when": "The problem has no numbers.",
        "quality_score": quality,
    }


def teacher(messages: list[dict[str, Any]]) -> str:
    prompt = str(messages[0]["content"])
    skill = re.search(r"Skill: (\w+)\.", prompt).group(1)  # type: ignore[union-attr]
    revising = "Your note:" in prompt
    if skill == "units":
        return "I would rather explain in prose."
    if skill == "percent":
        note = _note(skill, marker=revising)
    elif skill == "hopeless":
        note = _note(skill, marker=False)
    elif skill == "decimals":
        note = _note(skill, key="use-fractions")
    elif skill == "angles":
        note = _note(skill)
        note["corrective_rule"] = "Subtract from 180 <angles>: the answer is 137."
    else:
        note = _note(skill)
    return f"1. Failure mode. 2. Gap. 3. Rule.\n```json\n{json.dumps(note)}\n```"


def curator(messages: list[dict[str, Any]]) -> str:
    prompt = str(messages[0]["content"])
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)\n```", prompt, re.DOTALL)]
    candidate, existing = blocks[0], blocks[1:]
    same = [n for n in existing if n["note_key"] == candidate["note_key"]]
    if not same:
        return json.dumps({"decision": "add", "target": "", "reason": "a new rule"})
    target = same[0]
    merged = {
        "trigger_pattern": f"{target['trigger_pattern']} Or {candidate['trigger_pattern']}",
        "corrective_rule": f"{target['corrective_rule']} {candidate['corrective_rule']}",
        "minimal_steps": target["minimal_steps"] + candidate["minimal_steps"][:1],
        "tags": sorted(set(target["tags"]) | set(candidate["tags"])),
        "not_applicable_when": target["not_applicable_when"],
    }
    return json.dumps(
        {"decision": "merge", "target": target["note_key"], "reason": "same key", "note": merged}
    )
