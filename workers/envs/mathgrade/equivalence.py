"""Whether a stated answer is a gold answer by MATH's and GSM8K's own grading: the
benchmarks' `same_answer`, which AgentBrew's leakage guard asks (a note that states
"1/2" states ``\\frac{1}{2}``).

It grades as an episode's answer is graded (`grader.MathGrader`: math-verify in an
isolated process, the answer being a model's text). Kept apart from the grading
modules, whose source is the benchmarks' fingerprint: the guard is no part of what an
episode is scored by, and adding it moves no episode's stage key.
"""

from __future__ import annotations

from typing import Any

from distillery.workers.envs.mathgrade import grader


def grader_same_answer(cls: Any, options: Any, gold: str, answer: str) -> bool | None:
    """The grader's verdict; None where it cannot run isolated and the options do not
    allow it without namespaces (`sandbox_without_namespaces`), or when it timed out."""
    why = grader.isolation_unavailable()
    if why is not None and not options.sandbox_without_namespaces:
        return None
    verdict = grader.shared_grader(network=why is not None).grade(
        gold, answer, options.grader_timeout_s
    )
    return None if verdict.timed_out else verdict.correct
