"""What the student is shown: the retrieved trajectories, rendered under a header.

The wording is this project's (no original code exists for the naive baseline). It
says what the block is — a previous, successful run of a similar task by another
agent, values included — so the student can judge how far to follow it, and marks
every cut (of an observation, or of the trajectory when the budget runs out) so that
a cut is never mistaken for the whole.
"""

from __future__ import annotations

from collections.abc import Sequence

from distillery.workers.memory.trajectory_rag.records import TeacherTrajectory

MARKER = "[Trajectory memory]"
HEADER = (
    f"{MARKER} Below is a complete, successful run of a similar earlier task by another "
    "agent: the user's requests and the function calls it executed, each with the "
    "result it got. Its values belong to that task; use it only as a reference for "
    "yours."
)
# On a benchmark that grades a closing reply, the entry is the task and that answer.
ANSWER_HEADER = (
    f"{MARKER} Below is a complete, successful solution of a similar earlier task by "
    "another agent: the task and the answer it gave. Its values belong to that task; "
    "use it only as a reference for yours."
)
ANSWER_LINE = "  answer: {text}"
ANSWER_CUT = " … [answer cut here: {shown} of {total} characters shown]"
EXAMPLE_TITLE = "Example {index} (similarity {score:.2f}):"
TURN_LINE = "User (turn {turn}): {text}"
CALL_LINE = "  call: {call}"
RESULT_LINE = "  result: {observation}"
ERROR_LINE = "  error: {observation}"
CUT_LINE = "  … [trajectory cut here: {shown} of {total} calls shown]"

TEXTS = (HEADER, EXAMPLE_TITLE, TURN_LINE, CALL_LINE, RESULT_LINE, ERROR_LINE, CUT_LINE)
# Shown (and in the read identity) only where answers are (`settings.answers`).
ANSWER_TEXTS = (ANSWER_HEADER, ANSWER_LINE, ANSWER_CUT)


def _cut(text: str, limit: int) -> str:
    text = " ".join(text.split())  # one line per observation
    return text if len(text) <= limit else text[:limit] + " …"


def render_trajectory(
    entry: TeacherTrajectory,
    index: int,
    score: float,
    max_chars: int,
    max_observation_chars: int,
    show_answer: bool = False,
) -> tuple[str, bool]:
    """The entry as shown, at most about `max_chars` characters (lines are dropped
    whole, and the cut is marked); second value: whether it was cut."""
    lines = [EXAMPLE_TITLE.format(index=index, score=score)]
    by_turn: dict[int, list[int]] = {}
    for i, step in enumerate(entry.steps):
        by_turn.setdefault(step.turn, []).append(i)
    used = len(lines[0])
    shown = 0
    total = len(entry.steps)
    for turn, text in enumerate(entry.turns):
        block = [TURN_LINE.format(turn=turn + 1, text=" ".join(text.split()))]
        for i in by_turn.get(turn, []):
            step = entry.steps[i]
            result = ERROR_LINE if step.error else RESULT_LINE
            block.append(CALL_LINE.format(call=step.call))
            block.append(result.format(observation=_cut(step.observation, max_observation_chars)))
        # Whole lines only: a line that would pass the budget ends the rendering.
        for line in block:
            if used + len(line) + 1 > max_chars:
                lines.append(CUT_LINE.format(shown=shown, total=total))
                return "\n".join(lines), True
            lines.append(line)
            used += len(line) + 1
            if line.startswith("  call: "):
                shown += 1
    if show_answer and entry.answer:
        # The answer is the entry's substance: cut to what the budget leaves, marked.
        room = max(0, max_chars - used - len(ANSWER_LINE.format(text="")) - 1)
        answer = entry.answer.strip()
        if len(answer) > room:
            mark = ANSWER_CUT.format(shown=room, total=len(answer))
            lines.append(ANSWER_LINE.format(text=answer[:room] + mark))
            return "\n".join(lines), True
        lines.append(ANSWER_LINE.format(text=answer))
    return "\n".join(lines), False


def memory_block(rendered: Sequence[str], answers: bool = False) -> str:
    """The system-prompt block of the rendered examples (empty: none); `answers`: the
    header of a benchmark whose entries are a task and its answer."""
    return "\n\n".join([ANSWER_HEADER if answers else HEADER, *rendered]) if rendered else ""
