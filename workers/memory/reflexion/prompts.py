"""What the reflector is asked and what a re-play is shown. The wording is ours; the
structure is the original's (noahshinn/reflexion: the AlfWorld reflection query of
`alfworld_runs/generate_reflections.py` and the HotPotQA `REFLECT_INSTRUCTION` of
`hotpotqa_runs/prompts.py`): the failed attempt, the verdict, the plans of earlier
attempts, then a short diagnosis and a new plan for the same task; re-plays get the
reflections of the earlier attempts before the task.
"""

from __future__ import annotations

from collections.abc import Sequence

REFLECT_PROMPT = """\
You will be given a previous attempt of yours at a task. The attempt was unsuccessful.
{verdict}

Do not summarize the task or repeat the attempt. Instead, in a few sentences, diagnose
what most likely went wrong (a wrong step, a wrong assumption, a misread requirement,
a wrong final answer), and devise a new, concise plan for the same task that avoids
that mistake, referring to the specific steps you should take differently. You will
read your plan the next time you attempt this same task.

{attempt}
{earlier}
Answer with the diagnosis and the new plan only."""
VERDICT_BINARY = "The environment's verdict: the task was not solved."
VERDICT_GRADER = "The environment's verdict: the task was not solved ({reason})."
EARLIER_HEADER = "\nYour reflections on earlier attempts at this task:"
EARLIER_LINE = "Attempt {attempt}: {text}"
RETRY_PROMPT = "Your answer was empty. Write the diagnosis and the new plan, in a few sentences."
# A reflector that answers nothing usable twice (counted): the verdict, as a reminder.
FALLBACK = (
    "Attempt {attempt} at this task failed ({reason}). Do not repeat it: reconsider each "
    "step and the final answer."
)
MARKER = "[Reflexion memory]"
HEADER = (
    f"{MARKER} You have attempted this same task before and did not succeed. Your "
    "reflections on those attempts (the most recent last):"
)
LINE = "- Attempt {attempt}: {text}"
FOOTER = "Use them to avoid repeating the same mistakes in this attempt."

TEXTS = (REFLECT_PROMPT, VERDICT_BINARY, VERDICT_GRADER, EARLIER_HEADER, EARLIER_LINE,
         RETRY_PROMPT, FALLBACK)  # fmt: skip
HOOK_TEXTS = (HEADER, LINE, FOOTER)


def reflection_prompt(attempt: str, verdict: str, earlier: Sequence[tuple[int, str]]) -> str:
    lines = [EARLIER_HEADER, *(EARLIER_LINE.format(attempt=a, text=t) for a, t in earlier)]
    return REFLECT_PROMPT.format(
        verdict=verdict, attempt=attempt, earlier="\n".join(lines) + "\n" if earlier else ""
    )


def memory_block(shown: Sequence[tuple[int, str]]) -> str:
    """The system-prompt block of the reflections shown (empty: none)."""
    if not shown:
        return ""
    return "\n".join([HEADER, *(LINE.format(attempt=a, text=t) for a, t in shown), FOOTER])
