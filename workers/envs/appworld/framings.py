"""The AMD authors' baseline ports' AppWorld prompts, rendered from ACE's shipped one.

Each port of taeilkim2465/agentic_memory_distillation gave its AppWorld student its own
copy of ACE's generator prompt, edited. That repository carries no licence, so its
files are not shipped; ACE's prompt is (Apache-2.0, `prompts/`). Each port is rendered
here as the list of edits that turns ACE's prompt into the port's (`PortPrompt`):

- an edit that only takes ACE's text away (a worked example, a clause about the
  playbook, a trailing space) is exact: the rendered text is the port's there;
- an edit that adds the port's own text (its memory framing, a rule) is in this
  project's wording (`ours=True`): same place, same block structure, same instruction.

The memory stays in ACE's slot (``{{ playbook }}``) wherever the port put its own
(``{{ memories }}``, ``{{ memory_context }}``, ``{{ sasm_experiences }}``), so every
method's memory is where its port placed it; the SASM port's default student's prompt
(`sasm_transition`) has no slot: its hooks send the experience as a message of its own. `tests/workers/envs/appworld/
test_port_prompts.py` checks, line by line against the authors' files (when a checkout
is at hand: $DISTILLERY_AMD_REPO), that the rendering differs from a port's file only
in our-wording lines; docs/fidelity/appworld.md ("The baselines' prompts") lists what
still differs. A hook's `prompt_framing` names a port; a port applies to ACE's prompt
only (a template without ACE's playbook framing is used as it is).
"""

from __future__ import annotations

from dataclasses import dataclass

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
REPO = "taeilkim2465/agentic_memory_distillation"


@dataclass(frozen=True)
class Edit:
    """ACE's text `old` (found exactly once) becomes `new`; `ours`: `new` holds our
    wording of the port's own text (else it is ACE's text, less what the port cut)."""

    old: str
    new: str
    ours: bool = False


@dataclass(frozen=True)
class PortPrompt:
    """One port's AppWorld generator prompt: ACE's with `edits` applied in order."""

    name: str
    source: str  # the authors' file (repository path) it renders
    edits: tuple[Edit, ...]

    def render(self, ace_text: str) -> str:
        text = ace_text
        for edit in self.edits:
            found = text.count(edit.old)
            if found != 1:
                raise ValueError(
                    f"the {self.name} port's prompt cannot be rendered: ACE's text "
                    f"{edit.old[:60]!r} occurs {found} times in the prompt, not once"
                )
            text = text.replace(edit.old, edit.new)
        return text

    def our_lines(self) -> tuple[str, ...]:
        """Our wording, line by line (non-empty; a part of a line where an edit ends
        inside one): the only text that may differ from the port's file."""
        return tuple(
            line for e in self.edits if e.ours for line in e.new.splitlines() if line.strip()
        )


# -- the worked example's playbook mentions, as the MemP and SASM ports cut them -------

_CREDENTIALS = (
    "Excellent! I can use `show_account_passwords` to get the Spotify credentials. "
    "Following the playbook guidance about getting missing information from the right "
    "source first, let me retrieve them now."
)
_PAGINATION = (
    "Perfect! I can see the API uses pagination with `page_index`. Following the "
    "playbook guidance about pagination - using while True loop instead of fixed range "
    "to ensure I get all pages - let me implement this properly."
)
_VERIFIED = (
    "Perfect! I successfully counted all playlists across all pages. Following the "
    "playbook verification approach: I used the correct APIs, handled pagination "
    "properly, and got the exact count requested. The task is now complete - I found 23 "
    "playlists total. Let me submit this result."
)
_OPENING_SPACE = Edit("to solve the task. \n", "to solve the task.\n")
_SECOND_EXAMPLE_START = "USER: Now here is another task in a different environment."
_KEY_INSTRUCTIONS = "\nUSER:\n**Key instructions**"
# The end of key instruction (8) and the four blank lines before the closing message.
_RULE_8_END = "just call apis.supervisor.complete_task() i.e. do not pass any argument.\n"
_BEFORE_CLOSING = "\n\n\n\nUSER:\n"


def _second_example(ace_text: str) -> str:
    """ACE's second and third worked examples (the most-liked song, the movie
    recommendations), exactly as they stand in `ace_text`: what the MemP and SASM ports
    cut, from the second's opening user line to the separator before the key
    instructions."""
    start = ace_text.find(_SECOND_EXAMPLE_START)
    end = ace_text.find(_KEY_INSTRUCTIONS, start)
    if start < 0 or end < 0:
        return _SECOND_EXAMPLE_START  # not ACE's prompt: rendering refuses it
    return ace_text[start:end]


