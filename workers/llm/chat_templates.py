"""Which conversations a llama.cpp model's chat formatting can carry, found before
anything starts by rendering small probe conversations with it.

The llama.cpp backend turns a chat request into one prompt with a chat format: the
model's own Jinja template (from its GGUF file, or `chat_template_file`), or one of
llama-cpp-python's hand-written formats (`chat_format`). A format that silently
drops the system message (where the prompt format keeps all of a benchmark's tool
documentation), drops tool results, never shows the tools, or has no syntax for tool
calls, makes every episode wrong for a reason that is not the model's. So:

- native tool calling (`action_format: native`) needs the model's Jinja template to
  show the tools, keep system and tool messages, and render an assistant's tool call
  in a syntax `tool_syntax` parses (found here by rendering one: `hermes` or
  `llama3_json`);
- the prompt format needs the system message kept.

`check_llama_cpp_format` answers both for a model config (on the driver, before any
stage; and by the server itself at start-up, so a cluster refuses too). The formats
are rendered with llama-cpp-python's own code (its Jinja environment, its built-in
formats), exactly as the server renders them.

`prepare_messages` is the one place a request's history is made renderable: content
null (what OpenAI clients send beside tool calls) becomes empty text, and call
arguments sent as JSON text become the objects templates expect (`tojson` of the text
would write a quoted string), as vLLM and llama.cpp's own server do.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from distillery.workers.llm.gguf import TEMPLATE_KEY, read_chat_templates
from distillery.workers.llm.tool_syntax import TOOL_CALL_SYNTAXES, ToolCallSyntax

if TYPE_CHECKING:
    from llama_cpp.llama_types import ChatCompletionRequestMessage, ChatCompletionTool

    from distillery.workers.llm.config import ModelConfig

TOOL_USE_KEY = f"{TEMPLATE_KEY}.tool_use"  # a model's separate template for tool use
# llama-cpp-python's fallback when a GGUF carries no template and no chat_format is set.
DEFAULT_CHAT_FORMAT = "llama-2"

# Probe contents: marks no template writes by itself, found again in the rendering.
_SYSTEM = "probe-system-7qx"
_USER = "probe-user-7qx"
_ASSISTANT = "probe-assistant-7qx"
_USER2 = "probe-user2-7qx"
_TOOL_NAME = "probe_function_7qx"
_TOOL_DESCRIPTION = "probe-description-7qx"
_ARGUMENT = "probe-argument-7qx"
_TOOL_RESULT = "probe-result-7qx"
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": _TOOL_NAME,
            "description": _TOOL_DESCRIPTION,
            "parameters": {
                "type": "object",
                "properties": {"value": {"type": "string", "description": "a value"}},
                "required": ["value"],
            },
        },
    }
]
_NATIVE_PROBE = [
    {"role": "system", "content": _SYSTEM},
    {"role": "user", "content": _USER},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_probe",
                "type": "function",
                "function": {"name": _TOOL_NAME, "arguments": json.dumps({"value": _ARGUMENT})},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_probe", "content": _TOOL_RESULT},
]
_PROMPT_PROBE = [
    {"role": "system", "content": _SYSTEM},
    {"role": "user", "content": _USER},
    {"role": "assistant", "content": _ASSISTANT},
    {"role": "user", "content": _USER2},
]
_LLAMA3_CALL = re.compile(
    r'\{\s*"name"\s*:\s*"' + _TOOL_NAME + r'"\s*,\s*"(?:parameters|arguments)"\s*:'
)

# (messages, tools) -> the prompt text the server would generate from.
Formatter = Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str]


class TemplateRefused(ValueError):
    """The chat template raised (its own `raise_exception`, or a Jinja error) on a
    conversation."""


@dataclass(frozen=True)
class FormatCheck:
    """What a model's chat formatting can carry (see the module docstring)."""

    source: str  # which formatting, in words: "its GGUF's chat template", ...
    syntax: ToolCallSyntax | None = None  # native: the tool-call syntax found
    problems: list[str] = field(default_factory=list)  # each a reason it cannot be used
    template: str | None = None  # the Jinja source, when the formatting is a template

    @property
    def ok(self) -> bool:
        return not self.problems


def prepare_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history as chat templates expect it (see the module docstring); the
    request's own messages are not changed."""
    out = []
    for message in messages:
        message = dict(message)
        if message.get("content") is None:
            message["content"] = ""
        calls = message.get("tool_calls")
        if isinstance(calls, list):
            message["tool_calls"] = [_renderable_call(c) for c in calls]
        out.append(message)
    return out


