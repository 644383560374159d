"""Qwen3 students on BFCL: BFCL's own Qwen handler vs the path distillery plays.

BFCL's leaderboard runs Qwen3 through `QwenFCHandler`: its own rendering of Qwen3's
chat template sent to the completions API. distillery plays BFCL's OpenAI handler path:
chat requests that vLLM's chat endpoint renders with the same template. Rendered to the
text the model reads, request by request over a whole task, the two are the same text
but for:

- the tools block: BFCL's Qwen handler writes BFCL's own function docs
  (`json.dumps(doc)`, Gorilla types such as "dict"); vLLM writes the OpenAI tools of
  the request (`{"type": "function", "function": {...}}`, JSON-schema types), which is
  what BFCL's OpenAI handler sends. No chat request can make vLLM write BFCL's docs.
- thinking: the Qwen handler never turns it off (its prompt ends at the assistant's
  opening); the paper's students run with thinking off (distillery's Qwen3 configs:
  `enable_thinking: false`, which adds Qwen3's empty think block). With thinking on
  (`enable_thinking: null`) the openings agree, and what differs is the blank content
  vLLM's reasoning parser keeps after a reasoning block ("\\n\\n"), which the Qwen
  handler strips.

docs/fidelity/bfcl.md says which path the paper's numbers used (the chat endpoint).
"""

from __future__ import annotations

import json
import re

import pytest

from distillery.workers.envs.bfcl import BfclMultiTurnBase
from tests.support.bfcl_reference import bfcl_entries
from tests.support.qwen_paths import (
    QWEN3_TEMPLATE,
    bfcl_qwen_prompts,
    distillery_prompts,
    qwen_outputs,
    qwen_student,
)

TASK = "multi_turn_base_0"
_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
EMPTY_THINK = "<think>\n\n</think>\n\n"
_BLANK_CONTENT = re.compile(r"<\|im_start\|>assistant\n\n\n\n?")


@pytest.fixture(scope="module")
def task():
    (task,) = BfclMultiTurnBase().load_tasks(task_ids=[TASK])
    return task


@pytest.fixture(scope="module")
def entry():
    return bfcl_entries()[TASK]


def _split_tools(prompt: str) -> tuple[str, str]:
    """(the prompt with its tools block emptied, the tools block)."""
    match = _TOOLS.search(prompt)
    assert match, prompt[:200]
    return prompt[: match.start(1)] + prompt[match.end(1) :], match.group(1)


def test_the_template_is_the_one_bfcl_quotes():
    """The fixture is the Qwen3 template bfcl-eval's Qwen handler quotes (its docstring
    lost the backslashes of the template's escapes, so both are compared without them)."""
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    quoted = QwenFCHandler._format_prompt.__doc__.split('"chat_template":', 1)[1]

    def plain(text: str) -> str:
        return re.sub(r"\s+", "", text.replace("\\n", "\n").replace('\\"', '"'))

    assert plain(quoted) == plain(QWEN3_TEMPLATE)


def test_thinking_off_the_paths_differ_in_the_tools_block_and_the_empty_think_block(task, entry):
    outputs = qwen_outputs(BfclMultiTurnBase().oracle_turns(task), think=False)
    theirs = bfcl_qwen_prompts(entry, outputs)
    ours = distillery_prompts(TASK, outputs, qwen_student(enable_thinking=False))
    assert len(theirs) == len(ours) == len(outputs)  # every request, in the same order
    bfcl_docs = "\n".join(json.dumps(doc) for doc in entry["function"])
    openai_tools = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in task.tools)
    for step, (bfcl_prompt, our_prompt) in enumerate(zip(theirs, ours, strict=True)):
        bfcl_rest, bfcl_tools = _split_tools(bfcl_prompt)
        our_rest, our_tools = _split_tools(our_prompt)
        assert (bfcl_tools, our_tools) == (bfcl_docs, openai_tools), step
        assert our_rest == bfcl_rest + EMPTY_THINK, step  # all the rest is the same text


def test_thinking_on_the_paths_differ_in_the_tools_block_and_blank_content(task, entry):
    outputs = qwen_outputs(BfclMultiTurnBase().oracle_turns(task), think=True)
    theirs = bfcl_qwen_prompts(entry, outputs)
    ours = distillery_prompts(TASK, outputs, qwen_student(enable_thinking=None))
    assert len(theirs) == len(ours) == len(outputs)
    blank = 0
    for step, (bfcl_prompt, our_prompt) in enumerate(zip(theirs, ours, strict=True)):
        bfcl_rest, _ = _split_tools(bfcl_prompt)
        our_rest, _ = _split_tools(our_prompt)
        # vLLM's reasoning parser keeps the blank lines after </think> as content
        # ("\n\n"); the template writes them in earlier turns, and a newline before a
        # call for content that is not empty. The Qwen handler strips them.
        kept = _BLANK_CONTENT.sub("<|im_start|>assistant\n", our_rest)
        kept = kept.replace("</think>\n\n\n<tool_call>", "</think>\n\n<tool_call>")
        blank += kept != our_rest
        assert kept == bfcl_rest, step
        assert bfcl_rest.endswith("<|im_start|>assistant\n"), step  # thinking on in both
    assert blank  # the difference is real, not vacuous
