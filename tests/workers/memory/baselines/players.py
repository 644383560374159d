"""Scripted players of AgentBrew's baselines on GSM8K, for the scripted server
(`distillery.testing.scripted_server`): a student and a teacher whose answers depend
only on the request (so every play and resume is exact), and the teacher's builder
answers (reflections, ExpeL critiques, ACE reflector, curator and merges).

The first problems of GSM8K's test split (the evaluated tasks) and of its train split
(the memory split) are read from ``BASELINES_GSM8K`` (the data folder):

- the student solves test problem 0 always, problems 1 and 2 only when a memory block
  of one of the baselines is in its system prompt, problem 3 never;
- the teacher solves even train problems at once, problem 1 when a reflection of its
  own is in its prompt (Reflexion's or ACE's), problem 3 never;
- every reflection, critique, curation and merge answers in the format asked.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from distillery.workers.envs.mathgrade.answers import gsm8k_gold

MEMORY_MARKERS = ("[Trajectory memory]", "[ExpeL insights]", "[ACE playbook]",
                  "[Reflexion memory]", "[ExpeL examples]")  # fmt: skip
REFLECTION_MARKERS = ("[Reflexion memory]", "[ACE reflection]")
REFLECTION = "I rushed the arithmetic. Plan: recompute every step and check the final sum."
RULE_COMPARE = "ADD 1: Re-read the question and recompute each step before answering."
RULES_SUCCESS = (
    "AGREE 1: Re-read the question and recompute each step before answering.\n"
    "ADD 2: Put the final number alone in the box."
)
ACE_REFLECTION = {
    "reasoning": "The attempt added the wrong quantities.",
    "error_identification": "wrong quantities",
    "root_cause_analysis": "misread question",
    "correct_approach": "list the quantities first",
    "key_insight": "List every quantity with its unit before computing.",
    "bullet_tags": [],
}
ACE_BULLET = "List every quantity with its unit before computing."


@cache
def problems(split: str, n: int = 4) -> tuple[tuple[str, str], ...]:
    """(question, gold) of the split's first `n` problems."""
    path = Path(os.environ["BASELINES_GSM8K"]) / f"{split}.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()[:n]]
    return tuple((r["question"], gsm8k_gold(r["answer"])) for r in rows)


def _system(messages: list[dict[str, Any]]) -> str:
    return "\n".join(str(m.get("content") or "") for m in messages if m.get("role") == "system")


def _first_user(messages: list[dict[str, Any]]) -> str:
    return next((str(m.get("content") or "") for m in messages if m.get("role") == "user"), "")


def builder_answer(text: str) -> str | None:
    """The answer to a builder request (None: it is no builder request)."""
    if text.startswith("You will be given a previous attempt"):
        return REFLECTION
    if "Here are the EXISTING RULES" in text:
        return RULE_COMPARE if "FAILED TRIAL" in text else RULES_SUCCESS
    if text.startswith("You are an expert analyst and educator"):
        return json.dumps(ACE_REFLECTION)
    if text.startswith("You are a master curator"):
        operation = {"type": "ADD", "section": "common_mistakes_to_avoid", "content": ACE_BULLET}
        return json.dumps({"reasoning": "one missing rule", "operations": [operation]})
    if text.startswith("These playbook bullets say nearly the same thing"):
        return ACE_BULLET
    return None


def _answer(question: str, table: tuple[tuple[str, str], ...], solved: set[int]) -> str:
    for index, (text, gold) in enumerate(table):
        if text == question:
            return f"The answer is \\boxed{{{gold if index in solved else '-1'}}}."
    return "OK"


def student(request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages", [])
    first = _first_user(messages)
    built = builder_answer(first)
    if built is not None:
        return {"content": built}
    memory = any(m in _system(messages) for m in MEMORY_MARKERS)
    return {"content": _answer(first, problems("test"), {0, 1, 2} if memory else {0})}


def teacher(request: dict[str, Any]) -> dict[str, Any]:
    messages = request.get("messages", [])
    first = _first_user(messages)
    built = builder_answer(first)
    if built is not None:
        return {"content": built}
    reflected = any(m in _system(messages) for m in REFLECTION_MARKERS)
    return {"content": _answer(first, problems("train"), {0, 1, 2} if reflected else {0, 2})}
