"""AppWorld's two context trims: the default (drop the oldest steps: the authors'
ReasoningBank copy of ACE's loop) and the MemP and SASM ports' students' `blank_then_trim`
(old outputs blanked to ``[NOT SHOWN FOR BREVITY]`` first, then messages dropped behind a
``[TRIMMED HISTORY]`` marker, under the port's own buffer), chosen per episode by a
memory method's hooks (`context_choice`)."""

from __future__ import annotations

import asyncio
import copy
import random
from typing import Any

import pytest

from distillery.workers.agents.context import request_view
from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.envs.appworld import react
from distillery.workers.envs.appworld.adapter import AppWorld
from distillery.workers.envs.base import ParsedAction, Score, Task, ToolCall, ToolResult
from distillery.workers.envs.conventions import AgentConventions, ContextChoice, conventions_of
from distillery.workers.llm.types import ChatResult

TASK = "USER:\n...\nTask: Send my roommates the bill.\n\n"


def _history(steps: int, rng: random.Random, hints: bool = True) -> list[dict[str, Any]]:
    """An AppWorld conversation as the loop keeps it: a worked demonstration (two
    messages), the task's message, then per step the reply (code) and its output, now
    and then a hook's message (a loop hint) after the output."""
    out: list[dict[str, Any]] = [
        {"role": "user", "content": "Example task " + "d" * 300, "name": "benchmark_prompt"},
        {
            "role": "assistant",
            "content": "```python\nprint(1)\n```\n\n",
            "name": "benchmark_prompt",
        },
        {"role": "user", "content": TASK},
    ]
    for i in range(steps):
        out.append({"role": "assistant", "content": f"Step {i}\n```python\nx = {i}\n```\n\n"})
        size = rng.choice([5, 40, 600, 2500])  # short outputs too: shorter than a blank
        out.append(
            {
                "role": "user",
                "name": "tool_results",
                "content": "Output:\n```\n" + "o" * size + "```\n\n",
            }
        )
        if hints and rng.random() < 0.2:
            out.append({"role": "user", "name": "hook_message", "content": "Try another way."})
    return out


def _size(messages: list[dict[str, Any]]) -> int:
    return sum(len(m["content"]) for m in messages)


def authors_order(
    messages: list[dict[str, Any]], opening: int, budget: int | None, max_chars: int
) -> list[dict[str, Any]]:
    """The ports' students' trim, re-implemented for the test from their description
    (memp_student_react.py `trimmed_messages`, sasm_react_base.py the same): the history
    (the task's message on) is too long while the whole counts over `budget` or its text
    after "Task: " is over `max_chars`; then the next output at or after the blanking
    cursor is blanked (the cursor moves past it) while the cursor is before the last
    five messages, and once none is left, the message after the task's is dropped and
    the task's message marked. Counted after each piece."""
    messages = copy.deepcopy(messages)
    head, history = messages[: opening - 1], messages[opening - 1 :]

    def too_long() -> bool:
        tokens = budget is not None and _size(head + history) > budget
        return tokens or react.history_chars(history) > max_chars

    cursor = 0
    while too_long() and len(history) > 1:
        blanked = False
        if cursor < len(history) - 5:
            for at in range(cursor, len(history)):
                message = history[at]
                if message["role"] == "user" and message["content"].startswith("Output:"):
                    message["content"] = "Output:\n```\n[NOT SHOWN FOR BREVITY]```\n\n"
                    cursor, blanked = at + 1, True
                    break
            else:
                cursor = len(history)
        if not blanked:
            task = dict(history[0])
            if not task["content"].endswith("[TRIMMED HISTORY]\n\n"):
                task["content"] += "[TRIMMED HISTORY]\n\n"
            history = [task, *history[2:]]
    return head + history


def drop_first_then_blank(
    messages: list[dict[str, Any]], opening: int, budget: int
) -> list[dict[str, Any]]:
    """The reversed order (whole messages dropped before any output is blanked): what
    the order test must tell apart."""
    head, history = messages[: opening - 1], list(messages[opening - 1 :])
    while _size(head + history) > budget and len(history) > 1:
        history = [history[0], *history[2:]]
    return head + history


def _trim(messages, opening, budget, max_chars=react.HISTORY_CHARS):
    async def fits(view):
        return budget is None or _size(view) <= budget

    return asyncio.run(react.blank_then_trim(messages, opening, fits, max_chars))


