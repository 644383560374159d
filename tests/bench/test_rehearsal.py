"""bench/rehearsal.py's pieces at a tiny size: the simulated GPU server charges prefill,
decode and the prefix cache as its model says and counts its busy time; the rehearsal's
replies play a BFCL task also when a memory method put its memory into the user turn;
the memory-growth figure reads the samples it is given. (The bench itself is a
benchmark: its figures are in docs/performance.md, not asserted here.)"""

from __future__ import annotations

import pytest

from bench.rehearsal import memory_growth
from bench.rehearsal_kit.replies import any_role
from bench.rehearsal_kit.sim import STUDENT_GPU, LatencyModel


def test_the_simulated_server_charges_prefill_decode_and_the_prefix_cache():
    from starlette.testclient import TestClient

    from bench.sim_server import make_app

    # 100 ms per uncached token, 50 ms per output token ("ok" is 1 token), scaled / 10.
    app = make_app(4, 0.0, 100.0, 10_000, 50.0, "distillery.testing.scripts:always_text", 10.0)
    prompt = {"messages": [{"role": "user", "content": "x" * 400}]}  # 100 tokens
    with TestClient(app) as client:
        first = client.post("/v1/chat/completions", json=prompt).json()
        second = client.post("/v1/chat/completions", json=prompt).json()
        stats = client.get("/stats").json()
    assert first["choices"][0]["message"]["content"] == "Hello from the stub."
    assert second["usage"]["prompt_tokens"] == first["usage"]["prompt_tokens"]
    # "<user>" + 400 characters: 101 tokens, 6 whole 16-token blocks; the second prompt's
    # blocks are cached, its 5 other tokens prefilled; the reply is 5 tokens.
    assert (stats["requests"], stats["cached_tokens"], stats["uncached_tokens"]) == (2, 96, 106)
    assert stats["output_tokens"] == 10
    expected_ms = ((100 * 101 + 50 * 5) + (100 * 5 + 50 * 5)) / 10
    assert stats["busy_ms"] == pytest.approx(expected_ms, rel=0.2)


def test_the_replies_play_a_bfcl_task_with_memory_in_its_turn():
    from distillery.testing.bfcl_scripts import _tasks_by_first_turn

    first_turn, [(task, truth), *_] = next(iter(_tasks_by_first_turn().items()))
    tools = [
        {"type": "function", "function": {"name": d["name"], "parameters": d["parameters"]}}
        for d in task.function_docs
    ]
    plain = {"messages": [{"role": "user", "content": first_turn}], "tools": tools}
    with_memory = {
        "messages": [{"role": "user", "content": first_turn + "\n\n[Procedural memory] ..."}],
        "tools": tools,
    }
    assert any_role(with_memory) == any_role(plain)
    assert any_role(plain)["tool_calls"][0]["name"] == truth[0][0].split("(")[0]
    assert any_role({"messages": [{"role": "user", "content": "Summarize."}]})["content"]


def test_memory_growth_and_the_latency_models_figures():
    samples = [(0, 300.0), (900, 320.0), (1000, 330.0), (5000, 380.0), (10000, 396.0)]
    assert memory_growth(samples, 10000).endswith("1.20x")
    model = LatencyModel(2, 100.0, 1.0, 10.0, 0)  # 100 + 1 * 100 + 10 * 10 = 300 ms
    assert model.tokens_per_s(200, 100, 10) == pytest.approx(2 * 210 / 0.3)
    assert STUDENT_GPU.max_seqs == 64
