"""Why each stored call was made: the reasoning a Function record carries on a profile
that builds it (`BenchmarkProfile.function_reasoning`: ToolSandbox), written by the
builder model, as the AMD authors' ToolSandbox builder has its think model write one
per stored call (toolsandbox/common/memory/builder.py:236-303, `_generate_think`;
their rebuild script passes the builder model as the think model,
toolsandbox/common/utils/rebuild_memory_from_trajectories.py:64).

Their request is reproduced input for input (toolsandbox_prompts.py, our wording): the
task, every earlier call of the trajectory (`steps[:i]`, failed ones too) with its
result cut to 100 characters, and the call itself, each `name(<arguments as JSON>)`.

What is ours, and why:
- the inputs are masked as every other builder input is (their arguments are masked,
  their task query is not): a reasoning is shown to other tasks' students, so it must
  not carry this task's values;
- the answer is validated (theirs is stored as it comes): non-empty, at most
  `MAX_SENTENCES` sentences and `MAX_WORDS` words, no chat-template control token; an
  invalid answer is retried once naming what was wrong, then the record keeps an empty
  reasoning (theirs: "" on an exception), counted as the `fn_reasoning` fallback;
- the request's sampling is the build's (`chat_kwargs`, as for every builder), not
  their temperature 1 / max_tokens 1024.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from distillery.workers.memory.amd import prompts, toolsandbox_prompts
from distillery.workers.memory.amd.fn_ranking import json_call
from distillery.workers.memory.amd.masking import sanitise_observation
from distillery.workers.memory.amd.records import FunctionRecord
from distillery.workers.memory.amd.trajectory import (
    Trajectory,
    TrajectoryStep,
    count_sentences,
    count_words,
)
from distillery.workers.memory.bounds import CONTROL_MARKERS
from distillery.workers.memory.building import (
    BuilderLLM,
    BuildStats,
    LLMClient,
    Violation,
    gather_ordered,
)

# builder.py:276 (`sanitize_result(s['result'], max_len=100)`).
PREVIOUS_RESULT_CHARS = 100
# Their instruction asks for 2-3 sentences (builder.py:67); ours accepts a little more
# before asking again, never a page.
MAX_SENTENCES = 4
MAX_WORDS = 120


def reasoning_prompt(trajectory: Trajectory, position: int) -> str:
    """The request for the reasoning of `trajectory.steps[position]`."""
    step = trajectory.steps[position]
    lines = [
        toolsandbox_prompts.PREVIOUS_CALL_LINE.format(
            function=earlier.function,
            arguments=_arguments(trajectory, earlier),
            result=sanitise_observation(
                trajectory.mask(earlier.observation), PREVIOUS_RESULT_CHARS
            ),
        )
        for earlier in trajectory.steps[:position]
    ]
    previous = (
        toolsandbox_prompts.PREVIOUS_CALLS_SECTION.format(lines="\n".join(lines)) if lines else ""
    )
    return toolsandbox_prompts.CALL_REASONING_PROMPT.format(
        task=trajectory.mask(trajectory.query),
        previous_calls=previous,
        function=step.function,
        arguments=_arguments(trajectory, step),
    )


def _arguments(trajectory: Trajectory, step: TrajectoryStep) -> str:
    """The step's arguments as a JSON object (`json.dumps(mask_arguments(...),
    ensure_ascii=False)`, builder.py:278): the concrete call's, masked as text, so a
    value reads as the same placeholder as in the record's call; "{}" where the call
    is not one of keywords and literals."""
    written = json_call(step.call, step.function, ensure_ascii=False)
    if written is None:
        return json.dumps({})
    return trajectory.mask(written[written.index("(") + 1 : -1])


def validate_reasoning(text: str) -> tuple[str | None, list[Violation]]:
    """The answer, single-spaced, or what is wrong with it."""
    text = " ".join(text.split())
    if not text:
        return None, [Violation("empty", "the answer is empty; write the explanation")]
    problems = []
    if CONTROL_MARKERS.search(text):
        problems.append(Violation("control_token", "write plain sentences, without tags"))
    if count_sentences(text) > MAX_SENTENCES or count_words(text) > MAX_WORDS:
        problems.append(
            Violation(
                "too_long",
                f"it has {count_sentences(text)} sentences and {count_words(text)} words; "
                f"use 2 or 3 sentences",
            )
        )
    return (None if problems else text), problems


class CallReasoningWriter:
    """Fills `.reasoning` of built Function records (kind `fn_reasoning` in the build
    stats: requests, tokens, retries, fallbacks, invalid answers)."""

    kind = "fn_reasoning"

    def __init__(
        self,
        llm: BuilderLLM | None,
        *,
        stats: BuildStats,
        chat_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.stats = stats
        self._client = LLMClient(
            llm, self.kind, stats, chat_kwargs, retry_prompt=prompts.RETRY_PROMPT
        )

    async def write(self, prompt: str) -> str:
        """The validated reasoning, or "" (counted) after a second bad answer."""
        reasoning = await self._client.ask(
            prompt, validate_reasoning, system=toolsandbox_prompts.CALL_REASONING_SYSTEM
        )
        if reasoning is None:
            self._client.count_fallback()
        return reasoning or ""

    async def add_reasoning(
        self,
        records: Sequence[FunctionRecord],
        prompts_by_id: Mapping[str, str],
        concurrency: int,
    ) -> list[FunctionRecord]:
        """`records` in order, each with the reasoning its prompt was answered with (a
        record without a prompt as it was)."""

        async def one(record: FunctionRecord) -> FunctionRecord:
            prompt = prompts_by_id.get(record.memory_id)
            if prompt is None:
                return record
            return replace(record, reasoning=await self.write(prompt))

        return await gather_ordered(records, one, concurrency)
