"""Every text ReasoningBank sends to the builder model or shows the student.

Written for this project after the original's instructions (google-research/
reasoning-bank, WebArena/prompts/memory_instruction.py: SUCCESSFUL_SI for successful
trajectories, FAILED_SI for failed ones, "at most 3" items each in a Markdown
`# Memory Item` / `## Title` / `## Description` / `## Content` layout) and its
injection text (WebArena/agents/legacy/agent.py: a preamble, then the items, appended
to the system message). The domain is tool calling instead of web navigation. Every
upper-case string here is hashed into the method's build fingerprint.
"""

from __future__ import annotations

from collections.abc import Sequence

from distillery.workers.memory.reasoning_bank.records import MAX_ITEMS, MemoryItem

_FORMAT = """\
## Output format
Answer with Markdown only, in exactly this layout, one block per memory item (i = 1, 2, ...):

# Memory Item i
## Title <a short name for the insight>
## Description <one sentence: when this item applies, or when it does not>
## Content <1-3 sentences: the insight itself>
"""

SUCCESS_PROMPT = f"""\
You are an expert in tool-using agents. Below are a user request and the trajectory \
of an agent that COMPLETED it successfully (the benchmark's checker accepted the result).

## What to do
Distil memory items that will help an agent with similar requests in the future.
- First work out why the trajectory succeeded; then write down what made it work.
- Write at most {MAX_ITEMS} memory items, none repeating or overlapping another.
- Prefer concrete, actionable procedures (which function to call, in what order, with \
which kind of arguments) to general principles.
- Do not copy specific names, values or literal strings of this task into the items.

{_FORMAT}"""

FAILURE_PROMPT = f"""\
You are an expert in tool-using agents. Below are a user request and the trajectory \
of an agent that tried to complete it and FAILED (the benchmark's checker rejected the result).

## What to do
Distil memory items that will help an agent avoid this failure on similar requests.
- First reflect on why the trajectory failed; then write down the lesson learned or \
the strategy that would have prevented the failure.
- Write at most {MAX_ITEMS} memory items, none repeating or overlapping another.
- Prefer concrete, actionable recovery procedures (which check or call was missing, \
what to do instead) to general principles.
- Do not copy specific names, values or literal strings of this task into the items.

{_FORMAT}"""

# Sent after an invalid answer (field: problems).
RETRY_PROMPT = f"""\
That answer cannot be used: {{problems}}
Answer again with 1 to {MAX_ITEMS} memory items in exactly the Markdown layout asked \
for (# Memory Item i, then ## Title, ## Description and ## Content, each non-empty), \
and nothing else.
"""

# Shown to the student after its system prompt, before the retrieved items.
MEMORY_PREAMBLE = (
    "Below are memory items gathered from earlier interactions with this environment; "
    "they may help with the task. Use an item only where it is relevant: before "
    "acting, consider for each item whether it applies."
)

TEXTS = (SUCCESS_PROMPT, FAILURE_PROMPT, RETRY_PROMPT, MEMORY_PREAMBLE)
# What replaces the items once withdrawn (`remove_after_first_step`): the AMD authors'
# AppWorld port's words (appworld/rb/experiments/code/ace/evaluation_react.py).
WITHDRAWN = "(No past experiences)"


def trajectory_prompt(query: str, trajectory: str) -> str:
    """The query and trajectory of one build request. They follow the instruction in
    the same user message (the original sends the instruction as a system message;
    the shared builder client sends one user message)."""
    return f"**Query:** {query}\n\n**Trajectory:**\n{trajectory}"


def render_items(items: Sequence[MemoryItem]) -> str:
    """Items numbered across all retrieved records, in the builder's own layout."""
    return "\n\n".join(
        f"# Memory Item {i}\n## Title {it.title}\n## Description {it.description}\n"
        f"## Content {it.content}"
        for i, it in enumerate(items, start=1)
    )


def memory_block(items: Sequence[MemoryItem]) -> str:
    """What joins the system prompt (empty: nothing retrieved, nothing added)."""
    return f"{MEMORY_PREAMBLE}\n\n{render_items(items)}" if items else ""
