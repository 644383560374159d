"""ChatClient against every hostile reply of tests/support/hostile.py, over real HTTP:
each one is repaired, refused as the model's failure, or (not a completion at all)
an infrastructure error; never anything else, and never unbounded. No assertion reads a
clock: an endless body can only end at the size cap, a trickling one only at the
request's deadline, so the outcome itself proves the bound held (on any machine speed)."""

from __future__ import annotations

import asyncio
import json

import pytest

from distillery.testing.scripted_server import run_stub_server
from distillery.workers.llm.client import ChatClient
from distillery.workers.llm.types import ChatResult, InfraError, InvalidReply
from tests.support.hostile import MODES

# Generous enough that no repairable reply times out on a loaded machine; the trickle
# test sets its own short deadline (only a deadline can end an endless trickle).
PATIENT_TIMEOUT_S = 120.0

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
    timeout_s = 2.0 if mode == "body_trickle" else PATIENT_TIMEOUT_S
    outcome = _ask(hostile_url, mode, timeout_s=timeout_s)
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
    # The body trickles a byte every 50 ms for ever: no single read ever times out, so
    # only a deadline on the whole request can end it.
    outcome = _ask(hostile_url, "body_trickle", timeout_s=1.0)
    assert isinstance(outcome, InfraError) and "Timeout" in str(outcome)


def test_an_endless_body_is_cut_at_the_size_cap(hostile_url):
    # The body never ends: only the size cap can end it.
    outcome = _ask(
        hostile_url, "body_endless", max_response_bytes=256 * 1024, timeout_s=PATIENT_TIMEOUT_S
    )
    assert isinstance(outcome, InvalidReply) and "max_response_bytes=262144" in str(outcome)
    big = _ask(
        hostile_url, "body_huge", timeout_s=PATIENT_TIMEOUT_S
    )  # declared 8 MB: refused before it is read
    assert isinstance(big, InvalidReply) and "declared" in str(big)
