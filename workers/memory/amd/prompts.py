"""Builder prompts (AMD appendix C, figures 13 and 14), adapted to BFCL multi-turn.

Rewritten for BFCL rather than copied: the trajectory is a sequence of user turns, each
answered by function calls and their observations; functions are named
``Class.method`` (``GorillaFileSystem.mv``); AppWorld's supervisor/api_docs rules are
gone. Every prompt is a module constant filled with `str.format` (literal braces are
doubled), so a prompt change is a visible diff and part of the build stage's identity.
"""

from __future__ import annotations

# Figure 13, adapted. Fields: instruction, n_turns, trajectory, functions, placeholders,
# forbidden_values.
WORKFLOW_INSIGHT_PROMPT = """\
You are given a multi-turn function-calling task and the trajectory of an agent that \
solved it successfully. The user spoke in {n_turns} turn(s); in each turn the agent \
called functions of Python API classes and read the results. Write a short memory \
that helps another, smaller agent solve SIMILAR tasks with different inputs.

Rules:
- Write exactly one paragraph of 2 to 4 sentences, under 120 words in total.
- State the general strategy: which functions to use, the preconditions and the \
decision rules. Do not narrate the trajectory call by call and do not restate the task.
- Name the key functions in Class.method form, exactly as listed under "Functions \
used" (for example GorillaFileSystem.cd). Mention only functions from that list; \
never invent others.
- Never write concrete values from the task or the trajectory (file names, folder \
names, ids, user names, amounts, message texts). Write typed placeholders instead, \
such as the ones under "Placeholders".
- Include at least one validation cue (what to check to know a step worked) and one \
common failure to avoid.
- Output only the paragraph: no title, no bullets, no markdown, no quotes.

Example of the expected style (a different task):
To message a contact, log in with MessageAPI.message_login using <USER_ID> before \
anything else, then look up the recipient with MessageAPI.get_user_id and send with \
MessageAPI.send_message to <RECEIVER_ID>. Verify that the send result reports success \
before moving to the next request. A common failure is passing the contact's name \
where <RECEIVER_ID> is expected; always resolve the id first.

Task instruction (first user turn):
{instruction}

Trajectory:
{trajectory}

Functions used: {functions}
Placeholders: {placeholders}
Concrete values that must NOT appear in your answer: {forbidden_values}
"""

# Figure 14, adapted. Fields: instruction, n_steps, trajectory, hints, max_segments.
SUBTASK_SEGMENT_PROMPT = """\
You are analysing a successful multi-turn function-calling trajectory to find its \
natural sub-task boundaries.

Task instruction (first user turn):
{instruction}

Trajectory ({n_steps} steps; one step is one executed function call):
{trajectory}

Breakpoint hints from API boundaries (a new user turn, a change of API class):
{hints}

Split the trajectory into sub-task segments. A segment is a coherent unit of work \
such as "create the target folder", "move file into folder", "search file for \
pattern", "post summary tweet".

Rules:
- Every segment contains at least one step; steps are numbered from 1 to {n_steps}.
- Segments are consecutive, never overlap and never skip a step: together they cover \
all {n_steps} steps exactly once, in order.
- Use at most {max_segments} segments.
- Start from the hints, but move a boundary when the meaning calls for it (for \
example, keep a navigation call together with the call it prepares).
- label: a short verb phrase of at most 5 words, with no concrete file names, ids or \
other values from the task.
- description: one sentence saying what the segment accomplishes, in general terms \
(typed placeholders such as <FILE_NAME> instead of concrete values).

Reply with ONLY a JSON array, no prose and no markdown fences, like:
[
  {{"start_step": 1, "end_step": 2, "label": "create target folder", \
"description": "Enter the working folder and create the destination folder."}},
  {{"start_step": 3, "end_step": 3, "label": "move file into folder", \
"description": "Move <FILE_NAME> into the new folder."}}
]
"""

# The `text` representation of a Subtask segment. Fields: label, description, steps.
SEGMENT_TEXT_PROMPT = """\
Rewrite the following example of an agent's sub-task as plain prose for another agent \
to read.

Sub-task: {label}
Purpose: {description}
Calls and their results, in order:
{steps}

Rules:
- Describe, in 2 to 5 sentences, which functions were called in which order, what \
arguments they took (keep the typed placeholders such as <FILE_NAME> exactly) and \
what each result showed.
- Write prose only: no code blocks, no markdown fences, no bullet list, no JSON.
- Do not add functions or facts that are not in the example.
- Output only the prose.
"""

# The `text` representation of a Function record. Fields: function, instruction, call,
# result, doc.
FUNCTION_TEXT_PROMPT = """\
Rewrite the following successful function call as a short usage note in plain prose \
for another agent.

Function: {function}
Documentation: {doc}
User request it served: {instruction}
Call (arguments masked as typed placeholders): {call}
Result: {result}

Rules:
- In 1 to 3 sentences, say when to use this function, which arguments it needs \
(keep the placeholders such as <FILE_NAME> exactly) and what it returns.
- Write prose only: no code blocks, no markdown fences, no bullet list, no JSON.
- Output only the prose.
"""

# Sent after an invalid answer, naming what was wrong. Field: problems.
RETRY_PROMPT = """\
Your answer is invalid: {problems}
Answer again, following every rule of the original request, and output only the answer.
"""
