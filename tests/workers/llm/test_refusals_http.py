"""The chat client against a scripted server replaying OpenAI's exact refusals (real
HTTP): configuration errors at once and never retried, overflows as the model's."""

from __future__ import annotations

import asyncio

import pytest

from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.llm.client import ChatClient
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ContextOverflow, RequestConfigError, RequestRejected
from tests.workers.llm.test_compat import shipped

USER = [{"role": "user", "content": "hi"}]


def _ask(cfg: ModelConfig, url: str, messages=USER):
    client = ChatClient.from_config(cfg, url)

    async def go():
        try:
            return await client.chat(
                messages,
                temperature=cfg.temperature,
                max_tokens=cfg.max_tokens,
                seed=cfg.seed,
                top_p=cfg.top_p,
            )
        finally:
            await client.aclose()

    return asyncio.run(go())


def _gpt5(url: str, **update) -> ModelConfig:
    base = shipped("gpt5_mini").model_dump()
    return ModelConfig.model_validate(
        {**base, "base_url": url, "api_key_env": None, "retry_backoff_s": 0, **update}
    )


def test_the_shipped_gpt5_config_is_accepted_and_the_old_one_stops_at_once():
    with run_stub_server("tests.support.openai_errors:gpt5") as url:
        result = _ask(_gpt5(url), url)
        assert result.text == "A plain answer." and result.usage.reasoning_tokens == 64
        # What the config used to send: max_tokens and temperature 1.0.
        old = _gpt5(url, token_limit_param="max_tokens", max_tokens=4096)
        with pytest.raises(RequestConfigError) as info:
            _ask(old, url)
        assert stub_stats(url)["requests"] == 2  # refused once, never retried
    text = str(info.value)
    assert "gpt-5-mini" in text and "Change: token_limit_param" in text
    assert "Unsupported parameter: 'max_tokens' is not supported with this model" in text


def test_unsupported_temperature_names_the_temperature_key():
    with run_stub_server("tests.support.openai_errors:gpt5") as url:
        cfg = _gpt5(url, sampling_params=["temperature"], temperature=0.0)
        with pytest.raises(RequestConfigError, match=r"does not support 0.0.*Change: temperature"):
            _ask(cfg, url)


@pytest.mark.parametrize(
    ("script", "key"),
    [("model_not_found", "model"), ("invalid_api_key", "api_key_env")],
)
def test_unknown_model_and_refused_key_are_configuration_errors(script, key):
    with run_stub_server(f"tests.support.openai_errors:{script}") as url:
        with pytest.raises(RequestConfigError, match=f"Change: {key}"):
            _ask(_gpt5(url), url)
        assert stub_stats(url)["requests"] == 1


def test_exhausted_quota_is_not_retried_as_a_rate_limit():
    with run_stub_server("tests.support.openai_errors:insufficient_quota") as url:
        with pytest.raises(RequestConfigError, match="exceeded your current quota"):
            _ask(_gpt5(url), url)
        assert stub_stats(url)["requests"] == 1


def test_context_overflow_is_a_rejection_of_the_conversation():
    later = [*USER, {"role": "assistant", "content": "x"}, {"role": "user", "content": "y"}]
    with (
        run_stub_server("tests.support.openai_errors:overflow_after_first_call") as url,
        pytest.raises(ContextOverflow, match="maximum context length is 128000"),
    ):
        _ask(_gpt5(url), url, later)
    with run_stub_server("tests.support.openai_errors:vllm_overflow") as url:
        qwen = ModelConfig(name="q", backend="external", model="q", base_url=url)
        with pytest.raises(ContextOverflow) as info:
            _ask(qwen, url, later)
    assert isinstance(info.value, RequestRejected)