def _renderable_call(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = dict(call["function"])
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            decoded = json.loads(arguments)
        except ValueError:  # the model's invalid JSON: rendered as it wrote it
            decoded = None
        if isinstance(decoded, dict):
            function["arguments"] = decoded
    return {**call, "function": function}


# ------------------------------------------------------------------ formatters


def template_formatter(template: str, bos_token: str = "", eos_token: str = "") -> Formatter:
    """A Jinja chat template as llama-cpp-python's server renders it (its
    `Jinja2ChatFormatter`: Transformers' environment, `tojson`, `raise_exception`)."""
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    try:
        formatter = Jinja2ChatFormatter(template=template, eos_token=eos_token, bos_token=bos_token)
    except Exception as exc:  # jinja2's syntax errors
        raise TemplateRefused(f"the template does not compile: {exc}") from None

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            # A request's messages and tools are JSON as the client sent them (what the
            # template must be tried on, well-formed or not); the formatter's TypedDicts
            # name the OpenAI shapes, which it hands to the template unchecked.
            return formatter(
                messages=cast("list[ChatCompletionRequestMessage]", prepare_messages(messages)),
                tools=cast("list[ChatCompletionTool] | None", tools),
            ).prompt
        except Exception as exc:  # raise_exception's ValueError, jinja2's errors
            raise TemplateRefused(f"{type(exc).__name__}: {exc}") from None

    return render


class _Prompt(Exception):
    def __init__(self, prompt: str) -> None:
        self.prompt = prompt


class _PromptCatcher:
    """Stands in for the model in a built-in handler: the handler formats the
    conversation, then hands the prompt to the model, which is where it is caught."""

    verbose = False

    def tokenize(self, text: bytes, *args: Any, **kwargs: Any) -> list[int]:
        raise _Prompt(text.decode("utf-8", errors="replace"))

    def create_completion(self, prompt: Any = None, *args: Any, **kwargs: Any) -> Any:
        raise _Prompt(prompt if isinstance(prompt, str) else "")


def builtin_formatter(name: str) -> Formatter | None:
    """llama-cpp-python's hand-written format `name` (`--chat_format`), or None when
    it has no such format or its prompt cannot be caught this way (multimodal and
    functionary handlers need a real model)."""
    from llama_cpp.llama_chat_format import LlamaChatCompletionHandlerRegistry

    registry = LlamaChatCompletionHandlerRegistry()
    if name not in registry._chat_handlers:  # no public membership test
        return None
    handler = registry.get_chat_completion_handler_by_name(name)

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        try:
            handler(llama=_PromptCatcher(), messages=prepare_messages(messages), tools=tools)
        except _Prompt as caught:
            return caught.prompt
        except Exception as exc:
            raise TemplateRefused(f"{type(exc).__name__}: {exc}") from None
        raise TemplateRefused(f"chat_format {name} could not be rendered without a model")

    try:
        render(_PROMPT_PROBE, None)
    except TemplateRefused:
        return None
    return render


def guessed_chat_format(template: str) -> str | None:
    """The built-in format llama-cpp-python's server uses instead of a GGUF template it
    recognises (its `guess_chat_format_from_gguf_metadata`), else None."""
    from llama_cpp.llama_chat_format import guess_chat_format_from_gguf_metadata

    return guess_chat_format_from_gguf_metadata({TEMPLATE_KEY: template})


# ------------------------------------------------------------------ the probes


def tool_call_syntax(render: Formatter) -> tuple[ToolCallSyntax | None, list[str]]:
    """(the tool-call syntax, reasons it cannot do native tool calling) of a format."""
    try:
        prompt = render(_NATIVE_PROBE, _PROBE_TOOLS)
    except TemplateRefused as exc:
        return None, [f"it fails on a conversation with a tool call and its result ({exc})"]
    problems = []
    if _SYSTEM not in prompt:
        problems.append("it drops system messages")
    if _TOOL_RESULT not in prompt:
        problems.append("it drops tool messages (the results of calls)")
    if _TOOL_DESCRIPTION not in prompt:
        problems.append("it never shows the tools to the model")
    start = prompt.rfind(_USER)
    end = prompt.find(_TOOL_RESULT, start) if start >= 0 else -1
    turn = prompt[start : end if end >= 0 else len(prompt)] if start >= 0 else ""
    syntax: ToolCallSyntax | None = None
    if _ARGUMENT not in turn:
        problems.append("it has no tool-call syntax (an assistant's tool call is not rendered)")
    elif "<tool_call>" in turn[: turn.find(_ARGUMENT)]:
        syntax = "hermes"
    elif _LLAMA3_CALL.search(turn):
        syntax = "llama3_json"
    else:
        problems.append(
            "it writes tool calls in a syntax distillery does not parse (supported: "
            f"{', '.join(TOOL_CALL_SYNTAXES)}); rendered: {turn[:200]!r}"
        )
    return (syntax if not problems else None), problems


def prompt_format_problems(render: Formatter) -> list[str]:
    """Reasons a format cannot carry the prompt format's conversations."""
    try:
        prompt = render(_PROMPT_PROBE, None)
    except TemplateRefused as exc:
        return [f"it fails on a system + user + assistant conversation ({exc})"]
    return [] if _SYSTEM in prompt else ["it drops system messages"]


def check_llama_cpp_format(
    cfg: ModelConfig,
    gguf_templates: dict[str, str],
    template_file_text: str | None = None,
    model_file: str = "its GGUF file",
) -> FormatCheck:
    """What `cfg`'s llama.cpp server will format its requests with, and whether that
    can carry its action format. `gguf_templates`: the model file's templates
    (`gguf.read_chat_templates`), `model_file` its name in messages;
    `template_file_text`: `cfg.chat_template_file`'s text (read from it when None)."""
    native = cfg.action_format == "native"
    template: str | None = None
    builtin: str | None = None
    if cfg.chat_template_file:
        source = f"chat_template_file {cfg.chat_template_file}"
        if template_file_text is None:
            template_file_text = Path(cfg.chat_template_file).read_text()
        template = template_file_text
    elif cfg.chat_format:
        source, builtin = f"chat_format {cfg.chat_format}", cfg.chat_format
    elif native and TOOL_USE_KEY in gguf_templates:
        source = f"the tool_use chat template of {model_file}"
        template = gguf_templates[TOOL_USE_KEY]
    elif TEMPLATE_KEY in gguf_templates:
        source, template = f"the chat template of {model_file}", gguf_templates[TEMPLATE_KEY]
        if not native:  # the server substitutes a built-in format for one it recognises
            builtin = guessed_chat_format(template)
            if builtin:
                source, template = f"{source} (served as chat_format {builtin})", None
    elif native:
        return FormatCheck(model_file, problems=["it carries no chat template"])
    else:
        source = f"llama-cpp-python's fallback chat_format {DEFAULT_CHAT_FORMAT}"
        builtin = DEFAULT_CHAT_FORMAT

    if template is not None:
        try:
            render = template_formatter(template)
        except TemplateRefused as exc:
            return FormatCheck(source, problems=[str(exc)])
    else:
        assert builtin is not None
        found = builtin_formatter(builtin)
        if found is None:
            if native:
                problem = f"llama-cpp-python has no chat_format {builtin} it can render"
                return FormatCheck(source, problems=[problem])
            return FormatCheck(source)  # a format only a real model renders: not checked
        render = found
    if native:
        syntax, problems = tool_call_syntax(render)
        if builtin and not problems:  # none of the built-ins renders calls, so far
            problems = ["distillery parses tool calls only from a Jinja template"]
        return FormatCheck(source, syntax, problems, template)
    return FormatCheck(source, problems=prompt_format_problems(render), template=template)


def check_model_file(cfg: ModelConfig, gguf_path: str | Path) -> FormatCheck:
    """`check_llama_cpp_format` with the templates read from the model file."""
    return check_llama_cpp_format(cfg, read_chat_templates(gguf_path), model_file=str(gguf_path))


def refusal(role: str | None, cfg: ModelConfig, check: FormatCheck) -> tuple[str, str]:
    """(what is wrong, what to change) for a failed check, naming the model (as
    `role`=name, e.g. student=qwen2.5-0.5b), the reason and the setting; the keys are
    the role's (`student.action_format`), or the model config's when the role is not
    known (the server's own check)."""
    who = f"{role}={cfg.name}" if role else cfg.name
    what = (
        f"{who} (backend llama_cpp, action_format {cfg.action_format}): "
        f"{check.source} cannot be used: {'; '.join(check.problems)}"
    )
    prefix = f"{role}." if role else "the model config's "
    if cfg.action_format == "native":
        fix = (
            f"set {prefix}action_format=prompt, or {prefix}chat_template_file to a Jinja "
            "template with a tool-call syntax (hermes <tool_call> or Llama 3.x JSON)"
        )
        if cfg.chat_format:
            fix = f"unset {prefix}chat_format (native mode uses the model's own template), " + fix
    else:
        fix = (
            f"set {prefix}chat_template_file to a Jinja template that keeps the system "
            "message (for a model without a system role, one that puts it into the first "
            "user message, as Gemma 3's own template does)"
        )
        if cfg.chat_format:
            fix = f"unset {prefix}chat_format (the model's own template), or " + fix
    return what, fix
