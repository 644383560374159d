"""Scripts for the stub server that refuse requests the way real servers do, with the
exact error bodies OpenAI (and vLLM) send; see distillery/testing/scripted_server.py for
the script protocol.

`gpt5` plays an OpenAI reasoning model: it refuses `max_tokens` and any temperature
but the default exactly as the API does, and otherwise is a perfect BFCL agent (tool
requests) or answers plain text (memory builder prompts).
"""

from __future__ import annotations

from typing import Any

UNSUPPORTED_MAX_TOKENS = {
    "error": {
        "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
        "Use 'max_completion_tokens' instead.",
        "type": "invalid_request_error",
        "param": "max_tokens",
        "code": "unsupported_parameter",
    }
}


def unsupported_temperature(value: Any) -> dict[str, Any]:
    return {
        "error": {
            "message": f"Unsupported value: 'temperature' does not support {value} with this "
            "model. Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }


MODEL_NOT_FOUND = {
    "error": {
        "message": "The model `gpt-5-mni` does not exist or you do not have access to it.",
        "type": "invalid_request_error",
        "param": None,
        "code": "model_not_found",
    }
}
INVALID_API_KEY = {
    "error": {
        "message": "Incorrect API key provided: sk-test-****1234. You can find your API key "
        "at https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error",
        "param": None,
        "code": "invalid_api_key",
    }
}
CONTEXT_LENGTH_EXCEEDED = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 131072 tokens (129540 in the messages, 1532 in the "
        "functions). Please reduce the length of the messages or functions.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
# vLLM's own wording of the same (its error object, HTTP 400).
VLLM_CONTEXT_OVERFLOW = {
    "object": "error",
    "message": "This model's maximum context length is 32768 tokens. However, you requested "
    "34816 tokens (32768 in the messages, 2048 in the completion). Please reduce the length "
    "of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}
INSUFFICIENT_QUOTA = {
    "error": {
        "message": "You exceeded your current quota, please check your plan and billing details.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}


def _refuse(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"status": status, "body": body}


def gpt5_refusal(request: dict[str, Any]) -> dict[str, Any] | None:
    """What the OpenAI API answers a GPT-5 model's request it refuses; None: accepted."""
    if "max_tokens" in request:
        return _refuse(400, UNSUPPORTED_MAX_TOKENS)
    if "temperature" in request and request["temperature"] != 1:
        return _refuse(400, unsupported_temperature(request["temperature"]))
    return None


def gpt5(request: dict[str, Any]) -> dict[str, Any]:
    refusal = gpt5_refusal(request)
    if refusal is not None:
        return refusal
    if request.get("tools"):
        from distillery.testing.bfcl_scripts import replay_native

        return replay_native(request)
    return {"content": "A plain answer.", "reasoning_tokens": 64}


def model_not_found(request: dict[str, Any]) -> dict[str, Any]:
    return _refuse(404, MODEL_NOT_FOUND)


def invalid_api_key(request: dict[str, Any]) -> dict[str, Any]:
    return _refuse(401, INVALID_API_KEY)


def insufficient_quota(request: dict[str, Any]) -> dict[str, Any]:
    return _refuse(429, INSUFFICIENT_QUOTA)


def overflow_after_first_call(request: dict[str, Any]) -> dict[str, Any]:
    """A perfect agent until the conversation holds a reply of its own, then the
    history is 'too long' for its context window (OpenAI's body)."""
    if any(m.get("role") == "assistant" for m in request["messages"]):
        return _refuse(400, CONTEXT_LENGTH_EXCEEDED)
    from distillery.testing.bfcl_scripts import replay_native

    return replay_native(request)


def vllm_overflow(request: dict[str, Any]) -> dict[str, Any]:
    return _refuse(400, VLLM_CONTEXT_OVERFLOW)


INVALID_TOOL_SCHEMA = {
    "error": {
        "message": "Invalid schema for function 'cd': In context=('properties', 'folder'), "
        "'float' is not valid under any of the given schemas.",
        "type": "invalid_request_error",
        "param": "tools[0].function.parameters",
        "code": "invalid_function_parameters",
    }
}


def invalid_tool_schema(request: dict[str, Any]) -> dict[str, Any]:
    """Accepts plain requests (the preflight), refuses every one carrying the tools:
    a refusal only the episodes' own requests meet."""
    if request.get("tools"):
        return _refuse(400, INVALID_TOOL_SCHEMA)
    return {"content": "OK"}
