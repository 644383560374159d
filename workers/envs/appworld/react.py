"""The AMD authors' text-ReAct harness for AppWorld, as its pieces (no I/O, no model).

The reference is ACE's fork of AppWorld's agent (ace-agent/ace-appworld,
`experiments/code/ace/evaluation_react.py`, Apache-2.0) as the AMD authors ran it
(taeilkim2465/agentic_memory_distillation, `appworld/*/experiments/code/ace/
evaluation_react.py` and the student configs next to it). Each function here is one
behaviour of that loop, cited where it is defined; the adapter (`adapter.py`) wires them
into distillery's episode loop and `tests/workers/envs/appworld/test_agreement.py`
plays scripted students through both and compares them request by request.

- The prompt is a Jinja2 template whose text is a conversation: ``USER:``,
  ``ASSISTANT:`` and ``SYSTEM:`` lines open its messages (`text_to_messages`). Memory
  goes into the template's memory slot (ACE's ``{{ playbook }}``, the authors' ports'
  ``{{ memories }}`` / ``{{ memory_context }}``).
- A reply's action is its first ```` ```python ```` block; an unclosed last fence is
  code too; a reply without code is an execution of no code (AppWorld answers "No code
  available to execute.") and the episode goes on (`extract_code`).
- The reply is kept in the history cut after that first block, an unclosed fence
  closed, plus a blank line (`kept_reply`).
- The output goes back as a user message ``Output:`` in a fence, cut at 20,000
  characters (`output_message`).
- Before each request the oldest step pairs after the opening are dropped until the
  conversation fits the student's context (`trim_to_budget`, the trim named
  `drop_oldest_steps`: the authors' ReasoningBank copy of the loop, and AppWorld's
  default). The authors' MemP and SASM students trimmed otherwise: old outputs blanked
  first, then messages dropped behind a marker (`blank_then_trim`, chosen by those
  ports' catalog entries, with their own buffers).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

# evaluation_react.py `full_code_regex` / `partial_code_regex` (ignore_multiple_calls:
# true in every config of the authors: the first complete block is the action).
FULL_CODE = re.compile(r"```python\n(.*?)```", re.DOTALL)
PARTIAL_CODE = re.compile(r".*```python\n(.*)", re.DOTALL)
# evaluation_react.py `truncate_output`.
OUTPUT_CHARS = 20_000
OUTPUT_CUT_NOTE = "\n[REST NOT SHOWN FOR BREVITY]"
# The authors' student configs: `max_output_tokens` 2048 (the reply's own room) and
# `context_buffer` 256 below `max_model_len` (appworld/rb/experiments/configs/
# ACE_offline_no_GT_evaluation_qwen3_4b_student.jsonnet; evaluation_react.py
# `_exceeds_context_limit`). The reply's room is the model's max_tokens here.
CONTEXT_BUFFER = 256
# The names of the two trims (AgentConventions.context_trim): AppWorld's own, and the one
# the MemP and SASM ports' students used (`blank_then_trim`).
DROP_OLDEST_STEPS = "drop_oldest_steps"
BLANK_THEN_TRIM = "blank_then_trim"
# `blank_then_trim`'s pieces, as the MemP port's student (appworld/memp/experiments/code/
# ace/memp_student_react.py `trimmed_messages`, lines 322-352) and the SASM port's
# (appworld/sasm/experiments/code/ace/sasm_react_base.py lines 142-171) have them, both
# on top of ACE's own `trimmed_messages` (ace-appworld experiments/code/ace/
# evaluation_react.py lines 165-203, which trims at 400,000 characters only):
# an output as it is blanked (memp_student_react.py:336, sasm_react_base.py:156),
BLANKED_OUTPUT = "Output:\n```\n[NOT SHOWN FOR BREVITY]```\n\n"
# what a blanked message is: a user message that starts so (line 335 / 155),
OUTPUT_PREFIX = "Output:"
# outputs are blanked only while the scan starts before the last 5 messages (333 / 153),
UNBLANKED_TAIL = 5
# the marker the task's message gets once a message is dropped (344-345 / 164-165),
TRIMMED_MARKER = "[TRIMMED HISTORY]\n\n"
# and the history's character cap (`max_output_length`, default 400,000 at
# memp_student_react.py:32 and sasm_evaluation_react.py:47; no config of theirs sets
# it), counted over the history as text after the task's "Task: " (327-329 / 147-149).
HISTORY_CHARS = 400_000
TASK_MARK = "Task: "
_ROLE_HEADERS = {"system": "SYSTEM:\n", "assistant": "ASSISTANT:\n", "user": "USER:\n"}
# The template variables that hold memory in the authors' prompts: ACE's generator
# prompt (`playbook`), the authors' ReasoningBank and MemP ports (`memories`,
# `memory_context`).
MEMORY_SLOTS = ("playbook", "memories", "memory_context")
_ROLE = re.compile("(USER|ASSISTANT|SYSTEM):\n", re.IGNORECASE)


def extract_code(text: str | None) -> tuple[str, str]:
    """(code, the reply as kept), as `extract_code_and_fix_content` with
    ignore_multiple_calls: the first complete ```` ```python ```` block (stripped), the
    reply cut right after it; else the code after the last ```` ```python ```` with no
    closing fence, the reply closed with one; else no code ("") and the reply as is."""
    if text is None:
        return "", ""
    first = FULL_CODE.search(text)
    if first is not None:
        return first.group(1).strip(), text[: first.end()]
    partial = PARTIAL_CODE.match(text)
    if partial is None:
        return "", text
    kept = text if text.endswith("\n") else text + "\n"
    return partial.group(1).strip(), kept + "```"


def kept_reply(text: str) -> str:
    """The assistant message the history keeps (`fixed_output_content + "\\n\\n"`)."""
    return extract_code(text)[1] + "\n\n"


def cut_output(content: str) -> str:
    """evaluation_react.py `truncate_output`: over 20,000 characters, the first 20,000
    and a note."""
    if len(content) > OUTPUT_CHARS:
        return content[:OUTPUT_CHARS] + OUTPUT_CUT_NOTE
    return content


def output_message(content: str) -> dict[str, str]:
    """An execution's output as the next user message (`next_execution_inputs_and_cost`)."""
    return {"role": "user", "content": "Output:\n```\n" + cut_output(content) + "```\n\n"}


