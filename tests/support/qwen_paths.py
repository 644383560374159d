"""The two ways a Qwen3 student can play BFCL, rendered to the text the model reads.

- BFCL's Qwen handler (`QwenFCHandler`, the leaderboard's `Qwen/Qwen3-*-FC` entries):
  its own rendering of the chat template (`_format_prompt`), sent as a prompt to the
  completions API; the handler decodes the model's text itself.
- distillery (the path of BFCL's OpenAI handler): chat requests to vLLM's chat endpoint,
  which renders them with the model's chat template after its message preprocessing
  (vLLM's `vllm/entrypoints/chat_utils.py`: `_parse_chat_message_content` and
  `_postprocess_messages`, reproduced in `vllm_prompt`) and turns the model's text into
  the chat message with its qwen3 reasoning parser and hermes tool parser
  (`vllm/reasoning/qwen3_reasoning_parser.py`,
  `vllm/entrypoints/openai/tool_parsers/hermes_tool_parser.py`: `vllm_message`).

Both are driven by one scripted model: a list of raw completions, one per request.

`QWEN3_TEMPLATE` is the chat template of Qwen/Qwen3-8B (its `tokenizer_config.json` on
Hugging Face; the same for Qwen3-1.7B/4B/14B/32B), the one bfcl-eval's
`QwenFCHandler._format_prompt` quotes in its docstring and reimplements
(tests/workers/envs/test_bfcl_qwen_paths.py checks the two are the same template).
No tokenizer is needed to render it: transformers' own renderer, as vLLM calls it.
"""

from __future__ import annotations

import contextlib
import copy
import io
import itertools
import json
import re
from pathlib import Path
from typing import Any
from unittest import mock

from transformers.utils.chat_template_utils import render_jinja_template

from distillery.workers.envs.bfcl import BfclMultiTurnBase
from distillery.workers.llm.config import ModelConfig
from tests.support.bfcl_reference import (
    STUDENT_MODEL,
    _drop_globals,
    _generation,
    httpx,
    play_distillery,
)

_NAMES = itertools.count()
QWEN3_TEMPLATE = (Path(__file__).parent / "data" / "qwen3_chat_template.jinja").read_text()


# ------------------------------------------------------------------ vLLM's side


def vllm_prompt(request: dict[str, Any]) -> str:
    """The prompt vLLM's chat endpoint renders for `request` with `QWEN3_TEMPLATE`."""
    conversation = []
    for message in request["messages"]:
        content = message.get("content")
        if content is None:
            text = ""
        elif isinstance(content, str):
            text = content
        else:  # text parts, joined with newlines
            text = "\n".join(part.get("text", "") for part in content)
        parsed: dict[str, Any] = {"role": message["role"], "content": text}
        if message["role"] == "assistant":
            if message.get("tool_calls") is not None:
                parsed["tool_calls"] = copy.deepcopy(list(message["tool_calls"]))
            if message.get("reasoning") is not None:  # vLLM reads `reasoning` only
                parsed["reasoning"] = parsed["reasoning_content"] = message["reasoning"]
        elif message["role"] == "tool" and "tool_call_id" in message:
            parsed["tool_call_id"] = message["tool_call_id"]
        if isinstance(message.get("name"), str):
            parsed["name"] = message["name"]
        conversation.append(parsed)
    for parsed in conversation:  # _postprocess_messages
        calls = parsed.get("tool_calls")
        if parsed["role"] != "assistant" or not isinstance(calls, list):
            continue
        if not calls:
            del parsed["tool_calls"]
            continue
        for call in calls:
            arguments = call["function"].get("arguments")
            if isinstance(arguments, str):
                try:
                    call["function"]["arguments"] = json.loads(arguments)
                except json.JSONDecodeError:
                    call["function"]["arguments"] = {}
            elif not isinstance(arguments, (dict, list)):
                call["function"]["arguments"] = {}
    kwargs = dict(request.get("chat_template_kwargs") or {})
    rendered = render_jinja_template(
        [conversation],
        tools=request.get("tools"),
        chat_template=QWEN3_TEMPLATE,
        add_generation_prompt=True,
        **kwargs,
    )
    return rendered[0][0] if isinstance(rendered, tuple) else rendered[0]


_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


