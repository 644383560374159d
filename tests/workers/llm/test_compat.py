"""How model configs shape requests, and how refusals are classified (issue 8 item 1)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import to_config
from distillery.workers.llm.compat import (
    RequestShape,
    ServerError,
    build_request,
    classify_refusal,
)
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ContextOverflow, RequestConfigError, RequestRejected
from tests.support import openai_errors as oe

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
LATER = [*MESSAGES, {"role": "assistant", "content": "[ls()]"}, {"role": "user", "content": "r"}]


def shipped(name: str, role: str = "teacher") -> ModelConfig:
    (_, composed), *_ = sweep_points(rewrite_role_overrides([f"{role}={name}"]), False)
    return getattr(to_config(composed), role)


def episode_request(cfg: ModelConfig, messages=MESSAGES) -> dict:
    """The body an episode step sends for this model (as LlmPolicy asks for it)."""
    return build_request(
        RequestShape.of(cfg),
        cfg.model,
        messages,
        tools=[{"type": "function", "function": {"name": "ls"}}],
        temperature=cfg.temperature,
        max_tokens=cfg.max_tokens,
        seed=cfg.seed,
        top_p=cfg.top_p,
    )


@pytest.mark.parametrize("name", ["gpt5_mini", "gpt5_5"])
def test_shipped_openai_reasoning_configs_send_only_what_the_api_accepts(name):
    cfg = shipped(name)
    assert cfg.token_limit_param == "max_completion_tokens"
    request = episode_request(cfg)
    # The exact refusals OpenAI answers a GPT-5 model's request with cannot happen:
    assert oe.gpt5_refusal(request) is None
    assert not {"max_tokens", "temperature", "top_p", "seed"} & set(request)
    capped = episode_request(cfg.model_copy(update={"max_tokens": 8000}))
    assert capped["max_completion_tokens"] == 8000 and "max_tokens" not in capped


def test_a_sampling_value_the_server_refuses_is_refused_before_anything_starts():
    with pytest.raises(ValidationError, match="accepts only its default temperature"):
        shipped("gpt5_mini").model_validate(
            {**shipped("gpt5_mini").model_dump(), "temperature": 0.0}
        )
    overrides = rewrite_role_overrides(["teacher=gpt5_mini", "teacher.temperature=0.5"])
    (_, composed), *_ = sweep_points(overrides, False)
    with pytest.raises(ValueError, match="invalid config at teacher: temperature=0.5 is set"):
        to_config(composed)


def test_vllm_students_send_the_thinking_switch_and_their_sampling():
    qwen = shipped("qwen3_4b", "student")
    request = episode_request(qwen)
    assert request["chat_template_kwargs"] == {"enable_thinking": False}
    assert request["max_tokens"] == 2048 and request["temperature"] == 0.0
    assert request["seed"] == 0
    llama = episode_request(shipped("llama3_1_8b", "student"))
    assert "chat_template_kwargs" not in llama  # no thinking mode: nothing sent


def test_reasoning_effort_and_extra_body_are_sent_and_cannot_shadow_our_fields():
    cfg = shipped("gpt5_mini").model_copy(
        update={"reasoning_effort": "low", "extra_body": {"service_tier": "flex"}}
    )
    request = episode_request(cfg)
    assert request["reasoning_effort"] == "low" and request["service_tier"] == "flex"
    base = shipped("gpt5_mini").model_dump()
    with pytest.raises(ValidationError, match="extra_body may not set"):
        ModelConfig.model_validate({**base, "extra_body": {"max_tokens": 5}})


def test_thinking_and_reasoning_parser_combinations_are_checked():
    qwen = shipped("qwen3_4b", "student").model_dump()
    with pytest.raises(ValidationError, match="needs reasoning_parser"):
        ModelConfig.model_validate({**qwen, "enable_thinking": True, "reasoning_parser": None})
    with pytest.raises(ValidationError, match="vLLM launch flag"):
        ModelConfig.model_validate({**shipped("gpt5_mini").model_dump(), "reasoning_parser": "x"})


# ------------------------------------------------------------------ classification


def _classify(status, body, messages=MESSAGES, request=None):
    cfg = ModelConfig(
        name="gpt-5-mini", backend="external", model="gpt-5-mini", base_url="http://h/v1"
    )
    request = request or episode_request(cfg, messages)
    return classify_refusal(status, body, RequestShape.of(cfg), request, "http://h/v1")


@pytest.mark.parametrize(
    ("status", "body", "key"),
    [
        (400, oe.UNSUPPORTED_MAX_TOKENS, "token_limit_param"),
        (400, oe.unsupported_temperature(0.0), "temperature"),
        (404, oe.MODEL_NOT_FOUND, "model"),
        (401, oe.INVALID_API_KEY, "api_key_env"),
    ],
)
def test_refusals_of_how_we_built_the_request_are_configuration_errors(status, body, key):
    # Even late in an episode: the model did not cause these.
    error = _classify(status, body, LATER)
    assert isinstance(error, RequestConfigError) and not isinstance(error, RequestRejected)
    text = str(error)
    assert "gpt-5-mini" in text  # the model
    assert body["error"]["message"] in text  # the server's own words
    assert f"Change: {key}" in text  # the key to change


def test_context_overflow_is_the_models_failure_whoever_words_it():
    for body in (oe.CONTEXT_LENGTH_EXCEEDED, oe.VLLM_CONTEXT_OVERFLOW):
        error = _classify(400, body, LATER)
        assert isinstance(error, ContextOverflow) and isinstance(error, RequestRejected)
        assert "maximum context length" in str(error)


def test_an_unexplained_400_is_ours_before_the_model_spoke_and_the_models_after():
    body = {"error": {"message": "Invalid 'messages[3]': bad", "param": "messages", "code": None}}
    assert isinstance(_classify(400, body, MESSAGES), RequestConfigError)
    late = _classify(400, body, LATER)
    assert type(late) is RequestRejected


def test_a_refused_tool_schema_on_a_first_request_is_ours():
    error = _classify(400, oe.INVALID_TOOL_SCHEMA, MESSAGES)
    assert isinstance(error, RequestConfigError)
    assert "holds nothing the model wrote" in str(error)


def test_server_errors_parse_from_every_shape_servers_send():
    assert ServerError.parse(400, b"plain text failure").message == "plain text failure"
    parsed = ServerError.parse(400, oe.UNSUPPORTED_MAX_TOKENS)
    assert (parsed.param, parsed.code) == ("max_tokens", "unsupported_parameter")
    detail = ServerError.parse(422, '{"detail": [{"loc": ["body", "x"], "msg": "bad"}]}')
    assert "bad" in detail.message
    assert ServerError.parse(400, oe.VLLM_CONTEXT_OVERFLOW).code == "400"
