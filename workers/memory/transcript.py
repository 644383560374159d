"""An episode as a model reads it: the task, then each reply of the agent, its actions
and what the environment answered, cut to a budget.

What the baselines that show an LLM a whole attempt share (Reflexion's reflection on a
failed attempt, ExpeL's critiques and in-context examples, ACE's reflector and
curator). It is read from the episode's transcript as sent to the model
(`messages_json`): an answer benchmark's episode has no step of calls, only its reply.
The system prompt and a benchmark's own opening (AppWorld's few-shot demonstration)
are left out: the transcript starts at the message that holds the task. Each
observation and later user message is cut to `observation_chars`, each reply to four
times that, the whole text to `max_chars` (its head and its tail kept, the cut marked),
so a runaway episode cannot crowd a prompt out; the originals show the whole trajectory
and rely on the model's context (Reflexion's HotPotQA agent truncates its scratchpad,
hotpotqa_runs/agents.py `truncate_scratchpad`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from distillery.workers.trajectories import EpisodeRecord

TASK_LINE = "Task: {text}"
USER_LINE = "User: {text}"
REPLY_LINE = "Assistant: {text}"
ACTION_LINE = "Action: {call}"
OBSERVATION_LINE = "Observation: {text}"
CUT_LINE = "[... {chars} characters of the attempt cut here ...]"
NO_REPLY = "(the agent gave no reply)"

TEXTS = (TASK_LINE, USER_LINE, REPLY_LINE, ACTION_LINE, OBSERVATION_LINE, CUT_LINE, NO_REPLY)


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} chars cut]"


def _text(content: Any) -> str:
    """A message's content as text (a list of parts: their texts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _call(call: Any) -> str:
    function = call.get("function", call) if isinstance(call, dict) else {}
    name = str(function.get("name", "?"))
    arguments = function.get("arguments", "")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"{name}({arguments})"


def messages_of(record: EpisodeRecord) -> list[dict[str, Any]]:
    try:
        messages = json.loads(record.messages_json or "[]")
    except ValueError:
        return []
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def episode_transcript(
    record: EpisodeRecord,
    turns: Sequence[str],
    max_chars: int = 12_000,
    observation_chars: int = 1_000,
) -> str:
    """The episode as text (see the module docstring); `turns`: the task's user
    messages (the first is the task)."""
    messages = [m for m in messages_of(record) if m.get("role") != "system"]
    task = turns[0].strip() if turns else ""
    start = next(
        (i for i, m in enumerate(messages) if task and task in _text(m.get("content"))), None
    )
    lines = [TASK_LINE.format(text=task)]
    replies = 0
    for m in messages[(start + 1) if start is not None else 0 :]:
        role, content = m.get("role"), _text(m.get("content")).strip()
        if role == "assistant":
            replies += 1
            if content:
                lines.append(REPLY_LINE.format(text=_cut(content, 4 * observation_chars)))
            for call in m.get("tool_calls") or []:
                lines.append(ACTION_LINE.format(call=_cut(_call(call), observation_chars)))
        elif role == "tool":
            lines.append(OBSERVATION_LINE.format(text=_cut(content, observation_chars)))
        elif role == "user" and content:
            lines.append(USER_LINE.format(text=_cut(content, observation_chars)))
    if not replies:
        lines.append(NO_REPLY)
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    return "\n".join([text[:head], CUT_LINE.format(chars=len(text) - head - tail), text[-tail:]])


def closing_reply(record: EpisodeRecord) -> str:
    """The agent's last reply when it made no call (an answer benchmark's graded
    answer); empty when its last reply made calls or it gave none."""
    for m in reversed(messages_of(record)):
        if m.get("role") == "assistant":
            return "" if m.get("tool_calls") else _text(m.get("content")).strip()
        if m.get("role") == "tool":
            return ""
    return ""
