"""How the AMD authors' baseline ports frame their memory in ACE's AppWorld generator
prompt, rendered here (their prompt files carry no licence, so they are not shipped).

Each port gave its AppWorld student ACE's generator prompt with ACE's playbook framing
(the sentence introducing "a curated playbook", the `**Playbook**` instruction and the
``### PLAYBOOK BEGIN``/``END`` block around ``{{ playbook }}``) replaced by its own, and
the closing "Using these APIs and playbook" line speaking of past experiences:

- ReasoningBank (taeilkim2465/agentic_memory_distillation
  appworld/rb/experiments/prompts/appworld_react_generator_prompt.txt lines 28-32, 968):
  memory *items* from past interaction, which the student names in one sentence before
  it starts, in a ``MEMORY ITEMS`` block;
- MemP (appworld/memp/experiments/prompts/memp_generator_prompt.txt lines 28-37):
  retrieved past experience in a ``MEMORY`` block, then how to read SUCCESS and FAILURE
  procedures.

The sentences below are this project's renderings of those framings (same place, same
block structure, same instructions); what else the ports' files change is listed in
docs/fidelity/appworld.md ("The baselines' prompts"). A hook's `prompt_framing` names
one; a framing applies to ACE's prompt only (a template without ACE's playbook framing
is used as it is).
"""

from __future__ import annotations

ACE_FRAMING = (
    "You are also provided with a curated playbook of strategies, API-specific "
    "information, common mistakes, and proven solutions to help you solve the task "
    "effectively.\n\n"
    "**Playbook**: - Read the **Playbook** first, then execute the task by explicitly "
    "leveraging each relevant section:\n"
    "### PLAYBOOK BEGIN\n{{ playbook }}\n### PLAYBOOK END"
)
ACE_CLOSING = "Using these APIs and playbook, generate code to solve the actual task:"
PORT_CLOSING = "Using these APIs and past experiences, generate code to solve the actual task:"

FRAMINGS: dict[str, str] = {
    "reasoning_bank": (
        "Below are memory items gathered from past interactions with this environment; "
        "they may help with the task, so use them where they are relevant. Begin by "
        "saying in one sentence which memory items you will use and why, then solve the "
        "task.\n\n"
        "### MEMORY ITEMS BEGIN\n{{ playbook }}\n### MEMORY ITEMS END"
    ),
    "memp": (
        "Relevant past experience retrieved from memory is given below. Read it "
        "carefully before you solve the task.\n\n"
        "**Retrieved memory (past experience with similar tasks)**:\n"
        "### MEMORY BEGIN\n{{ playbook }}\n### MEMORY END\n\n"
        "**How to use the memory above**:\n"
        "- [SUCCESS] memories: follow the approach and patterns they describe.\n"
        "- [FAILURE] memories: they show what went wrong in a past attempt. Learn from "
        "the mistakes they describe, but do NOT repeat the failed steps: take another "
        "approach."
    ),
}


def framed(template_text: str, framing: str | None) -> str:
    """`template_text` with ACE's playbook framing replaced by `framing`'s (its memory
    still in the ``{{ playbook }}`` slot); unchanged for None or a template without
    ACE's framing. An unknown name is refused."""
    if framing is None:
        return template_text
    if framing not in FRAMINGS:
        raise ValueError(f"unknown AppWorld memory framing {framing!r}; known: {sorted(FRAMINGS)}")
    if ACE_FRAMING not in template_text:
        return template_text
    return template_text.replace(ACE_FRAMING, FRAMINGS[framing]).replace(ACE_CLOSING, PORT_CLOSING)