def test_blank_then_trim_is_the_ports_order_on_random_histories():
    rng = random.Random(42)
    for _ in range(300):
        messages = _history(rng.randint(0, 30), rng)
        budget = rng.choice([None, rng.randint(300, _size(messages) + 100)])
        max_chars = rng.choice([react.HISTORY_CHARS, rng.randint(100, 20_000)])
        before = copy.deepcopy(messages)
        view, said = _trim(messages, 3, budget, max_chars)
        assert view == authors_order(messages, 3, budget, max_chars)
        assert messages == before  # the history itself is never changed
        assert bool(said) == (view != messages)


def test_old_outputs_are_blanked_before_any_message_is_dropped():
    messages = _history(30, random.Random(5), hints=False)
    outputs = [i for i, m in enumerate(messages) if m["content"].startswith("Output:")]
    # Room for the conversation with its first ten outputs blanked, not with five.
    blank = react.BLANKED_OUTPUT
    ten = [dict(m, content=blank) if i in outputs[:10] else m for i, m in enumerate(messages)]
    budget = _size(ten)
    view, said = _trim(messages, 3, budget)
    assert len(view) == len(messages)  # nothing dropped yet
    assert not view[2]["content"].endswith(react.TRIMMED_MARKER)
    blanked = [i for i, m in enumerate(view) if m["content"] == blank]
    assert blanked == outputs[: len(blanked)] and 0 < len(blanked) <= 10  # the oldest first
    assert said == f"blanked its {len(blanked)} oldest outputs"
    # The reversed order drops whole steps and keeps every output: a different view.
    assert drop_first_then_blank(messages, 3, budget) != view


def test_then_whole_messages_go_behind_the_marker_and_the_last_outputs_stay():
    messages = _history(30, random.Random(6), hints=False)
    budget = _size(messages[:3]) + 1_000  # less than the history with every output blanked
    view, said = _trim(messages, 3, budget)
    assert _size(view) <= budget
    assert view[:2] == messages[:2]  # the demonstration is never touched
    assert view[2]["content"] == TASK + react.TRIMMED_MARKER  # marked once
    kept, newest = view[3:], messages[len(messages) - len(view) + 3 :]
    assert 0 < len(kept) < len(messages) - 3  # whole messages went, the oldest
    for mine, theirs in zip(kept, newest, strict=True):
        assert mine == theirs or mine["content"] == react.BLANKED_OUTPUT
    # Outputs were blanked until the scan reached the history's last five messages:
    # the last two outputs are kept as they were.
    assert view[-1] == messages[-1] and view[-3] == messages[-3]
    assert "blanked its" in said and "left out its" in said


def test_the_character_cap_trims_without_a_token_budget():
    rng = random.Random(9)
    messages = _history(25, rng)
    messages += [
        {"role": "assistant", "content": "```python\nprint(big)\n```\n\n"},
        {"role": "user", "content": "Output:\n```\n" + "b" * 19_000 + "```\n\n"},
    ] * 22  # over 400,000 characters of history
    assert react.history_chars(messages[2:]) > react.HISTORY_CHARS
    view, said = _trim(messages, 3, None)
    assert react.history_chars(view[2:]) <= react.HISTORY_CHARS and said


class _Counting:
    def __init__(self, limit: int | None) -> None:
        self.prompt_token_limit = limit

    async def count_tokens(self, messages):
        return _size(messages)


def _view(messages, conventions, limit, notes=None):
    notes = notes if notes is not None else []
    return asyncio.run(request_view(messages, 3, conventions, _Counting(limit), notes))