def text_to_messages(text: str) -> list[dict[str, str]]:
    """evaluation_react.py `text_to_messages`: the rendered prompt split at its
    ``ROLE:`` lines; text before the first one is refused, as theirs refuses it."""
    messages: list[dict[str, str]] = []
    last_start = 0
    for match in _ROLE.finditer(text):
        start = match.span()[0]
        if not messages:
            if start != 0:
                raise ValueError(
                    f"the prompt's start has no role (USER:, ASSISTANT: or SYSTEM: on a line "
                    f"of its own): {text[:start][:200]!r}"
                )
        else:
            messages[-1]["content"] = text[last_start:start]
        messages.append({"role": match.group(1).lower(), "content": ""})
        last_start = match.span()[1]
    if not messages:
        raise ValueError("the prompt has no USER:, ASSISTANT: or SYSTEM: line")
    messages[-1]["content"] = text[last_start:]
    return messages


def app_descriptions_json(descriptions: Mapping[str, str]) -> str:
    """evaluation_react.py `initialize`: the task's apps as the prompt lists them."""
    return json.dumps([{"name": k, "description": v} for k, v in descriptions.items()], indent=1)


@dataclass(frozen=True)
class PromptTemplate:
    """The authors' generator prompt (a Jinja2 template of a conversation), read once."""

    text: str  # as read (`read_file(...).lstrip()`)
    source: str  # where it was read from, for messages

    @classmethod
    def read(cls, path: str | Path) -> PromptTemplate:
        file = Path(path).expanduser()
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"cannot read the prompt file {str(file)!r}: {exc.strerror}") from None
        template = cls(text.lstrip(), str(file))
        template.check()
        return template

    @property
    def digest(self) -> str:
        """What the prompt is (its text), not where it lives: the episode identity's."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    @cached_property
    def _compiled(self) -> Any:
        from jinja2 import Template

        return Template(self.text)

    @cached_property
    def memory_slots(self) -> tuple[str, ...]:
        """The memory variables the template uses (none: memory opens its first message)."""
        from jinja2 import Environment, meta

        used = meta.find_undeclared_variables(Environment().parse(self.text))
        return tuple(slot for slot in MEMORY_SLOTS if slot in used)

    def check(self) -> None:
        """A template that cannot be rendered or split into messages is refused now."""
        try:
            self._compiled  # noqa: B018 (compiles it)
        except Exception as exc:  # jinja2's TemplateSyntaxError and kin
            raise ValueError(
                f"the prompt file {self.source!r} is no Jinja2 template: {exc}"
            ) from None
        if not _ROLE.match(self.text):
            raise ValueError(
                f"the prompt file {self.source!r} must start with a role line (USER:, "
                "ASSISTANT: or SYSTEM:), as AppWorld's ReAct prompts do"
            )

    def messages(self, variables: Mapping[str, Any], memory: str) -> list[dict[str, str]]:
        """The opening messages of one task (`initialize`): the template rendered with
        the task's variables and `memory` in its memory slot, plus a blank line, split
        at its role lines. Without a slot, non-empty memory opens the first message."""
        params = {**variables, **dict.fromkeys(self.memory_slots, memory)}
        rendered = self._compiled.render(params) + "\n\n"
        messages = text_to_messages(rendered)
        if memory and not self.memory_slots:
            messages[0]["content"] = f"{memory}\n\n{messages[0]['content']}"
        return messages


async def trim_to_budget(
    messages: Sequence[dict[str, Any]],
    opening: int,
    fits: Callable[[list[dict[str, Any]]], Awaitable[bool]],
) -> tuple[list[dict[str, Any]], int]:
    """(the messages sent, step pairs dropped): the AMD authors' `trimmed_messages`
    (appworld/rb/experiments/code/ace/evaluation_react.py): while the conversation
    does not fit and steps remain, drop the oldest assistant reply and its output after
    the opening's last message (the task). Dropping more always shortens it, so the
    fewest pairs that fit are found by bisection: the same result in O(log n) counts."""
    head = list(messages[:opening])
    steps = list(messages[opening:])
    pairs = len(steps) // 2

    def dropped(n: int) -> list[dict[str, Any]]:
        return head + steps[2 * n :]

    if pairs == 0 or await fits(dropped(0)):
        return list(messages), 0
    if not await fits(dropped(pairs)):
        # Nothing left to drop fits either: theirs sends it all the same (the server
        # refuses it: a context overflow, the model's failure).
        return dropped(pairs), pairs
    low, high = 0, pairs  # dropped(low) does not fit, dropped(high) does
    while high - low > 1:
        middle = (low + high) // 2
        if await fits(dropped(middle)):
            high = middle
        else:
            low = middle
    return dropped(high), high


def history_chars(post: Sequence[dict[str, Any]]) -> int:
    """The history's length as the MemP and SASM students measure it against
    `HISTORY_CHARS`: the messages from the task's on as ``ROLE:`` text (a role other
    than system, assistant or user counts nothing, as theirs), less everything up to
    and including the first "Task: " (theirs stops without one; ours counts it all)."""
    text = "".join(
        _ROLE_HEADERS[m.get("role", "")] + str(m.get("content") or "")
        for m in post
        if m.get("role") in _ROLE_HEADERS
    )
    mark = text.find(TASK_MARK)
    return len(text) - (mark + len(TASK_MARK) if mark >= 0 else 0)


def _is_output(message: Mapping[str, Any]) -> bool:
    return message.get("role") == "user" and str(message.get("content") or "").startswith(
        OUTPUT_PREFIX
    )


async def blank_then_trim(
    messages: Sequence[dict[str, Any]],
    opening: int,
    fits: Callable[[list[dict[str, Any]]], Awaitable[bool]],
    max_chars: int = HISTORY_CHARS,
) -> tuple[list[dict[str, Any]], str]:
    """(the messages sent, what was left out): the MemP and SASM ports' students'
    trim (see the constants above). The history is the task's message (the opening's
    last) and everything after it; while the conversation does not fit or the
    history is over `max_chars`, one piece goes, in this order:

    1. blanking: from where the last blanking stopped, the next output (a user message
       starting "Output:") becomes `BLANKED_OUTPUT`, for as long as that scan starts
       before the history's last 5 messages and finds one;
    2. then trimming: the message after the task's goes, whole, and the task's message
       ends with `TRIMMED_MARKER` (once).

    Every state is counted in turn, as theirs counts it (a blanked short output can be
    longer than it was, so the first state that fits is found by walking, not by
    bisection). Ours: when only the task's message is left and it still does not fit,
    it is sent as it is (theirs loops for ever there). The history is copied; `messages`
    is not changed."""
    head = list(messages[: max(opening - 1, 0)])
    post = [dict(m) for m in messages[len(head) :]]

    async def over(history: list[dict[str, Any]]) -> bool:
        return history_chars(history) > max_chars or not await fits(head + history)

    scan, blanked, dropped = 0, 0, 0
    while len(post) > 1 and await over(post):
        if scan < len(post) - UNBLANKED_TAIL:
            found = next((i for i in range(scan, len(post)) if _is_output(post[i])), None)
            if found is not None:
                post[found] = {**post[found], "content": BLANKED_OUTPUT}
                scan, blanked = found + 1, blanked + 1
                continue
            scan = len(post)  # nothing left to blank: trimming from now on
        task = post[0]
        if not str(task.get("content") or "").endswith(TRIMMED_MARKER):
            task = {**task, "content": str(task.get("content") or "") + TRIMMED_MARKER}
        post = [task, *post[2:]]
        dropped += 1
    if not blanked and not dropped:
        return list(messages), ""
    said = [f"blanked its {blanked} oldest outputs"] if blanked else []
    said += [f"left out its {dropped} oldest messages"] if dropped else []
    return head + post, " and ".join(said)
