"""Every text AgentBrew sends a model or shows the student: ours, written from the
paper's own words (no prompt text is published, and no code): §2.3.2 (the note schema),
§2.4.2 (student-aware synthesis: the student as the sole reader, a checklist for a
junior agent, the three-step protocol, imperative rules without appeals to tacit
understanding, the student's model class and known weaknesses), §2.3.3 (the curator:
deduplication and gating only, never re-judging correctness), §3.5 (notes store no
final answer: transferable guardrails with `not_applicable_when`). All of them are part
of the brew stage's identity (`TEXTS`), the injected block's of the evaluation's.
"""

from __future__ import annotations

# -- the note schema (§2.3.2, plus the scope of §2.5.1 and not_applicable_when of §3.5) --

SCHEMA = """\
{
  "note_key": "a short unique id in kebab-case, e.g. simplify-factorials-first (reuse an existing note's key only to update that note)",
  "scope": "the skill scope the note belongs to: one of the existing scopes listed above, or a new short snake_case name",
  "scope_description": "one sentence saying which tasks the scope covers (required only for a new scope; otherwise an empty string)",
  "trigger_pattern": "the surface features of a task that should activate this note: what the student can see in a task before solving it",
  "corrective_rule": "the fix, as one imperative directive",
  "minimal_steps": ["a short ordered checklist", "each step one concrete action", "at most 8 steps"],
  "tags": ["1 to 8 short domain or skill labels"],
  "not_applicable_when": "the tasks that look similar but where the rule must not be applied",
  "quality_score": 0.0
}"""

SCHEMA_RULES = """\
Rules for the note:
- It is an abstract, reusable rule for every task with the same structure, not a worked solution: never state this task's final answer, its expected output or its test cases.
- quality_score is your confidence (0 to 1) that the note will help on future tasks it triggers on.
- Output the JSON object in a ```json code block, as the last thing in your answer."""

# -- the teacher: student-aware synthesis (§2.4.2) -----------------------------------

STUDENT_AWARE_DRAFT = """\
You are the teacher of a weaker AI agent, the student, which just failed a task. Write ONE note that will make THIS student succeed on this task and on future tasks with the same structure. The note is stored in the student's memory and shown to it in later tasks; you will not be there to explain it.

The student is {student_model}{student_size}. Its known weaknesses: {weaknesses}
The student is the only reader of the note. Write it as a checklist for a junior agent, not as an expert's post-mortem: short sentences, an explicit order of actions, and triggers the student can see on the surface of a task.

Before the note, work through three steps, briefly:
1. Failure mode: from the student's attempt and the environment's report, name the dominant error type (for example: wrong order of API calls, a sign error, a misread constraint).
2. Capability gap: name the specific skill or piece of knowledge, at this student's level, whose absence caused the failure; not a vague "logical mistake". Say whether the student misunderstood the task (a representation error) or understood it and carried it out wrongly (an execution error).
3. Executable rule: state the fix in imperative form ("first do A, then B, watch for C"). Never appeal to understanding the student cannot act on ("deeply analyze X", "think carefully", "make sure you understand"): every step must be an action it can take.

{context}

Existing skill scopes of the memory:
{scopes}

Then write the note as a JSON object with exactly these fields:
{schema}

{rules}"""

STUDENT_AWARE_REVISE = """\
The note you wrote was shown to the student and it tried the same task again, and failed again. Its new attempt and the environment's report are below. Revise the note for THIS student, {student_model}{student_size} (known weaknesses: {weaknesses}): find what in the note it could not act on, or what it still lacked, and make every step an action it can take. Work through the same three steps (failure mode, capability gap at the student's level, executable rule) briefly, then write the whole revised note.

Your note:
```json
{note}
```

{context}

Existing skill scopes of the memory:
{scopes}

Write the revised note as a JSON object with exactly these fields:
{schema}

{rules}"""

# -- the teacher without student awareness (the ablation, student_aware: false) -------

