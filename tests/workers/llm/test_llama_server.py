"""distillery's llama.cpp server adapter: replies in a template's tool-call syntax
become `tool_calls`; OpenAI-shaped histories (null content, tool messages) are
accepted; a conversation the template refuses is a 400; `/v1/models` never waits for
the model; an unusable format stops the server before it loads anything.

The model's generation is scripted (tests/support/llama_cpp_backend.py); everything
else is llama-cpp-python's and distillery's real request path. The real model runs in
test_servers.py."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import httpx
import pytest

pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] not installed")

from fastapi import HTTPException  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from distillery.workers.llm.compat import RequestShape, classify_refusal  # noqa: E402
from distillery.workers.llm.llama_server import (  # noqa: E402
    AdapterMiddleware,
    TemplateChatHandler,
)
from distillery.workers.llm.replies import parse_completion  # noqa: E402
from distillery.workers.llm.servers import find_smollm2_gguf  # noqa: E402
from distillery.workers.llm.types import RequestRejected  # noqa: E402
from tests.support.llama_cpp_backend import (  # noqa: E402
    ScriptedLlama,
    fixture_template,
    serve_chat,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "cd",
            "description": "Change directory.",
            "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}},
        },
    }
]
FIRST = [
    {"role": "system", "content": "Use the tools."},
    {"role": "user", "content": "Go to docs."},
]
CALLED = {
    "role": "assistant",
    "content": None,  # what OpenAI clients (and distillery's loop) send beside calls
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "cd", "arguments": '{"folder": "docs"}'},
        }
    ],
}
SECOND = [*FIRST, CALLED, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]


def served(syntax: str, reply: str, messages: list, **body) -> tuple[dict, ScriptedLlama]:
    handler = TemplateChatHandler(fixture_template(syntax), syntax)  # type: ignore[arg-type]
    llama = ScriptedLlama(handler, lambda prompt: reply)
    request = {"model": "m", "messages": messages, "tools": TOOLS, **body}
    return serve_chat(llama, json.dumps(request).encode()), llama


@pytest.mark.parametrize(
    "syntax,reply",
    [
        ("hermes", '<tool_call>\n{"name": "cd", "arguments": {"folder": "docs"}}\n</tool_call>'),
        ("llama3_json", '{"name": "cd", "parameters": {"folder": "docs"}}'),
    ],
)
def test_a_reply_in_the_templates_syntax_becomes_tool_calls(syntax, reply):
    completion, llama = served(syntax, reply, FIRST, temperature=0.0, max_tokens=64, seed=3)
    (choice,) = completion["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    (call,) = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "cd", "arguments": '{"folder": "docs"}'}
    # The client reads it as any server's tool call.
    result = parse_completion(json.dumps(completion).encode(), 0.1, 1, "llama")
    assert [(c["name"], c["arguments"]) for c in result.tool_calls] == [
        ("cd", '{"folder": "docs"}')
    ]
    # The tools were in the prompt; the request's sampling reached the model.
    assert "Change directory." in llama.prompts[0]
    sampling = llama.sampling[0]
    assert (sampling["temperature"], sampling["max_tokens"], sampling["seed"]) == (0.0, 64, 3)


@pytest.mark.parametrize("syntax", ["hermes", "llama3_json"])
def test_a_second_step_with_null_content_and_a_tool_message_is_accepted(syntax):
    completion, llama = served(syntax, "Done.", SECOND)
    assert completion["choices"][0]["message"] == {"role": "assistant", "content": "Done."}
    prompt = llama.prompts[0]
    assert "ok" in prompt and '"folder": "docs"' in prompt  # the call and its result rendered
    assert '"{\\"folder' not in prompt  # arguments rendered as an object, not a string


def test_llama_cpp_pythons_own_schema_refuses_null_content():
    """Why the adapter normalises the body: without it the server answers 500."""
    from llama_cpp.server.types import CreateChatCompletionRequest

    with pytest.raises(ValidationError):
        CreateChatCompletionRequest.model_validate({"messages": SECOND})


def test_text_replies_and_requests_without_tools_are_not_parsed():
    call = '<tool_call>\n{"name": "cd", "arguments": {}}\n</tool_call>'
    completion, _ = served("hermes", "Plain text.", FIRST)
    assert completion["choices"][0]["message"]["content"] == "Plain text."
    handler = TemplateChatHandler(fixture_template("hermes"), "hermes")
    llama = ScriptedLlama(handler, lambda prompt: call)
    for body in ({"messages": FIRST}, {"messages": FIRST, "tools": TOOLS, "tool_choice": "none"}):
        completion = serve_chat(llama, json.dumps(body).encode())
        assert completion["choices"][0]["message"]["content"] == call
        assert "tool_calls" not in completion["choices"][0]["message"]


def test_a_conversation_the_template_refuses_is_the_models_400():
    parallel = {**CALLED, "tool_calls": CALLED["tool_calls"] * 2}  # Llama 3.x: one at a time
    messages = [*FIRST, parallel, {"role": "tool", "tool_call_id": "call_1", "content": "ok"}]
    with pytest.raises(HTTPException) as refused:
        served("llama3_json", "unused", messages)
    assert refused.value.status_code == 400
    assert "only supports single tool-calls" in refused.value.detail
    # The client files it as the model's doing (its history made the template refuse).
    request = {"model": "m", "messages": messages}
    error = classify_refusal(
        400, json.dumps({"detail": refused.value.detail}), RequestShape(), request, "llama"
    )
    assert isinstance(error, RequestRejected)


def test_models_are_answered_without_waiting_for_the_model_and_bodies_are_normalised():
    seen: list[dict] = []

    async def app(scope, receive, send):  # the llama-cpp-python app, busy or not
        if scope["path"].endswith("/models"):
            raise AssertionError("/v1/models must not reach the model's app")
        body = (await receive())["body"]
        seen.append({"body": json.loads(body), "headers": dict(scope["headers"])})
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def run() -> httpx.Response:
        transport = httpx.ASGITransport(app=AdapterMiddleware(app, ["smol"]))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            models = await client.get("/v1/models")
            assert models.json()["data"][0]["id"] == "smol"
            return await client.post("/v1/chat/completions", json={"messages": SECOND})

    assert asyncio.run(run()).status_code == 200
    (request,) = seen
    assert "content" not in request["body"]["messages"][2]  # null left out
    assert request["body"]["messages"][3]["content"] == "ok"
    assert int(request["headers"][b"content-length"]) == len(json.dumps(request["body"]))


def test_an_unusable_format_stops_the_server_before_it_loads_the_model():
    command = [
        sys.executable,
        "-m",
        "distillery.workers.llm.llama_server",
        "--model",
        str(find_smollm2_gguf()),
        "--model_alias",
        "smollm2-135m",
        "--action_format",
        "native",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    message = done.stderr.strip().splitlines()[-1]
    assert message.startswith("distillery llama.cpp server refuses to start: smollm2-135m ")
    assert (
        "never shows the tools" in message and "the model config's action_format=prompt" in message
    )
    assert "llama_model_load" not in done.stderr  # no weights were loaded


def test_the_server_leaves_rays_low_priority_where_it_may():
    """Ray runs its workers, and so the servers they start, at niceness 15."""
    probe = (
        "import os; from distillery.workers.llm.llama_server import normal_priority; "
        "print(normal_priority(), os.getpriority(os.PRIO_PROCESS, 0))"
    )
    done = subprocess.run(
        ["nice", "-n", "15", sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=600,
    )
    reset, niceness = done.stdout.split()
    assert (reset, niceness) in (("True", "0"), ("False", "15")), done.stdout
