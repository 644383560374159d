"""MemP's texts: the builder's prompt, its retry, the query-keyword prompt and what the
student is shown. Written for this project (not copied); what each asks follows the
sources named beside it. Every text is part of the bank's or the episodes' identity."""

from __future__ import annotations

# Build (one call per successful trajectory): the abstract script, as the AMD authors'
# AppWorld `memp_proceduralize_prompt.txt` asks it (a 5-15 step numbered procedure with
# task-specific values removed; zjunlp/MemP's `generate_workflow_from_trajectory_prompt`
# asks the same critical steps as prose), and the query's keywords, as their
# `memp_keyword_prompt.txt` asks them (5-10 distinguishing terms) for the entry's key.
SCRIPT_PROMPT = """\
Below is a user request and the function calls an assistant made to fulfil it, with
what each call returned. Turn them into reusable procedural memory for future requests
of the same kind.

Request:
{query}

Executed calls:
{trajectory}

Write:
- "script": a general procedure of {min_steps} to {max_steps} numbered steps ("1. ...",
  "2. ...", one per line) saying which functions to use, in which order, and what to
  check between them. Describe values generically (e.g. "the target folder"), never
  with this request's concrete names, numbers or IDs. Mention pitfalls the calls show.
- "keywords": {min_keywords} to {max_keywords} short keywords of the request (entities,
  actions, domain terms) that tell it apart from other requests.

Answer with one JSON object only: {{"script": "1. ...\\n2. ...", "keywords": ["..."]}}
"""

# The AMD authors' ports build from failed teacher trajectories too, labelled
# (appworld/memp/generate_memp_memories.py: "Outcome: SUCCESS|FAILURE" in
# memp_proceduralize_prompt.txt, "If the outcome was FAILURE, note what went wrong";
# toolsandbox build_memp_from_existing.py `build_from_failures=True`): the request for
# a failed one (the `memp_amd` method only).
FAILURE_SCRIPT_PROMPT = """\
Below is a user request and the function calls an assistant made trying to fulfil it,
with what each call returned. The attempt FAILED: the benchmark's checker rejected the
result. Turn it into reusable procedural memory for future requests of the same kind.

Request:
{query}

Executed calls:
{trajectory}

Write:
- "script": a general procedure of {min_steps} to {max_steps} numbered steps ("1. ...",
  "2. ...", one per line) that would fulfil such requests, saying which functions to
  use, in which order, and what to check between them; say what went wrong in this
  attempt and how to avoid it. Describe values generically (e.g. "the target folder"),
  never with this request's concrete names, numbers or IDs.
- "keywords": {min_keywords} to {max_keywords} short keywords of the request (entities,
  actions, domain terms) that tell it apart from other requests.

Answer with one JSON object only: {{"script": "1. ...\\n2. ...", "keywords": ["..."]}}
"""

RETRY_PROMPT = """\
That answer cannot be used: {problems}
Answer again with one JSON object with "script" and "keywords", following every rule
of the original request.
"""

# Read (keyword variant): the student model extracts the query's keywords, as in the
# AMD authors' student (`memp_student_react.py` `extract_keywords`, keyword model =
# the student's own model, config `MEMP_student_no_GT.jsonnet`).
KEYWORD_PROMPT = """\
List the keywords of the following request that would find similar past requests:
its main entities, actions and domain terms, {min_keywords} to {max_keywords} of them.

Request:
{query}

Answer with one JSON object only: {{"keywords": ["...", "..."]}}
"""

# Injection: zjunlp/MemP appends the retrieved procedures to the task's first
# observation ("guidelines of how to solve the similar task", a JSON list of
# {task_name, guidelines}; `run_memp_offline.py`): here the first user message.
MEMORY_HEADER = "[Procedural memory] How similar requests were solved before (guidelines):"
SCRIPT_LABEL = "Procedure:"
TRAJECTORY_LABEL = "Executed calls:"
REQUEST_LABEL = "Similar request:"

# The ports' student sees each procedure's outcome (memp_student_agent.py
# `build_memory_context`: "[Memory i | SUCCESS]"); the `memp_amd` method only.
OUTCOME_LABEL = "Outcome:"

TEXTS: tuple[str, ...] = (
    KEYWORD_PROMPT,
    MEMORY_HEADER,
    SCRIPT_LABEL,
    TRAJECTORY_LABEL,
    REQUEST_LABEL,
)
# What the `memp_amd` method shows besides TEXTS (its own evaluate stages' identity).
PORT_TEXTS: tuple[str, ...] = (OUTCOME_LABEL,)
