"""How each model's server wants a request, and what its refusals mean.

A model config says how its server takes a chat request (`RequestShape`): what the
token cap is called (`max_tokens`, or `max_completion_tokens` for OpenAI's reasoning
models), which sampling parameters it accepts, the reasoning effort, the thinking
switch (`chat_template_kwargs.enable_thinking`, as vLLM and llama.cpp take it) and
extra body fields. `build_request` is the one place a request body is assembled.

A refusal is classified by who caused it (`classify_refusal`):

- the request's construction (an unsupported parameter or value, a refused key, an
  unknown model or path; or any 400 to a request that holds nothing the model wrote):
  `RequestConfigError`, which stops the run with the server's own words and the
  config key to change;
- the conversation outgrowing the context window: `ContextOverflow`, the model's
  failure, scored with its own termination reason;
- anything else the conversation caused: `RequestRejected`, scored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.llm.config import SAMPLING_PARAMS, ModelConfig
from distillery.workers.llm.types import ContextOverflow, RequestConfigError, RequestRejected

# The only message of the preflight request each agent stage sends first (shaped like
# its episodes' requests): any model answers it in a few tokens.
PREFLIGHT_PROMPT = "Reply with the single word OK."


@dataclass(frozen=True)
class RequestShape:
    """How one model's server wants its requests (derived from its ModelConfig)."""

    model_name: str = ""  # the config's label, for messages
    token_limit_param: str = "max_tokens"
    sampling_params: tuple[str, ...] = SAMPLING_PARAMS
    reasoning_effort: str | None = None
    enable_thinking: bool | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: ModelConfig) -> RequestShape:
        return cls(
            model_name=cfg.name,
            token_limit_param=cfg.token_limit_param,
            sampling_params=tuple(cfg.sampling_params),
            reasoning_effort=cfg.reasoning_effort,
            enable_thinking=cfg.enable_thinking,
            extra_body=dict(cfg.extra_body),
        )