# -- the ports ------------------------------------------------------------------------

REASONING_BANK = PortPrompt(
    "reasoning_bank",
    f"{REPO} appworld/rb/experiments/prompts/appworld_react_generator_prompt.txt",
    (
        # lines 28-32: memory items from past interaction, named in one sentence first.
        Edit(
            ACE_FRAMING,
            "Below are memory items gathered from past interactions with this "
            "environment; they may help with the task, so use them where they are "
            "relevant. Begin by saying in one sentence which memory items you will use "
            "and why, then solve the task.\n\n"
            "### MEMORY ITEMS BEGIN\n{{ playbook }}\n### MEMORY ITEMS END",
            ours=True,
        ),
        # line 948: key instruction (1) also asks for the ```python fence.
        Edit(
            "(1) Make sure to end code blocks with ``` followed by a newline(\\n).",
            "(1) Always put code in ```python ... ``` blocks (the word python right after "
            "the opening backticks). Make sure to end code blocks with ``` followed by a "
            "newline(\\n).",
            ours=True,
        ),
        # line 968.
        Edit(ACE_CLOSING, PORT_CLOSING, ours=True),
    ),
)

_MEMP_AND_SASM_EXAMPLE = (
    _OPENING_SPACE,
    Edit(_CREDENTIALS, _CREDENTIALS.split(" Following")[0] + " Let me retrieve them now."),
    Edit(
        _PAGINATION,
        "Perfect! I can see the API uses pagination with `page_index`. I'll use a while "
        "True loop to get all pages properly.",
        ours=True,
    ),
    Edit(
        _VERIFIED,
        "Perfect! I successfully counted all playlists across all pages. The task is now "
        "complete - I found 23 playlists total.",
    ),
)


def _memp_edits(ace_text: str) -> tuple[Edit, ...]:
    return (
        # lines 28-37: retrieved memory, then how to read SUCCESS and FAILURE memories.
        Edit(
            ACE_FRAMING,
            "You are given relevant past experience retrieved from memory. Read it "
            "carefully before you solve the task.\n\n"
            "**Retrieved Memory (past experience with similar tasks)**:\n"
            "### MEMORY BEGIN\n{{ playbook }}\n### MEMORY END\n\n"
            "**How to use the memory above**:\n"
            "- [SUCCESS] memories: follow the approach and patterns they describe.\n"
            "- [FAILURE] memories: they show what went wrong in a past attempt. Learn from "
            "the mistakes they describe, but do NOT repeat the failed steps: take another "
            "approach to get past the problem.",
            ours=True,
        ),
        *_MEMP_AND_SASM_EXAMPLE,
        Edit(_second_example(ace_text), ""),
        # line 272: key instruction (7) names the while True loop.
        Edit(
            "looping over `page_index`.\n",
            "looping over `page_index` with a while True loop.\n",
            ours=True,
        ),
        # line 276: a ninth key instruction.
        Edit(
            _RULE_8_END + _BEFORE_CLOSING,
            _RULE_8_END + "\n(9) Use the Retrieved Memory above where it is relevant: it "
            "holds experience distilled from similar past tasks.\n\n\nUSER:\n",
            ours=True,
        ),
        # line 280.
        Edit(
            ACE_CLOSING,
            "Using these APIs and the retrieved memory, generate code to solve the actual task:",
            ours=True,
        ),
    )


