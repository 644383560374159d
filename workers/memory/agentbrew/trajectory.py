"""What the teacher reads of a failed play: the task, the student's trajectory (its
messages as sent, the calls it made and what they returned) and the environment's
report, never a reference solution. Bounded (ours: `brew.trajectory_chars`,
`brew.observation_chars`): a long AppWorld episode is cut in its middle, keeping how it
started and how it ended.
"""

from __future__ import annotations

import json
from typing import Any

from distillery.workers.envs.base import Task
from distillery.workers.memory.agentbrew.settings import BrewSettings
from distillery.workers.memory.feedback import failure_detail
from distillery.workers.trajectories import EpisodeRecord

CUT = "\n[... {n} characters of the attempt cut here ...]\n"


def task_text(task: Task) -> str:
    """The task as the student was given it: its user turns (a multi-turn task's all)."""
    if len(task.turns) == 1:
        return task.turns[0]
    return "\n\n".join(f"Turn {i}: {turn}" for i, turn in enumerate(task.turns, 1))


def _content(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):  # OpenAI content parts
        return "\n".join(str(p.get("text", "")) for p in value if isinstance(p, dict))
    return str(value)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} characters cut]"


def render_attempt(record: EpisodeRecord, settings: BrewSettings) -> str:
    """The play's transcript after the system prompt (which holds the benchmark's
    instructions and the notes the student was shown, not its own doing)."""
    try:
        messages = json.loads(record.messages_json or "[]")
    except ValueError:
        messages = []
    lines: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        if not isinstance(message, dict) or message.get("role") == "system":
            continue
        role = str(message.get("role"))
        content = _content(message.get("content"))
        if role == "assistant":
            if content.strip():
                lines.append(f"[student] {content.strip()}")
            for call in message.get("tool_calls") or []:
                function = call.get("function", {}) if isinstance(call, dict) else {}
                arguments = _cut(str(function.get("arguments", "")), settings.observation_chars)
                lines.append(f"[student calls] {function.get('name')}({arguments})")
        elif role == "tool" or message.get("name") == "tool_results":
            lines.append(f"[result] {_cut(content, settings.observation_chars)}")
        else:
            lines.append(f"[{role}] {_cut(content, settings.observation_chars)}")
    if not lines:  # no transcript kept: the steps of the record
        for step in record.steps:
            if step.assistant_text.strip():
                lines.append(f"[student] {step.assistant_text.strip()}")
            for call in step.calls:
                lines.append(f"[student calls] {call.call}")
                lines.append(f"[result] {_cut(call.content, settings.observation_chars)}")
    text = "\n".join(lines) or "(the student produced nothing)"
    limit = settings.trajectory_chars
    if len(text) > limit:
        head = text[: limit // 2]
        tail = text[-(limit - limit // 2) :]
        text = head + CUT.format(n=len(text) - limit) + tail
    return text


def render_report(record: EpisodeRecord, settings: BrewSettings) -> str:
    """The environment's verdict, as much as the `feedback` setting lets the teacher read."""
    detail = failure_detail(record, settings.feedback)
    return "the task was not solved (reward 0)" + (f"; {detail}" if detail else "") + "."


def called_functions(record: EpisodeRecord) -> tuple[str, ...]:
    """The functions the student called in the play, in first-call order."""
    names: dict[str, None] = {}
    for step in record.steps:
        for call in step.calls:
            if call.function and not call.rejected:
                names.setdefault(call.function, None)
    return tuple(names)