def build_request(
    shape: RequestShape,
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    top_p: float | None = None,
    response_format: dict[str, Any] | None = None,
    extra_body: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The request body: sampling values that are None, or that the server does not
    accept, are left out (the server's default applies; the config validator refuses
    a set value the server does not accept, so nothing is dropped silently there)."""
    request: dict[str, Any] = {"model": model, "messages": messages}
    sampling = {"temperature": temperature, "top_p": top_p}
    for name, value in sampling.items():
        if value is not None and name in shape.sampling_params:
            request[name] = value
    if max_tokens is not None:
        request[shape.token_limit_param] = max_tokens
    if tools:
        request["tools"] = tools
    if seed is not None and "seed" in shape.sampling_params:
        request["seed"] = seed
    if response_format is not None:
        request["response_format"] = response_format
    if shape.reasoning_effort is not None:
        request["reasoning_effort"] = shape.reasoning_effort
    if shape.enable_thinking is not None:
        request["chat_template_kwargs"] = {"enable_thinking": shape.enable_thinking}
    if shape.extra_body:
        request.update(shape.extra_body)
    if extra_body:
        request.update(extra_body)
    return request


# ------------------------------------------------------------------------ refusals

# Context-window overflows as OpenAI, vLLM and llama.cpp word them.
_CONTEXT_PATTERNS = re.compile(
    r"context[_ ]length[_ ]exceeded|maximum context length|context window|"
    r"exceeds? the (?:model's )?(?:maximum )?context|prompt is too long|"
    r"too many tokens|input (?:is )?too long",
    re.IGNORECASE,
)
# Which config key decides a request field the server named as the problem.
_KEY_OF_PARAM = {
    "max_tokens": "token_limit_param (this server wants max_completion_tokens)",
    "max_completion_tokens": "token_limit_param (this server wants max_tokens)",
    "temperature": "temperature (null: the server's default) / sampling_params",
    "top_p": "top_p (null: the server's default) / sampling_params",
    "seed": "seed (null: not sent) / sampling_params",
    "reasoning_effort": "reasoning_effort",
    "chat_template_kwargs": "enable_thinking (null: not sent)",
    "model": "model (the served model id)",
    "response_format": "memory builder response_format (server support)",
}
_STATUS_KEYS = {
    401: "api_key_env (the variable holding this endpoint's key) / base_url",
    403: "api_key_env (this key's permissions for the model) / model",
    404: "model (the served model id) and base_url (it must end in /v1)",
}


@dataclass(frozen=True)
class ServerError:
    """What a server said when it refused a request (OpenAI's error body)."""

    status: int
    message: str
    type: str | None = None
    param: str | None = None
    code: str | None = None

    @classmethod
    def parse(cls, status: int, body: Any) -> ServerError:
        """From the error body: OpenAI's {"error": {...}}, vLLM's and llama.cpp's
        variants of it, FastAPI's {"detail": ...}, or plain text."""
        data = body
        if isinstance(body, bytes | str):
            try:
                data = json.loads(body)
            except (ValueError, TypeError):
                text = body.decode(errors="replace") if isinstance(body, bytes) else body
                return cls(status, text.strip()[:2000])
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            data = data["error"]
        if not isinstance(data, dict):
            return cls(status, str(data)[:2000])
        message = data.get("message", data.get("detail", data))
        if not isinstance(message, str):
            message = json.dumps(message, default=str)
        code = data.get("code")
        return cls(
            status,
            message[:2000],
            type=_str_or_none(data.get("type")),
            param=_str_or_none(data.get("param")),
            code=None if code is None else str(code),
        )


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def is_context_overflow(error: ServerError) -> bool:
    if error.code == "context_length_exceeded":
        return True
    return bool(_CONTEXT_PATTERNS.search(error.message))


def _named_param(error: ServerError, request: dict[str, Any]) -> str | None:
    """The request field the server blamed: its `param`, or one named in the text."""
    if error.param:
        return error.param.split(".", 1)[0].split("[", 1)[0]
    for name in _KEY_OF_PARAM:
        if name in request and re.search(rf"['\"`]?\b{re.escape(name)}\b['\"`]?", error.message):
            return name
    return None


def _is_construction_error(error: ServerError, param: str | None) -> bool:
    """A refusal of a field or value we chose, not of what the conversation holds."""
    code = (error.code or "").lower()
    if code in {"unsupported_parameter", "unsupported_value", "model_not_found"}:
        return True
    text = error.message.lower()
    if re.search(r"unsupported (?:parameter|value)|unrecognized request argument", text):
        return True
    if "does not support" in text or "not supported" in text:
        return param is not None and param != "messages"
    if "extra inputs are not permitted" in text or "extra_forbidden" in text:
        return True
    return (param in _KEY_OF_PARAM and param != "model") or code == "invalid_api_key"


def _key_to_change(error: ServerError, param: str | None) -> str:
    unsupported = (error.code or "") == "unsupported_parameter" or bool(
        re.search(r"unsupported parameter|unrecognized request argument", error.message, re.I)
    )
    if param in ("max_tokens", "max_completion_tokens") and not unsupported:
        return "max_tokens (the cap's value)"
    return _KEY_OF_PARAM.get(param or "", "extra_body (a field this server does not take)")


def classify_refusal(
    status: int, body: Any, shape: RequestShape, request: dict[str, Any], endpoint: str
) -> Exception:
    """The exception for a refused request (see the module docstring)."""
    error = ServerError.parse(status, body)
    who = f"{shape.model_name or request.get('model')} ({request.get('model')} at {endpoint})"
    said = f"HTTP {status}: {error.message}"
    if error.code:
        said += f" [code={error.code}]"
    if status in _STATUS_KEYS:
        return RequestConfigError(
            f"{who} refused the request: {said}. Change: {_STATUS_KEYS[status]}"
        )
    if status not in (400, 413, 422):  # 405, 415, ...: the endpoint, not the conversation
        return RequestConfigError(
            f"{who} refused the request: {said}. Change: base_url (an OpenAI-compatible "
            "/v1 endpoint)"
        )
    if is_context_overflow(error) or status == 413:
        return ContextOverflow(said)
    param = _named_param(error, request)
    if _is_construction_error(error, param):
        key = _key_to_change(error, param)
        return RequestConfigError(f"{who} refused the request: {said}. Change: {key}")
    if not any(m.get("role") == "assistant" for m in request.get("messages") or ()):
        # Nothing in it was written by the model: the refusal is of how we built it.
        return RequestConfigError(
            f"{who} refused a request that holds nothing the model wrote, so it is how "
            f"distillery built it: {said}. Check the model config (token_limit_param, "
            "sampling_params, extra_body) and the server's options"
        )
    return RequestRejected(said)
