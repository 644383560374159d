"""One Reflexion reflection on a failed play, asked of the outcome-driven stage's
reflector: validated (a non-empty answer), retried once, else a fixed fallback text
(counted in the stage's event log as `reflection_fallback`). Shared by Reflexion's own
test-time stage and by ExpeL's experience gathering, which is Reflexion run on the
training tasks (ExpeL's `ReflectAgent`, agent/reflect.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distillery.orchestrator.execution.ordered_stage import TaskContext
from distillery.workers.memory.feedback import DEFAULT_FEEDBACK, Feedback, failure_detail
from distillery.workers.memory.reflexion import prompts
from distillery.workers.memory.reflexion.records import Reflection
from distillery.workers.memory.transcript import TEXTS as TRANSCRIPT_TEXTS
from distillery.workers.memory.transcript import episode_transcript

# Every text a reflection request may hold (a stage's key holds them).
TEXTS = (*prompts.TEXTS, *TRANSCRIPT_TEXTS)


@dataclass(frozen=True)
class ReflectionLimits:
    """What a reflection reads and keeps (a method's settings say)."""

    feedback: Feedback = DEFAULT_FEEDBACK
    trajectory_chars: int = 12_000
    observation_chars: int = 1_000
    reflection_chars: int = 2_000


def verdict(play: Any, feedback: str) -> str:
    """What the reflection is told of the failed play (`feedback`: binary | category |
    message, workers/memory/feedback.py)."""
    detail = failure_detail(play.record, feedback)
    if detail:
        return prompts.VERDICT_GRADER.format(reason=detail)
    return prompts.VERDICT_BINARY


async def reflect(
    ctx: TaskContext, role: str, play: Any, earlier: list[Reflection], limits: ReflectionLimits
) -> Reflection:
    """A reflection on `play` by the model of `role` (see the module docstring);
    `earlier`: the reflections on this task's earlier plays it is shown."""
    attempt = episode_transcript(
        play.record, ctx.task.turns, limits.trajectory_chars, limits.observation_chars
    )
    content = prompts.reflection_prompt(
        attempt, verdict(play, limits.feedback), [(e.attempt, e.text) for e in earlier]
    )
    messages: list[dict[str, Any]] = [{"role": "user", "content": content}]
    text = ""
    for _ in range(2):
        reply = await ctx.ask(role, messages)
        text = reply.text.strip()
        if text:
            break
        ctx.event("reflection_invalid", attempt=play.attempt, refused=reply.refused or "")
        if reply.refused:  # the request itself is refused: asking again cannot help
            break
        messages = [
            *messages,
            {"role": "assistant", "content": reply.text},
            {"role": "user", "content": prompts.RETRY_PROMPT},
        ]
    fallback = not text
    if fallback:
        reason = (play.record.error_type or "not solved").strip()
        text = prompts.FALLBACK.format(attempt=play.attempt, reason=reason)
        ctx.event("reflection_fallback", attempt=play.attempt)
    elif len(text) > limits.reflection_chars:
        text = text[: limits.reflection_chars] + " …"
        ctx.event("reflection_cut", attempt=play.attempt)
    return Reflection(
        memory_id=f"reflection:{ctx.task.task_id}:{play.attempt}",
        source=ctx.source(play),
        request=ctx.task.turns[0] if ctx.task.turns else "",
        text=text,
        attempt=play.attempt,
        fallback=fallback,
    )