def vllm_message(output: str) -> dict[str, Any]:
    """The chat message vLLM makes of the model's `output` (qwen3 reasoning parser,
    then the hermes tool parser), as a recent vLLM names its fields."""
    reasoning = None
    start, found, rest = output.partition("<think>")
    text = rest if found else start
    if "</think>" in text:
        reasoning, _, content = text.partition("</think>")
        text = content
    content: str | None = text or None
    calls = []
    if content and "<tool_call>" in content:
        try:
            for match in _TOOL_CALL.findall(content):
                call = json.loads(match[0] if match[0] else match[1])
                arguments = json.dumps(call["arguments"], ensure_ascii=False)
                calls.append({"name": call["name"], "arguments": arguments})
        except (ValueError, KeyError, TypeError):
            calls = []
        else:
            content = content[: content.find("<tool_call>")] or None
    return {
        "role": "assistant",
        "content": content,
        "reasoning": reasoning,
        "tool_calls": [
            {"id": f"chatcmpl-tool-{index}", "type": "function", "function": call}
            for index, call in enumerate(calls)
        ],
    }


def distillery_prompts(task_id: str, outputs: list[str], model: ModelConfig) -> list[str]:
    """The prompt the model reads at each request of distillery's episode (native tool
    calls, BFCL's default options) served by vLLM's chat endpoint."""
    prompts: list[str] = []

    def model_server(request: dict[str, Any]) -> dict[str, Any]:
        prompts.append(vllm_prompt(request))
        message = vllm_message(outputs[len(prompts) - 1])
        for index, call in enumerate(message["tool_calls"]):  # ids of this conversation
            call["id"] = f"call_{len(request['messages'])}_{index}"
        return {"message": message}

    play_distillery(BfclMultiTurnBase(), task_id, model_server, True, model=model)
    return prompts


# ---------------------------------------------------------------- BFCL's side


def bfcl_qwen_prompts(entry: dict[str, Any], outputs: list[str]) -> list[str]:
    """The prompt BFCL's `QwenFCHandler` sends the completions API at each request of
    the same entry, as ``bfcl generate --model Qwen/Qwen3-8B-FC`` plays it."""
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    prompts: list[str] = []

    def completions(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        prompts.append(body["prompt"])
        text = outputs[len(prompts) - 1]
        return httpx.Response(
            200,
            json={
                "id": "cmpl-scripted",
                "object": "text_completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )

    import openai

    def client(**_: Any) -> openai.OpenAI:
        transport = httpx.MockTransport(completions)
        return openai.OpenAI(
            api_key="unused",
            base_url="http://vllm.invalid/v1",
            http_client=httpx.Client(transport=transport),
        )

    # A name of its own: BFCL's executor keeps each model's backends in its globals.
    name = f"Qwen/Qwen3-8B-{next(_NAMES)}"
    with mock.patch(f"{QwenFCHandler.__mro__[1].__module__}.OpenAI", client):
        handler = QwenFCHandler(
            model_name=name,
            temperature=STUDENT_MODEL.temperature,
            registry_name="Qwen/Qwen3-8B-FC",
            is_fc_model=True,
        )
    # What `bfcl generate` sets once it has started the server: only token counting and
    # the context size are read from them here.
    handler.model_path_or_id = "Qwen/Qwen3-8B"
    handler.max_context_length = 40960
    handler.tokenizer = _WordCounter()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            _generation().multi_threaded_inference(
                handler, copy.deepcopy(entry), include_input_log=False, exclude_state_log=True
            )
    finally:
        _drop_globals(handler.model_name_underline_replaced)
    return prompts


class _WordCounter:
    """Stands in for the tokenizer, which BFCL uses only to size `max_tokens`."""

    def tokenize(self, text: str) -> list[str]:
        return text.split()


# --------------------------------------------------------------- the model


def qwen_outputs(named_turns: list[list[str]], think: bool) -> list[str]:
    """What Qwen3 writes for each request of the correct plan: each call in
    `<tool_call>` tags, then a closing sentence per turn; with `think`, each output
    opens with a (closed) reasoning block, as Qwen3 writes with thinking on."""
    import ast

    outputs = []
    for turn in named_turns:
        for source in turn:
            node = ast.parse(source, mode="eval").body
            arguments = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords}
            call = json.dumps({"name": node.func.id, "arguments": arguments})
            outputs.append(f"<tool_call>\n{call}\n</tool_call>")
        outputs.append("I have completed the request.")
    if think:
        outputs = [
            f"<think>\nI read the request and the results.\n</think>\n\n{o}" for o in outputs
        ]
    return outputs


def qwen_student(**update: Any) -> ModelConfig:
    """A Qwen3 student as conf/model/qwen3_8b.yaml serves it (vLLM, hermes, qwen3
    reasoning parser), with `update` applied."""
    base = dict(
        name="qwen3-8b",
        backend="vllm",
        model="Qwen/Qwen3-8B",
        temperature=STUDENT_MODEL.temperature,
        max_tokens=2048,
        enable_thinking=False,
        reasoning_parser="qwen3",
        tool_call_parser="hermes",
        max_retries=0,
    )
    base.update(update)
    return ModelConfig(**base)
