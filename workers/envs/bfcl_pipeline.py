"""How BFCL's own pipeline plays an episode, and the options that deviate from it.

Kept apart from the adapter (`bfcl.py`) because neither needs bfcl-eval: the options
model is read when a config is validated, the conventions when the loop plays.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from distillery.workers.envs.base import BenchmarkOptions, ToolResult, deviation
from distillery.workers.envs.conventions import AgentConventions, call_list_reply, tool_messages


class BfclOptions(BenchmarkOptions):
    """`benchmark.options` of bfcl_multi_turn_base. The category and its data file are
    fixed; the options are BFCL's deviations from its own pipeline (``bfcl
    generate``), all off: off, an episode sees exactly what BFCL shows the model and is
    scored as BFCL scores it (tests/workers/envs/test_bfcl_agreement.py)."""

    # Declaration order is the order deviations are recorded in (stage identity).
    native_system_prompt: bool = deviation("Send distillery's system prompt in native mode.")
    positional_args: bool = deviation("Keep positional call arguments (BFCL drops them).")
    report_invalid_calls: bool = deviation(
        "Tell the model of undecodable calls / invalid JSON and go on (BFCL ends the turn)."
    )
    json_schema_tools: bool = deviation("Plain JSON-schema tools instead of BFCL's conversion.")
    # distillery's own repairs of a reply, once its defaults: each puts one back.
    strip_think_blocks: bool = deviation(
        "Decode a prompt-format reply without its <think> blocks (BFCL decodes the content "
        "as the server sent it: a reply that opens with one is undecodable)."
    )
    empty_arguments_as_object: bool = deviation(
        "Run a native call whose arguments are empty or null as {} (BFCL cannot decode "
        "the response: the turn ends)."
    )
    refuse_arithmetic: bool = deviation(
        "Refuse arithmetic in prompt-format arguments (BFCL's decoder computes it)."
    )
    rebuild_assistant_message: bool = deviation(
        "Read the client's cleaned reply and keep a message rebuilt from it in the "
        "history (reasoning and <think> blocks dropped, empty arguments as {}, ids made "
        "unique, arguments re-encoded: distillery's reading) instead of the server's "
        "message as sent, which BFCL decodes and re-sends."
    )
    model_sampling: bool = deviation(
        "Send the model config's max_tokens, seed and top_p too (BFCL's handler sends "
        "the temperature only)."
    )


def bfcl_prompt_results(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """BFCL's `format_execution_results_prompting`: one user message, the repr of a
    list of tool messages named by the decoded calls."""
    payload = [{"role": "tool", "name": o.call, "content": o.content} for o in observations]
    return [{"role": "user", "content": repr(payload)}]


def bfcl_tool_messages(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """BFCL's `_add_execution_results_FC` (OpenAI handler): one tool message per
    execution result, paired in order with the reply's call ids as the server sent them
    (a repeated id is repeated, a missing one is null)."""
    return [
        {"role": "tool", "content": o.content, "tool_call_id": call.get("id")}
        for o, call in zip(observations, tool_calls, strict=False)
    ]


# How BFCL's own inference loops play (`inference_multi_turn_FC` / `_prompting`) through
# its OpenAI handler (`api_inference/openai_completion.py`).
BFCL_CONVENTIONS = AgentConventions(
    prompt_results=bfcl_prompt_results,
    native_results=bfcl_tool_messages,
    step_limit="exceeded",  # `count > MAXIMUM_STEP_LIMIT`: a turn makes limit + 1 steps
    oracle_reply=call_list_reply,  # BFCL's python call-list format, `[f(a=1)]`
    # The handler appends `api_response.choices[0].message` to the history as it came
    # and decodes its content / tool calls as they came.
    reply="as_sent",
    # `_query_FC` / `_query_prompting`: messages, model, temperature, store=False (no
    # token cap, no seed, no top_p; `store` changes nothing the model is shown).
    sampling=("temperature",),
)


def bfcl_conventions(options: BfclOptions) -> AgentConventions:
    """BFCL's conventions with the options that change them applied."""
    conventions = BFCL_CONVENTIONS
    if options.rebuild_assistant_message:
        conventions = dataclasses.replace(
            conventions, reply="normalized", native_results=tool_messages
        )
    if options.model_sampling:
        conventions = dataclasses.replace(conventions, sampling=None)
    return conventions