def _sasm_edits(ace_text: str) -> tuple[Edit, ...]:
    return (
        # No memory framing at the top (the experiences follow the key instructions).
        Edit(ACE_FRAMING + "\n\n", ""),
        _OPENING_SPACE,
        # The worked example's shortened lines and compact API doc (lines 128-220).
        Edit(_CREDENTIALS, _CREDENTIALS.split(" Following")[0]),
        Edit(" Let me save the token first.", ""),
        Edit(
            ' "description": "Get a list of playlists in the user\'s playlist library.",\n',
            "",
        ),
        Edit(
            '  {\n   "name": "access_token",\n   "type": "string",\n   "required": true,\n'
            '   "description": "Access token obtained from spotify app login."\n  },\n'
            '  {\n   "name": "page_index",\n   "type": "integer",\n   "required": false,\n'
            '   "description": "The index of the page to retrieve.",\n   "default": 0\n  }\n'
            "  // ... [other parameters omitted for brevity]\n",
            '  {"name": "access_token", "required": true},\n'
            '  {"name": "page_index", "required": false, "default": 0}\n',
            ours=True,
        ),
        Edit(_PAGINATION, "The API uses pagination. A while True loop gets every page.", ours=True),
        Edit(_VERIFIED, "I found 23 playlists total."),
        Edit(_second_example(ace_text), ""),
        Edit(" (e.g. spotify_password)", ""),
        # lines 251-258: the experiences after the key instructions, when there are any.
        Edit(
            _RULE_8_END + _BEFORE_CLOSING,
            _RULE_8_END + "{% if playbook %}\n\n## Past Experience References\n"
            "Experiences from similar past tasks follow, to guide your approach.\n"
            "Use the patterns and strategies that fit, adapted to this task rather than "
            "copied as they are.\n\n{{ playbook }}\n{% endif %}\n\nUSER:\n",
            ours=True,
        ),
        # line 261.
        Edit(ACE_CLOSING, "Using these APIs, generate code to solve the actual task:"),
    )


# The transition student's section after key instruction (8) (lines 252-265): the five
# categories, and the tag that announces the next subtask (its name and JSON keys are
# the protocol the hooks read: workers/memory/sasm/transition.py).
SUBTASK_TRACKING = (
    "## Tracking your subtasks\n\n"
    "You work through a task one subtask at a time, and at every step you are in exactly "
    "one of these:\n"
    "- **explore**: reading API docs, finding out which apps and APIs there are\n"
    "- **authenticate**: getting credentials from the supervisor app, logging in, "
    "keeping access tokens\n"
    "- **query**: reading or looking up data through the APIs (search, list, show)\n"
    "- **execute**: actions that change state (send, create, update, delete, pay)\n"
    "- **verify**: calling complete_task() and submitting the final answer\n\n"
    "When a subtask is done and you move on to the next one, write this signal "
    "**before** your code block:\n\n"
    '<subtask_transition>{"next_z": "<category>", "next_d": "<one sentence on what '
    'the next subtask will do>"}</subtask_transition>\n\n'
    "Write the signal only when you move to another subtask, not at every step."
)


def _sasm_transition_edits(ace_text: str) -> tuple[Edit, ...]:
    """The port's default student's prompt (sasm_generator_prompt.txt): the upfront
    student's, with no memory slot and the subtask-tracking section after the key
    instructions (its experience comes as a message of its own, after the task)."""
    *shared, _experiences, closing = _sasm_edits(ace_text)
    return (
        *shared,
        Edit(
            _RULE_8_END + _BEFORE_CLOSING,
            _RULE_8_END + "\n" + SUBTASK_TRACKING + "\n\n\nUSER:\n",
            ours=True,
        ),
        closing,
    )


def port_prompt(name: str, ace_text: str) -> PortPrompt:
    """The port `name` as edits of `ace_text` (ACE's prompt). Unknown names are refused."""
    if name == "reasoning_bank":
        return REASONING_BANK
    if name == "memp":
        return PortPrompt(
            "memp",
            f"{REPO} appworld/memp/experiments/prompts/memp_generator_prompt.txt",
            _memp_edits(ace_text),
        )
    if name == "sasm":
        return PortPrompt(
            "sasm",
            f"{REPO} appworld/sasm/experiments/prompts/sasm_upfront_generator_prompt.txt",
            _sasm_edits(ace_text),
        )
    if name == "sasm_transition":
        return PortPrompt(
            "sasm_transition",
            f"{REPO} appworld/sasm/experiments/prompts/sasm_generator_prompt.txt",
            _sasm_transition_edits(ace_text),
        )
    raise ValueError(f"unknown AppWorld memory framing {name!r}; known: {sorted(PORTS)}")


PORTS = ("memp", "reasoning_bank", "sasm", "sasm_transition")


def framed(template_text: str, framing: str | None) -> str:
    """`template_text` as the port `framing` edited ACE's prompt (its memory in the
    ``{{ playbook }}`` slot, where the port put its own); unchanged for None or a
    template without ACE's framing. An unknown name is refused."""
    if framing is None:
        return template_text
    port = port_prompt(framing, template_text)
    if ACE_FRAMING not in template_text:
        return template_text
    return port.render(template_text)