PLAIN_DRAFT = """\
An AI agent failed the task below. Analyze the failure and write ONE note with a reusable lesson that would help an agent succeed on this task and on future tasks with the same structure.

{context}

Existing skill scopes of the memory:
{scopes}

Write the note as a JSON object with exactly these fields:
{schema}

{rules}"""

PLAIN_REVISE = """\
The agent was given your note and tried the same task again, and failed again. Its new attempt and the environment's report are below. Revise the note.

Your note:
```json
{note}
```

{context}

Existing skill scopes of the memory:
{scopes}

Write the revised note as a JSON object with exactly these fields:
{schema}

{rules}"""

# What the teacher reads of the task and the student's attempt (both prompts).
CONTEXT = """\
The task:
<<<
{task}
>>>

The student's attempt (its messages, the calls it made and what they returned):
<<<
{trajectory}
>>>

The environment's report: {report}"""

NO_SCOPES = "(none yet: name a new one)"
# The notes already in a scope, under its line in the scope catalog (bounded), so that a
# note can update an existing rule by reusing its note_key (§2.3.3).
SCOPE_NOTES = "  notes in it (note_key: trigger_pattern; reuse a note_key to update that note):"
SCOPE_NOTE = "  - {key}: {trigger}"
SCOPE_MORE = "  - (and {n} more)"

# Sent after an invalid answer (building.LLMClient's retry), naming what was wrong.
RETRY = """\
Your answer is invalid: {problems}
Answer again, following every rule of the original request; end with the JSON object in a ```json code block."""

# -- the curator (§2.3.3) ------------------------------------------------------------

CURATOR = """\
You curate the memory of notes of a student AI agent. A teacher wrote the candidate note below after the student failed a task. {certification} Do not judge whether the note is correct: your job is only to keep the memory free of redundant notes.

The candidate:
```json
{candidate}
```

The most similar notes already in memory, in the scope "{scope}" (by lexical and by embedding similarity):
{existing}

Decide one of:
- "add": the candidate teaches something none of these notes says; it is stored as a new note.
- "merge": the candidate and one existing note state the same rule (a near duplicate); give that note's note_key as "target" and the merged note in "note": one rule that keeps what each says, in the same fields (trigger_pattern, corrective_rule, minimal_steps, tags, not_applicable_when).
- "reject": the candidate adds nothing to what the existing notes say.

Answer with one JSON object in a ```json code block:
{{"decision": "add" | "merge" | "reject", "target": "the note_key merged into, or an empty string", "reason": "one sentence", "note": {{...the merged note, for merge only...}}}}"""

CERTIFIED = "With this note staged, the student re-tried that task and succeeded: the environment certified that the note helps it."
UNCERTIFIED = "The note was not certified: the student did not recover on that task with it (or it was never re-tried)."

# -- what the student is shown (serving and the brew's own plays) ---------------------

HEADER = (
    "[AgentBrew notes] Rules learned from earlier practice on similar tasks. Apply a note "
    'only when its "When" matches this task and its "Not when" does not; follow its steps '
    "in order."
)
NOTE = "Note {index} ({key})\nWhen: {trigger}\nRule: {rule}\nSteps:\n{steps}\nNot when: {not_when}"

DEFAULT_WEAKNESSES = (
    "limited multi-step arithmetic, brittle tool and function-call syntax, losing track of "
    "constraints stated early in a long task, and stopping before every requested step is "
    "done."
)

TEACHER_TEXTS = (
    SCHEMA,
    SCHEMA_RULES,
    STUDENT_AWARE_DRAFT,
    STUDENT_AWARE_REVISE,
    PLAIN_DRAFT,
    PLAIN_REVISE,
    CONTEXT,
    NO_SCOPES,
    SCOPE_NOTES,
    SCOPE_NOTE,
    SCOPE_MORE,
    RETRY,
    DEFAULT_WEAKNESSES,
)
CURATOR_TEXTS = (CURATOR, CERTIFIED, UNCERTIFIED)
HOOK_TEXTS = (HEADER, NOTE)
TEXTS = (*TEACHER_TEXTS, *CURATOR_TEXTS, *HOOK_TEXTS)
