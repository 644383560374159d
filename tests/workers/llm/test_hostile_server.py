"""ChatClient against every hostile reply of tests/support/hostile.py, over real HTTP:
each one is repaired, refused as the model's failure, or (not a completion at all)
an infrastructure error; never anything else, and never unbounded."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from distillery.testing.scripted_server import run_stub_server
from distillery.workers.llm.client import ChatClient
from distillery.workers.llm.types import ChatResult, InfraError, InvalidReply
from tests.support.hostile import MODES

TOOLS = [{"type": "function", "function": {"name": "cd", "parameters": {"type": "object"}}}]


@pytest.fixture(scope="module")
def hostile_url():
    with run_stub_server("tests.support.hostile:hostile") as url:
        yield url


def _ask(url: str, mode: str, **client_kwargs) -> ChatResult | Exception:
    from distillery.workers.envs.registry import make_benchmark

    task = make_benchmark("bfcl_multi_turn_base").load_tasks(task_ids=["multi_turn_base_0"])[0]
    messages = [{"role": "user", "content": task.turns[0]}]
    kwargs = {"max_retries": 0, "backoff_s": 0, **client_kwargs}
    client = ChatClient(url, mode, **kwargs)

    async def go():
        try:
            return await client.chat(messages, tools=list(task.tools))
        except (InfraError, InvalidReply) as exc:
            return exc
        finally:
            await client.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_hostile_reply_is_repaired_refused_or_an_infra_error(hostile_url, mode):
    expected, _ = MODES[mode]
    started = time.monotonic()
    outcome = _ask(hostile_url, mode, timeout_s=2.0)
    assert time.monotonic() - started < 15
    if expected == "repair":
        assert isinstance(outcome, ChatResult), outcome
        for text in (outcome.text, *(v for c in outcome.tool_calls for v in c.values())):
            assert isinstance(text, str) and "\x00" not in text
            text.encode("utf-8")
        ids = [c["id"] for c in outcome.tool_calls]
        assert len(set(ids)) == len(ids)
        assert all(0 <= n <= 10**9 for n in (outcome.usage.prompt_tokens,))
        for call in outcome.tool_calls:
            json.loads(call["arguments"])
    elif expected == "invalid":
        assert isinstance(outcome, InvalidReply), outcome
    else:
        assert isinstance(outcome, InfraError), outcome


def test_request_timeout_bounds_the_whole_request(hostile_url):
    # The body trickles a byte every 50 ms: no single read ever times out.
    started = time.monotonic()
    outcome = _ask(hostile_url, "body_trickle", timeout_s=1.0)
    assert isinstance(outcome, InfraError) and "Timeout" in str(outcome)
    assert time.monotonic() - started < 5


def test_an_endless_body_is_cut_at_the_size_cap(hostile_url):
    started = time.monotonic()
    outcome = _ask(hostile_url, "body_endless", max_response_bytes=256 * 1024)
    assert isinstance(outcome, InvalidReply) and "max_response_bytes=262144" in str(outcome)
    assert time.monotonic() - started < 10
    big = _ask(hostile_url, "body_huge")  # declared 8 MB: refused before it is read
    assert isinstance(big, InvalidReply) and "declared" in str(big)
