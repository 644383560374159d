"""The agent loop shared by teacher and student: messages, calls, observations.

One episode = the task's user turns in order. Within a turn the policy answers; its
calls are validated and executed by the environment and the observations go back to
it; a response without calls ends the turn. The benchmark's step limit per turn ends
the whole episode (BFCL force-terminates it). Infrastructure failures propagate as
`InfraError` so the caller can retry the episode; they are never scored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

from distillery.workers.agents.policies import EpisodePolicy
from distillery.workers.envs.base import Environment, ParsedAction, ToolResult
from distillery.workers.llm.types import ChatResult, ContextOverflow, RequestRejected
from distillery.workers.trajectories import CallRecord, StepRecord

# Marks observation messages in the prompt format (they are `user` messages there), so
# they can be told apart from real user turns.
OBSERVATION_NAME = "tool_results"


class EpisodeHooks(Protocol):
    """Optional augmentation of an episode (e.g. a memory method); knows no env internals."""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        """The system prompt to use from this turn on (proactive injection)."""

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        """The observations as the model will see them (reactive injection)."""


@dataclass
class EpisodeOutcome:
    termination: str  # done | step_limit | context_overflow | request_rejected
    steps: list[StepRecord] = field(default_factory=list)
    steps_per_turn: list[int] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)
    n_llm_calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_reasoning: int = 0  # of tokens_out, the server-reported thinking part
    llm_latency_s: float = 0.0
    rejection: str | None = None


async def run_agent_loop(
    env: Environment,
    policy: EpisodePolicy,
    max_steps_per_turn: int,
    hooks: EpisodeHooks | None = None,
) -> EpisodeOutcome:
    """Play every turn of `env.task` with `policy`; the caller scores `env` afterwards."""
    task = env.task
    fmt = policy.action_format
    tools = list(task.tools) if fmt == "native" else None
    base_prompt = env.system_prompt(fmt)
    out = EpisodeOutcome(termination="done")
    out.messages = [{"role": "system", "content": base_prompt}]

    for turn_index, user_text in enumerate(task.turns):
        if hooks is not None:
            out.messages[0] = {
                "role": "system",
                "content": await hooks.before_turn(turn_index, user_text, base_prompt),
            }
        out.messages.append({"role": "user", "content": user_text})
        steps_in_turn = 0
        while True:
            try:
                result = await policy.respond(out.messages, tools)
            except RequestRejected as exc:  # the model's doing (RequestConfigError is not)
                out.termination = (
                    "context_overflow" if isinstance(exc, ContextOverflow) else "request_rejected"
                )
                out.rejection = str(exc)
                out.steps_per_turn.append(steps_in_turn)
                return out
            _count_usage(out, result)
            action = _parse(env, fmt, result)
            out.messages.append(_assistant_message(fmt, result))
            if action.empty:
                break
            observations = env.step(action)
            if hooks is not None:
                observations = await hooks.after_step(turn_index, user_text, observations)
            out.messages.extend(_observation_messages(fmt, result, observations))
            out.steps.append(_step_record(turn_index, steps_in_turn, result, observations))
            steps_in_turn += 1
            if steps_in_turn >= max_steps_per_turn:
                out.termination = "step_limit"
                out.steps_per_turn.append(steps_in_turn)
                return out
        env.end_turn()
        out.steps_per_turn.append(steps_in_turn)
    return out


def _parse(env: Environment, fmt: str, result: ChatResult) -> ParsedAction:
    if fmt == "native":
        if result.tool_calls:
            return env.parse_tool_calls(result.tool_calls)
        return ParsedAction()
    return env.parse_text(result.text or "")


def _count_usage(out: EpisodeOutcome, result: ChatResult) -> None:
    out.n_llm_calls += 1
    out.tokens_in += result.usage.prompt_tokens
    out.tokens_out += result.usage.completion_tokens
    out.tokens_reasoning += result.usage.reasoning_tokens
    out.llm_latency_s += result.latency_s


def _assistant_message(fmt: str, result: ChatResult) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": result.text or ""}
    if fmt == "native" and result.tool_calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]},
            }
            for call in result.tool_calls
        ]
    return message


def _observation_messages(
    fmt: str, result: ChatResult, observations: list[ToolResult]
) -> list[dict[str, Any]]:
    if fmt == "native":
        # Every tool_call id must be answered, rejected ones included, or the next
        # request is malformed for most servers.
        by_id = {o.call_id: o for o in observations if o.call_id}
        messages = []
        for call in result.tool_calls:
            obs = by_id.get(call["id"])
            content = obs.content if obs else "Error: this call was not executed."
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        return messages
    payload = [{"call": o.call, "result": o.content} for o in observations]
    return [
        {
            "role": "user",
            "name": OBSERVATION_NAME,
            "content": "Execution results:\n" + json.dumps(payload, ensure_ascii=False),
        }
    ]


def _step_record(
    turn: int, step: int, result: ChatResult, observations: list[ToolResult]
) -> StepRecord:
    calls = [
        CallRecord(
            call=o.call,
            function=o.function,
            content=o.content,
            error=o.error,
            rejected=o.rejected,
        )
        for o in observations
    ]
    return StepRecord(
        turn=turn,
        step=step,
        assistant_text=result.text or "",
        calls=calls,
        tokens_in=result.usage.prompt_tokens,
        tokens_out=result.usage.completion_tokens,
        latency_s=result.latency_s,
        endpoint=result.endpoint,
    )
