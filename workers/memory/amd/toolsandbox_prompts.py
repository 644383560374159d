"""AMD's ToolSandbox texts: the reasoning its Function build writes for every stored
call, and the label its Function hint shows that reasoning under.

Our wording of what the AMD authors' ToolSandbox builder asks its think model
(taeilkim2465/agentic_memory_distillation, toolsandbox/common/memory/builder.py:58-73,
`_THINK_SYSTEM` and `_THINK_USER_TEMPLATE`, sent at :287-296) and of the label their
hint shows (toolsandbox/common/memory/store.py:225): the same inputs (the task, the
earlier calls with their results cut to 100 characters, the call itself with its
arguments as JSON), the same three points, the same length (2-3 sentences, no bullets,
no markdown); their repository has no licence, so the text is ours.

They live apart from `prompts` (BFCL's), whose texts are every build's fingerprint: a
bank built from ToolSandbox trajectories carries these in its profile's digest instead
(`settings.BenchmarkProfile.version`, `bank.bank_id_for`), so BFCL's and AppWorld's
banks keep their ids.
"""

from __future__ import annotations

# The system message of the reasoning request (builder.py:58).
CALL_REASONING_SYSTEM = (
    "You explain, briefly, why a function-calling agent made one of its function calls."
)

# The user message (builder.py:60-73). Fields: task, previous_calls ("" for the first
# call, else PREVIOUS_CALLS_SECTION filled), function, arguments (JSON).
CALL_REASONING_PROMPT = """\
An agent that solves tasks by calling functions is working on this task:
Task: {task}

{previous_calls}\
The call it makes next: {function}({arguments})

Explain this call in 2 or 3 sentences, covering:
1. what the call is for and what it gives the task;
2. which information it needs was already known from the earlier calls;
3. what the arguments must respect.

Answer with the explanation alone, as plain sentences: no list, no markdown.
"""

# The earlier calls, one line each (builder.py:272-277). Field: lines.
PREVIOUS_CALLS_SECTION = """\
Calls made before it:
{lines}

"""

# One earlier call (builder.py:276). Fields: function, arguments (JSON), result (cut
# to 100 characters).
PREVIOUS_CALL_LINE = "  {function}({arguments}) -> {result}"

# The label a Function example's reasoning is shown under in a failing call's hint
# (store.py:225 shows it before the example's call).
CALL_REASONING_LABEL = "[Why this call was made]"
