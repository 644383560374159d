"""ACE's reflector, curator and merge prompts and the playbook's framing. The wording is
ours; the structure is the original's (ace-agent/ace `ace/prompts/reflector.py`,
`curator.py`, `core/bulletpoint_analyzer.py`; ACE's AppWorld harness
`prompts/appworld_react_reflector_no_gt_prompt.txt`, `appworld_react_curator_prompt.txt`,
`appworld_react_generator_prompt.txt`): the reflector diagnoses the attempt against the
environment's feedback and tags the playbook's bullets helpful / harmful / neutral, in
one JSON object; the curator adds only what the playbook lacks, as ADD operations in one
JSON object, told the training progress and the token budget; the generator reads the
playbook whole, between markers.
"""

from __future__ import annotations

REFLECTOR_PROMPT = """\
You are an expert analyst and educator. Diagnose the attempt below: what went wrong or
could be better, grounded in the attempt's own steps, outputs and the environment's
feedback.

Instructions:
- Follow the attempt step by step and find where its reasoning or actions went wrong.
- Take the environment's feedback into account.
- Name the specific conceptual error, calculation mistake, misused tool or API, wrong
  source of information or misapplied strategy, and its root cause.
- Say concretely what should have been done instead, step by step.
- Give one insight worth remembering to avoid this mistake on other tasks.
- Tag each playbook bullet the attempt relied on or should have relied on as
  "helpful", "harmful" or "neutral" (for reaching the right result).

Task:
{task}

The attempt:
{attempt}

Environment feedback:
{feedback}

Playbook the attempt was given:
{playbook}

Answer with one JSON object and nothing else:
{{
  "reasoning": "<your analysis>",
  "error_identification": "<what went wrong>",
  "root_cause_analysis": "<why it went wrong>",
  "correct_approach": "<what should have been done>",
  "key_insight": "<the principle to remember>",
  "bullet_tags": [{{"id": "<bullet id>", "tag": "helpful|harmful|neutral"}}]
}}"""
FEEDBACK_SOLVED = "The task was solved."
FEEDBACK_FAILED = "The task was not solved."
FEEDBACK_NONE = "[not available]"
NO_PLAYBOOK = "(empty)"
REFLECTION_RETRY = (
    "Your answer is not the JSON object asked for ({problem}). Answer again with that one "
    "JSON object only."
)

CURATOR_PROMPT = """\
You are a master curator of knowledge. Decide which new insights should be added to an
existing playbook, based on a reflection on a recent attempt.

Context:
- The playbook will help answer similar tasks later. The reflection used feedback from
  the environment that will NOT be available then: add what helps without it.

Instructions:
- Read the playbook and the reflection; identify ONLY the new insights, strategies or
  mistakes the playbook LACKS.
- Avoid redundancy: if similar advice exists, add only what truly complements it.
- Never rewrite the playbook: give only the additions.
- Quality over quantity: a focused playbook beats an exhaustive one.
- Each addition is concise, specific and actionable.
- Nothing to add: an empty list of operations.

Training progress: task {step} of {total}. Playbook token budget: {budget} tokens.
Playbook statistics: {stats}

Task:
{task}

The attempt:
{attempt}

Reflection:
{reflection}

Current playbook:
{playbook}

Sections you may add to: {sections}

Answer with one JSON object and nothing else:
{{
  "reasoning": "<your analysis>",
  "operations": [{{"type": "ADD", "section": "<a section above>", "content": "<the new bullet>"}}]
}}"""
CURATOR_RETRY = (
    "Your answer is not the JSON object asked for ({problem}). Answer again with that one "
    "JSON object only (operations may be an empty list)."
)

MERGE_PROMPT = """\
These playbook bullets say nearly the same thing:
{bullets}

Merge them into ONE bullet that keeps all their information without redundancy,
concise and actionable. Answer with the merged bullet's text only."""

MARKER = "[ACE playbook]"
FRAME = (
    f"{MARKER} You are also given a curated playbook of strategies, specific information, "
    "common mistakes and proven solutions for tasks like this one. Read the playbook "
    "first, then solve the task, using every relevant section:"
)
BEGIN = "### PLAYBOOK BEGIN"
END = "### PLAYBOOK END"
REFLECTION_MARKER = "[ACE reflection]"
REFLECTION_HEADER = (
    f"{REFLECTION_MARKER} Your diagnosis of your previous attempt at this same task (use it "
    "to improve this attempt):"
)
SECTION_LINE = "## {name}"
BULLET_COUNTS = "[{id}] helpful={helpful} harmful={harmful} :: {content}"
BULLET_PLAIN = "[{id}] {content}"

# reflector_reads: cited_bullets (ace.py's generator names the bullets it used, its
# reflector reads only those: `extract_playbook_bullets`). Ours, in ace.py's words where
# it has them; sent only then (the program's texts, never the student's hooks).
CITE_BULLETS = (
    "While you solve the task, name every playbook bullet you use: write its id in square "
    "brackets as the playbook shows it (e.g. [abc-00001]), in your reasoning or answer."
)
_TAG_ALL = """- Tag each playbook bullet the attempt relied on or should have relied on as
  "helpful", "harmful" or "neutral" (for reaching the right result)."""
_TAG_CITED = """- Tag each playbook bullet below (those the attempt says it used) as "helpful",
  "harmful" or "neutral" (for reaching the right result)."""
_SHOWN_ALL = "Playbook the attempt was given:"
_SHOWN_CITED = "Playbook bullets the attempt says it used:"
assert _TAG_ALL in REFLECTOR_PROMPT and _SHOWN_ALL in REFLECTOR_PROMPT
REFLECTOR_PROMPT_CITED = REFLECTOR_PROMPT.replace(_TAG_ALL, _TAG_CITED).replace(
    _SHOWN_ALL, _SHOWN_CITED
)
NONE_CITED = "(the attempt named no playbook bullet)"
CITED_NOT_FOUND = "(the attempt named bullet ids that are not in the playbook)"
CITED_TEXTS = (CITE_BULLETS, REFLECTOR_PROMPT_CITED, NONE_CITED, CITED_NOT_FOUND)

TEXTS = (REFLECTOR_PROMPT, FEEDBACK_SOLVED, FEEDBACK_FAILED, FEEDBACK_NONE, NO_PLAYBOOK,
         REFLECTION_RETRY, CURATOR_PROMPT, CURATOR_RETRY, MERGE_PROMPT)  # fmt: skip
HOOK_TEXTS = (FRAME, BEGIN, END, REFLECTION_HEADER, SECTION_LINE, BULLET_COUNTS, BULLET_PLAIN)
