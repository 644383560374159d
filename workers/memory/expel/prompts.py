"""ExpeL's insight-extraction prompts and what the student is shown. The wording is
ours; the structure is the original's (LeapLabTHU/ExpeL, prompts/templates/human.py
and the benchmarks' SYSTEM_CRITIQUE_* instructions): a compare critique (one task, its
successful and its failed trial, the existing rules) and an all-success critique (a
list of successful trials, the existing rules), each answered with operations on the
rules in one fixed format, with a "focus on REMOVE" suffix once the list is full; at
test time the rules in decreasing importance and the similar tasks' successful
trajectories as examples.
"""

from __future__ import annotations

from collections.abc import Sequence

COMPARE_SYSTEM = (
    "You are an advanced reasoning agent that can add, edit or remove rules from your "
    "existing rule set, based on forming new critiques of past task trajectories. You "
    "will be given two earlier trials of the same task: one successful and one "
    "unsuccessful. The unsuccessful trial gave a wrong final answer or action, or ran "
    "out of steps."
)
SUCCESS_SYSTEM = (
    "You are an advanced reasoning agent that can add, edit or remove rules from your "
    "existing rule set, based on forming new critiques of past task trajectories. You "
    "will be given successful trials of different tasks."
)
OPERATIONS_FORMAT = """\
<OPERATION> <RULE NUMBER>: <RULE>

The operations are: AGREE (an existing rule is strongly relevant to these trials),
REMOVE (an existing rule contradicts or duplicates others), EDIT (an existing rule is
not general enough or can be improved: rewrite it), ADD (a new rule, very different
from the existing ones and useful for other tasks). Write each one exactly as below;
an existing rule you neither agree with, edit nor remove is kept as it is:

AGREE <EXISTING RULE NUMBER>: <EXISTING RULE>
REMOVE <EXISTING RULE NUMBER>: <EXISTING RULE>
EDIT <EXISTING RULE NUMBER>: <NEW MODIFIED RULE>
ADD <NEW RULE NUMBER>: <NEW RULE>

Rules must be GENERALLY APPLICABLE: never mention the trials. Each rule is one concise,
easy-to-follow sentence ending with a period. Do at most 4 operations, and at most one
per existing rule."""
COMPARE_HUMAN = """\
Here are the two trials of the same task to compare and critique:
TASK:
{task}

SUCCESSFUL TRIAL:
{success}

FAILED TRIAL:
{failure}

Here are the EXISTING RULES:
{rules}

By contrasting the failed trial with the successful one, and reading the existing
rules, add, edit, remove or agree with rules so that the list holds GENERAL, HIGH-LEVEL
critiques that would avoid similar failures on different tasks in the future,
emphasising how to reason and act better. Use this format:

{format}"""
SUCCESS_HUMAN = """\
Here are the successful trials:
{trials}

Here are the EXISTING RULES:
{rules}

By examining the successful trials and the existing rules, add, edit, remove or agree
with rules so that the list holds general, high-level insights of what made these
trials succeed, useful as tips on different tasks in the future, emphasising how to
reason and act better. Use this format:

{format}"""
SUFFIX_FULL = (
    "\n\nThe list is full: focus on REMOVE first, and ADD only a rule that is VERY "
    "insightful and different from the EXISTING RULES. Your operations on the EXISTING "
    "RULES above:"
)
SUFFIX_NOT_FULL = "\n\nYour operations on the EXISTING RULES above:"
NO_RULES = "(none yet)"
TRIAL = "TASK: {task}\n{trajectory}"
RETRY = (
    "Your answer holds no operation in the required format. Answer again with one "
    "operation per line, e.g. `ADD 1: <a general rule ending with a period>.`"
)

INSIGHTS_MARKER = "[ExpeL insights]"
INSIGHTS_HEADER = (
    f"{INSIGHTS_MARKER} The following are insights gathered on similar tasks, in "
    "decreasing order of importance. Use them as references to help you perform this task:"
)
INSIGHT_LINE = "{number}. {text}"
EXAMPLES_MARKER = "[ExpeL examples]"
EXAMPLES_HEADER = (
    f"{EXAMPLES_MARKER} Here are successful solutions of similar tasks (their values belong "
    "to those tasks):"
)
EXAMPLE_TITLE = "Example {index}:"

TEXTS = (COMPARE_SYSTEM, SUCCESS_SYSTEM, OPERATIONS_FORMAT, COMPARE_HUMAN, SUCCESS_HUMAN,
         SUFFIX_FULL, SUFFIX_NOT_FULL, NO_RULES, TRIAL, RETRY)  # fmt: skip
HOOK_TEXTS = (INSIGHTS_HEADER, INSIGHT_LINE, EXAMPLES_HEADER, EXAMPLE_TITLE)


def numbered(rules: Sequence[str]) -> str:
    return "\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1)) or NO_RULES


def compare_messages(
    task: str, success: str, failure: str, rules: Sequence[str], full: bool
) -> list[dict[str, str]]:
    human = COMPARE_HUMAN.format(
        task=task, success=success, failure=failure, rules=numbered(rules),
        format=OPERATIONS_FORMAT,
    )  # fmt: skip
    suffix = SUFFIX_FULL if full else SUFFIX_NOT_FULL
    return [
        {"role": "system", "content": COMPARE_SYSTEM},
        {"role": "user", "content": human + suffix},
    ]


def success_messages(
    trials: Sequence[tuple[str, str]], rules: Sequence[str], full: bool
) -> list[dict[str, str]]:
    text = "\n\n".join(TRIAL.format(task=t, trajectory=j) for t, j in trials)
    human = SUCCESS_HUMAN.format(trials=text, rules=numbered(rules), format=OPERATIONS_FORMAT)
    suffix = SUFFIX_FULL if full else SUFFIX_NOT_FULL
    return [
        {"role": "system", "content": SUCCESS_SYSTEM},
        {"role": "user", "content": human + suffix},
    ]


def insights_block(rules: Sequence[str]) -> str:
    if not rules:
        return ""
    lines = [INSIGHT_LINE.format(number=i, text=r) for i, r in enumerate(rules, 1)]
    return "\n".join([INSIGHTS_HEADER, *lines])


def examples_block(examples: Sequence[str]) -> str:
    if not examples:
        return ""
    parts = [EXAMPLES_HEADER]
    for i, example in enumerate(examples, 1):
        parts.append(f"{EXAMPLE_TITLE.format(index=i)}\n{example}")
    return "\n\n".join(parts)