def test_the_ports_buffer_is_the_budgets():
    messages = _history(30, random.Random(11))
    appworld = conventions_of(AppWorld)
    limit = _size(messages) - 4_000
    memp = appworld.with_context(ContextChoice(react.BLANK_THEN_TRIM, 1536))
    notes: list[str] = []
    view = _view(messages, memp, limit, notes)
    assert view == authors_order(messages, 3, limit - 1536, react.HISTORY_CHARS)
    assert _size(view) <= limit - 1536
    assert notes[-1].endswith(f"to fit {limit - 1536} tokens")
    # The buffer ignored (the benchmark's 256) keeps more: a different view.
    default_buffer = appworld.with_context(ContextChoice(react.BLANK_THEN_TRIM))
    assert default_buffer.context_trim is not None
    assert default_buffer.context_trim.buffer_tokens == react.CONTEXT_BUFFER
    assert _view(messages, default_buffer, limit) != view
    # The benchmark's own trim under the same buffer drops steps, blanks nothing.
    dropped = _view(messages, appworld.with_context(ContextChoice(buffer_tokens=1536)), limit)
    assert react.BLANKED_OUTPUT not in [m["content"] for m in dropped]
    assert len(dropped) < len(messages)


def test_appworld_names_its_trims_and_the_default_is_unchanged():
    appworld = conventions_of(AppWorld)
    trim = appworld.context_trim
    assert trim is not None
    assert trim.names == (react.DROP_OLDEST_STEPS, react.BLANK_THEN_TRIM)
    assert trim.trim is react.trim_to_budget and trim.buffer_tokens == 256
    assert appworld.with_context(None) is appworld
    assert appworld.with_context(ContextChoice()) is appworld
    chosen = appworld.with_context(ContextChoice(react.BLANK_THEN_TRIM, 1536)).context_trim
    assert chosen is not None and chosen.name == react.BLANK_THEN_TRIM
    assert chosen.trim is react.blank_then_trim and chosen.buffer_tokens == 1536
    with pytest.raises(ValueError, match="unknown context trim 'blank_first'"):
        appworld.with_context(ContextChoice("blank_first"))
    with pytest.raises(ValueError, match="does not trim its conversation"):
        AgentConventions().with_context(ContextChoice(react.BLANK_THEN_TRIM))
    with pytest.raises(ValueError, match=">= 0"):
        ContextChoice(react.BLANK_THEN_TRIM, -1)


class _PrintingWorld:
    """One AppWorld-like task whose every execution prints 1,500 characters."""

    task = Task("t", "appworld", ("Print a lot.",), (), ())

    def system_prompt(self, action_format: str) -> str:
        return "You write code."

    def parse_text(self, text: str) -> ParsedAction:
        return ParsedAction(calls=(ToolCall("execute", (), {"code": "print(x)"}, None),))

    def parse_tool_calls(self, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        raise AssertionError("played in the prompt format")

    def step(self, action: ParsedAction) -> list[ToolResult]:
        return [ToolResult(c.source, "p" * 1_500, None, c.name, c.call_id) for c in action.calls]

    def task_done(self) -> bool:
        return False

    def end_turn(self) -> None:
        pass

    def score(self) -> Score:
        return Score(False, "fake:failed")

    def close(self) -> None:
        pass


class _Student:
    """Writes 12 steps of code; the room for a request is 12,000 characters."""

    action_format = "prompt"
    prompt_token_limit = 12_000

    def __init__(self) -> None:
        self.requests: list[list[dict[str, Any]]] = []

    async def respond(self, messages, tools) -> ChatResult:
        self.requests.append(copy.deepcopy(messages))
        return ChatResult(text="```python\nprint(x)\n```")

    async def count_tokens(self, messages):
        return _size(messages)

    async def close(self) -> None:
        pass


class _Port:
    """A memory method's hooks that ask for the MemP and SASM ports' trim."""

    context_choice = ContextChoice(react.BLANK_THEN_TRIM, 1536)

    async def before_turn(self, turn_index, user_text, system_prompt):
        return system_prompt

    async def after_step(self, turn_index, user_text, observations):
        return observations


def _played(hooks) -> _Student:
    student = _Student()
    conventions = conventions_of(AppWorld)
    asyncio.run(run_agent_loop(_PrintingWorld(), student, 12, hooks, conventions=conventions))
    return student


def test_the_loop_trims_as_the_hooks_choose():
    blanked = _played(_Port()).requests
    dropped = _played(None).requests
    assert len(blanked) == len(dropped) == 12
    assert all(_size(r) <= 12_000 - 1536 for r in blanked)
    assert any(m["content"] == react.BLANKED_OUTPUT for m in blanked[-1])
    assert not any(m["content"] == react.BLANKED_OUTPUT for r in dropped for m in r)
    assert max(_size(r) for r in dropped) > 12_000 - 1536  # the benchmark's 256 only
