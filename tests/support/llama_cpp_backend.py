"""distillery's llama.cpp server path with the model's generation scripted (no weights).

Everything a chat request meets in `llama_server` runs for real: the body's
normalisation (null content), llama-cpp-python's own request schema
(`CreateChatCompletionRequest`, which refuses what its server refuses), its
`Llama.create_chat_completion` dispatch, distillery's template handler (the history
rendered with a Jinja chat template, which raises where the template does) and the
tool-call parser. Only the model is a stand-in (`ScriptedLlama`): its "generation" is
the text a scripted reply would be written as in the template's syntax
(`written_reply`). `through_llama_cpp` turns a scripted BFCL student (tests/support/
bfcl_students.py) into one whose every reply went this way.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from distillery.workers.llm.llama_server import TemplateChatHandler, normalized_chat_body
from distillery.workers.llm.tool_syntax import ToolCallSyntax

TEMPLATES = Path(__file__).resolve().parents[1] / "workers" / "llm" / "chat_templates"
_SPECIAL = {1: b"<s>", 2: b"</s>"}


def fixture_template(name: str) -> str:
    return (TEMPLATES / f"{name}.jinja").read_text()


class ScriptedLlama:
    """Stands in for `llama_cpp.Llama` at the chat handler's seam: it keeps each prompt
    it is given and answers with `generate(prompt)`."""

    verbose = False

    def __init__(self, handler: Any, generate: Callable[[str], str]) -> None:
        from llama_cpp import Llama

        self.chat_handler = handler
        self._chat_handlers: dict[str, Any] = {}
        self.chat_format = None
        self.generate = generate
        self.prompts: list[str] = []
        self.sampling: list[dict[str, Any]] = []
        self._create_chat_completion = Llama.create_chat_completion

    def create_chat_completion(self, **kwargs: Any) -> Any:
        return self._create_chat_completion(self, **kwargs)  # llama-cpp-python's dispatch

    def token_eos(self) -> int:
        return 2

    def token_bos(self) -> int:
        return 1

    def detokenize(
        self, tokens: list[int], prev_tokens: Any = None, special: bool = False
    ) -> bytes:
        return b"".join(_SPECIAL.get(t, b"?") for t in tokens)

    def tokenize(self, text: bytes, add_bos: bool = True, special: bool = False) -> list[int]:
        self.prompts.append(text.decode())
        return [1] * max(1, len(text) // 4)

    def create_completion(self, prompt: list[int], **kwargs: Any) -> dict[str, Any]:
        self.sampling.append(kwargs)
        text = self.generate(self.prompts[-1])
        used = len(prompt)
        return {
            "id": "cmpl-scripted",
            "object": "text_completion",
            "created": 0,
            "model": kwargs.get("model") or "scripted",
            "choices": [{"text": text, "index": 0, "logprobs": None, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": used, "completion_tokens": 1, "total_tokens": used + 1},
        }


def serve_chat(llama: ScriptedLlama, body: bytes) -> dict[str, Any]:
    """One POST /v1/chat/completions body through the server's own request handling
    (what `llama_cpp.server.app.create_chat_completion` does with it)."""
    from llama_cpp.server.types import CreateChatCompletionRequest

    request = CreateChatCompletionRequest.model_validate_json(normalized_chat_body(body))
    kwargs = request.model_dump(exclude={"n", "logit_bias_type", "user", "min_tokens"})
    return llama.create_chat_completion(**kwargs)


def written_reply(reply: dict[str, Any], syntax: ToolCallSyntax) -> str:
    """A scripted reply ({"content", "tool_calls": [{"name", "arguments"}]}) as a model
    writes it in `syntax`; arguments given as text (invalid JSON, a JSON array) are
    written as they are."""
    calls = reply.get("tool_calls") or []
    text = reply.get("content") or ""
    written = []
    for call in calls:
        arguments = call["arguments"]
        encoded = arguments if isinstance(arguments, str) else json.dumps(arguments)
        key = "arguments" if syntax == "hermes" else "parameters"
        body = f'{{"name": {json.dumps(call["name"])}, "{key}": {encoded}}}'
        written.append(f"<tool_call>\n{body}\n</tool_call>" if syntax == "hermes" else body)
    if syntax == "hermes":
        return text + ("\n" if text and written else "") + "\n".join(written)
    if written and text:
        raise ValueError("a Llama 3.x JSON reply is a call list or text, not both")
    return "; ".join(written) or text


def through_llama_cpp(
    student: Callable[[dict[str, Any]], dict[str, Any]], syntax: ToolCallSyntax
) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`student`, its every request served and its every reply parsed by distillery's
    llama.cpp server with the `syntax` fixture template."""
    handler = TemplateChatHandler(fixture_template(syntax), syntax)
    asked: list[dict[str, Any]] = []  # the request being served
    llama = ScriptedLlama(handler, lambda prompt: written_reply(student(asked[-1]), syntax))

    def play(request: dict[str, Any]) -> dict[str, Any]:
        asked.append(request)
        # The body as distillery's client sends it: unset fields are left out.
        body = {k: v for k, v in request.items() if v is not None}
        message = serve_chat(llama, json.dumps(body).encode())["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        reply: dict[str, Any] = {"content": message.get("content")}
        if calls:
            reply["tool_calls"] = [
                {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                for c in calls
            ]
        return reply

    return play
