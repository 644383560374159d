"""The AMD authors' default SASM student on AppWorld, as episode hooks: the experience of
the subtask the student says it is in, moved at each transition it announces.

Their `SASMEvaluationReActAgent` (appworld/sasm/experiments/code/ace/
sasm_evaluation_react.py, run by sasm_run_student_qwen3_4b.sh through
SASM_evaluation_qwen3_4b_student.jsonnet and the Gemma config) prompts the student with
sasm_generator_prompt.txt, which asks it to announce each move to another subtask in a
`<subtask_transition>{"next_z": ..., "next_d": ...}</subtask_transition>` tag before
its code (rendered here as the `sasm_transition` framing, workers/envs/appworld/
framings.py). What the hooks do, as theirs:

- at the task's start, a transition to `explore` described by the instruction's first
  100 characters (line 105);
- after every reply, the first tag of the reply as the history keeps it (theirs reads
  the reply cut after its first code block) is read: its content parsed as JSON (whole,
  a ```json block, else the first object in it), `next_z` one of the five categories,
  `next_d` (default: the instruction's first 100 characters); anything else is ignored
  (lines 111-123);
- a transition to the current category changes nothing; to another, the experience
  message shown (if any) is taken out of the history and the new category's top
  experience for `next_d` (category-gated, `SASMMemoryBank.retrieve`) is put right
  after the reply, as a user message of its own; nothing found: none is shown until
  the next transition (lines 125-142);
- with `repeat_warning`, the repeated-code warning (memory/repeats.py; both students).

What differs: the message's wording (`TRANSITION_MESSAGE`; theirs: "[SASM Retrieved
Experience]" ... "[End of SASM Experience]") and the warning's; each experience is ours
(the bank's `[Subtask experience]` entries, built by this project's builder); a reply
whose tag holds a `next_d` that is not a string is ignored (theirs fails inside its
retrieval after taking the shown experience out, and keeps the category); the
retrieval's audit (self-exclusion, category) is ours.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

from distillery.workers.agents.hook_messages import HookMessage, StepMessages
from distillery.workers.envs.base import ToolResult
from distillery.workers.memory.sasm.hooks import SasmHooks
from distillery.workers.memory.sasm.records import CATEGORIES, COLLECTION

# The experience message (theirs: line 36, a header, the category, the experience and an
# end line; our wording). It starts with SASM's block marker, so text built into the
# bank cannot forge one (memory/bounds.py, `SasmMethod.memory_delimiters`).
TRANSITION_MESSAGE = (
    "[Subtask experience]\nCategory: {category}\n{experience}\n[End of subtask experience]\n\n"
)
TRANSITION = re.compile(r"<subtask_transition>(.*?)</subtask_transition>", re.DOTALL | re.I)
DESCRIPTION_CHARS = 100  # the instruction's first characters describe `explore` (line 105)


def first_json(text: str) -> Any:
    """The JSON value in `text` as ACE's `extract_json_from_text` finds it: the whole
    text, else the first parsable ```json block, else the first parsable object."""
    try:
        return json.loads(text.strip())
    except json.JSONDecodeError:
        pass
    for block in re.findall(r"```json\s*(.*?)\s*```", text, re.DOTALL | re.IGNORECASE):
        try:
            return json.loads(block.strip())
        except json.JSONDecodeError:
            continue
    decoder = json.JSONDecoder()
    for start in (i for i, c in enumerate(text) if c == "{"):
        try:
            return decoder.raw_decode(text, start)[0]
        except json.JSONDecodeError:
            continue
    return None


def parse_transition(reply: str, default_description: str) -> tuple[str, str] | None:
    """(next_z, next_d) the reply announces, or None (no tag, or one to ignore)."""
    match = TRANSITION.search(reply or "")
    if match is None:
        return None
    value = first_json(match.group(1).strip())
    if not isinstance(value, dict) or not value:
        return None
    category = value.get("next_z", "")
    description = value.get("next_d", default_description)
    if category not in CATEGORIES or not isinstance(description, str):
        return None
    return category, description


class SasmTransitionHooks(SasmHooks):
    """EpisodeHooks (and MemoryHooks) of the transition student: no decomposition, one
    category's experience in the history at a time (`step_messages`)."""

    prompt_framing: ClassVar[str] = "sasm_transition"

    def __init__(
        self, task_id: str, instruction: str, search: Any, settings: Any, allows: Any
    ) -> None:
        super().__init__(task_id, search, settings, allows, None)
        self.description = instruction[:DESCRIPTION_CHARS]
        self.category: str | None = None
        self.shown: str | None = None  # the key of the experience message in the history
        self.transitions: list[dict[str, Any]] = []

    def record(self) -> dict[str, Any]:
        return {**super().record(), "transitions": self.transitions}

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        return system_prompt  # nothing decomposed, nothing in the prompt

    async def step_messages(
        self, turn_index: int, steps_done: int, reply: str | None, observations: list[ToolResult]
    ) -> StepMessages | None:
        if reply is None:  # a turn's start: the task starts in `explore`
            if turn_index != 0:
                return None
            return await self._transition(turn_index, 0, "explore", self.description)
        found = parse_transition(reply, self.description)
        moved = await self._transition(turn_index, steps_done, *found) if found else None
        warned = await super().step_messages(turn_index, steps_done, reply, observations)
        if moved is None or warned is None:
            return moved or warned
        return StepMessages(moved.after_reply, warned.appended, moved.withdrawn)

    async def _transition(
        self, turn: int, steps_done: int, category: str, description: str
    ) -> StepMessages | None:
        event: dict[str, Any] = {"turn": turn, "step": steps_done - 1, "z": category}
        self.transitions.append({**event, "d": description, "from": self.category})
        if category == self.category:
            self.transitions[-1]["moved"] = False
            return None
        withdrawn = (self.shown,) if self.shown else ()
        (hits,) = await self.search.search(
            COLLECTION, [description], self.task_id, self.settings.k, self.settings.threshold,
            group=category,
        )  # fmt: skip
        entries = [hit.entry for hit in hits if self._audit(turn, category, hit)]
        self.category, self.shown = category, None
        self.transitions[-1].update(moved=True, shown=len(entries))
        if not entries:
            return StepMessages(withdrawn=withdrawn)
        text = TRANSITION_MESSAGE.format(
            category=category, experience="\n\n".join(e.experience for e in entries)
        )
        self.shown = f"sasm-experience-{len(self.transitions)}"
        return StepMessages(after_reply=(HookMessage(self.shown, text),), withdrawn=withdrawn)
