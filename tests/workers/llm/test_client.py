"""ChatClient against the scripted stub server over real HTTP."""

from __future__ import annotations

import asyncio
import json

import pytest

from distillery.testing.scripted_server import run_stub_server, stub_stats
from distillery.workers.llm.client import ChatClient, _encode_request, api_key_from_env
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.replies import parse_completion
from distillery.workers.llm.types import InfraError, RequestRejected


def _chat(url, script_kwargs=None, **client_kwargs):
    client = ChatClient(url, "stub", backoff_s=0, **client_kwargs)

    async def go():
        try:
            return await client.chat([{"role": "user", "content": "hi"}], **(script_kwargs or {}))
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_text_reply_with_usage():
    with run_stub_server("distillery.testing.scripts:always_text") as url:
        result = _chat(url)
    assert result.text == "Hello from the stub."
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens > 0
    assert result.attempts == 1 and result.endpoint == url and result.latency_s > 0


def test_tool_calls_are_normalised():
    with run_stub_server("distillery.testing.scripts:fixed_tool_call") as url:
        result = _chat(url, {"tools": [{"type": "function", "function": {"name": "ls"}}]})
    (call,) = result.tool_calls
    assert call["name"] == "ls" and json.loads(call["arguments"]) == {"a": True}
    assert call["id"]


def test_server_errors_are_retried_and_counted():
    with run_stub_server("distillery.testing.scripts:fail_twice_then_text") as url:
        result = _chat(url, max_retries=3)
        assert stub_stats(url)["requests"] == 3
    assert result.attempts == 3 and result.text == "ok after 3 attempts"


def test_persistent_server_errors_become_infra_errors():
    with (
        run_stub_server("distillery.testing.bfcl_scripts:server_error") as url,
        pytest.raises(InfraError, match="failed 3 times"),
    ):
        _chat(url, max_retries=2)


def test_bad_request_is_rejected_without_retry():
    with run_stub_server("distillery.testing.scripts:bad_request") as url:
        with pytest.raises(RequestRejected, match="context length"):
            _chat(url, max_retries=3)
        assert stub_stats(url)["requests"] == 1


def test_unreachable_and_timeout_are_infra_errors():
    with pytest.raises(InfraError):
        _chat("http://127.0.0.1:9/v1", max_retries=1)
    with (
        run_stub_server("distillery.testing.scripts:slow_text") as url,
        pytest.raises(InfraError, match="Timeout"),
    ):
        _chat(url, max_retries=0, timeout_s=0.5)


def test_api_key_comes_from_the_named_variable_and_is_never_shown(monkeypatch):
    monkeypatch.setenv("DISTILLERY_TEST_KEY", "sk-secret-value")
    cfg = ModelConfig(
        name="x",
        backend="external",
        model="m",
        base_url="http://h/v1",
        api_key_env="DISTILLERY_TEST_KEY",
    )
    client = ChatClient.from_config(cfg, "http://h/v1")
    assert "sk-secret" not in repr(client)
    assert client._client.api_key == "sk-secret-value"
    monkeypatch.delenv("DISTILLERY_TEST_KEY")
    with pytest.raises(InfraError, match="DISTILLERY_TEST_KEY"):
        api_key_from_env("DISTILLERY_TEST_KEY")
    assert api_key_from_env(None) is None


def test_request_body_is_what_openai_would_send_byte_for_byte():
    import datetime

    from openai._utils._json import openapi_dumps

    big = 'a "quoted" \\ line\nwith unicode é \u2028 ' * 200  # long: encoded once, reused
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    request = {
        "model": "m",
        "messages": [
            {"role": "system", "content": big},
            {"role": "user", "content": "héllo"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": big},
            {"role": "user", "content": [{"type": "text", "text": big}]},
        ],
        "temperature": 0.0,
        "max_tokens": 5,
        "tools": [tool, tool],
        "seed": 3,
        "extra": {"at": datetime.datetime(2020, 1, 2, 3, 4, 5)},
    }
    for _ in range(2):  # cold and cached
        assert _encode_request(request) == openapi_dumps(request)
    with pytest.raises(ValueError):
        _encode_request({"messages": [{"role": "user", "content": float("nan")}]})


def test_malformed_completion_is_an_infra_error():
    for body in (b"<html>bad gateway</html>", b"{}", b'{"choices": []}'):
        with pytest.raises(InfraError, match="malformed"):
            parse_completion(body, 0.1, 1, "http://h/v1")
    result = parse_completion(
        b'{"choices": [{"message": {"content": null, "tool_calls": [{"id": "x", "type": '
        b'"custom"}, {"id": "y", "function": {"name": "g", "arguments": ""}}]}}]}',
        0.1,
        1,
        "http://h/v1",
    )
    assert result.text == "" and result.usage.prompt_tokens == 0
    assert result.tool_calls == [{"id": "y", "name": "g", "arguments": "{}"}]
    assert result.finish_reason is None
