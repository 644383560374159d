"""An episode as a model reads it: the task, then each step's reply, its actions and
what the environment answered, cut to a budget.

What the baselines that show an LLM a whole attempt share (Reflexion's reflection on a
failed attempt, ExpeL's critiques and in-context examples, ACE's reflector and
curator): the task's user turns where they arrived, every reply of the agent (its
reasoning and answer: an answer benchmark's episode is one such reply), every executed
or rejected call with its observation. Observations are cut to `observation_chars`,
the whole text to `max_chars` (its head and its tail kept, the cut marked), so a
runaway episode cannot crowd a prompt out; the originals show the whole trajectory
and rely on the model's context (Reflexion's HotPotQA agent truncates its scratchpad,
hotpotqa_runs/agents.py `truncate_scratchpad`).
"""

from __future__ import annotations

from collections.abc import Sequence

from distillery.workers.trajectories import EpisodeRecord

TASK_LINE = "Task: {text}"
TURN_LINE = "User (turn {turn}): {text}"
REPLY_LINE = "Assistant: {text}"
ACTION_LINE = "Action: {call}"
OBSERVATION_LINE = "Observation: {text}"
ERROR_LINE = "Observation (error): {text}"
CUT_LINE = "[... {chars} characters of the attempt cut here ...]"
NO_STEP = "(the agent took no step)"

TEXTS = (TASK_LINE, TURN_LINE, REPLY_LINE, ACTION_LINE, OBSERVATION_LINE, ERROR_LINE, CUT_LINE,
         NO_STEP)  # fmt: skip


def _cut(text: str, limit: int) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} chars cut]"


def episode_transcript(
    record: EpisodeRecord,
    turns: Sequence[str],
    max_chars: int = 12_000,
    observation_chars: int = 1_000,
) -> str:
    """The episode as text (see the module docstring); `turns`: the task's user
    messages (the first is the task)."""
    lines = [TASK_LINE.format(text=turns[0].strip() if turns else "")]
    shown_turn = 0
    for step in record.steps:
        for turn in range(shown_turn + 1, min(step.turn + 1, len(turns))):
            lines.append(TURN_LINE.format(turn=turn + 1, text=turns[turn].strip()))
        shown_turn = max(shown_turn, step.turn)
        if step.assistant_text.strip():
            lines.append(REPLY_LINE.format(text=step.assistant_text.strip()))
        for call in step.calls:
            lines.append(ACTION_LINE.format(call=call.call.strip()))
            line = ERROR_LINE if call.error or call.rejected else OBSERVATION_LINE
            lines.append(line.format(text=_cut(call.content, observation_chars)))
    if len(lines) == 1:
        lines.append(NO_STEP)
    text = "\n".join(lines)
    if len(text) <= max_chars:
        return text
    head = max_chars // 2
    tail = max_chars - head
    return "\n".join([text[:head], CUT_LINE.format(chars=len(text) - head - tail), text[-tail:]])


def closing_reply(record: EpisodeRecord) -> str:
    """The agent's last reply without a call (an answer benchmark's graded answer);
    empty when its last step made calls."""
    for step in reversed(record.steps):
        if step.calls:
            return ""
        if step.assistant_text.strip():
            return step.assistant_text.strip()
    return ""
