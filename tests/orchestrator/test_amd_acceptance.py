"""Issue 3 acceptance: oracle teacher -> memory bank -> a student that can only follow its
memory, on real BFCL tasks under `self_excluded`, with the runs in MLflow.

The student (`distillery.testing.bfcl_scripts:memory_procedure_text`) knows no procedure of
its own: zero-shot it calls nothing and fails every task. With AMD memory it replays the
masked calls of the Subtask segment injected for the current user turn, and fills each
placeholder only from what its own episode offers: a key of the same name in an
earlier tool result (the price `get_stock_info` returned, the `order_id` of the order it
just placed), else a value of the parameter's type in the current user message (a
ticker such as 'AAPL', a number of shares). Kept literals (`order_type='Buy'`, an enum
the doc declares) come from memory as they are. It never reads the task or the ground
truth, and it skips a call it cannot fill.

The four TradingBot tasks are two near-duplicate pairs; under `self_excluded` each
task's memory comes only from the other three:

- 124 (buy 100 AAPL, read the order, cancel it) with memory from 120 and 127: solved.
- 127 (watchlist, remove BDX, buy 150 BDX, read the order) with memory from 146 and
  120: solved.
- 120 ("100 Apple shares") and 146 ("'Zeta Corp'", "'Apple'") name companies, not
  tickers; the ground truth needs AAPL and ZETA, which neither the request nor the
  episode contains, so the copying student fails them with memory too. That is the
  honest limit of memory that masks values: it carries the procedure, not the data.
"""

from __future__ import annotations

import json
import time

import pytest
from mlflow.tracking import MlflowClient

from distillery.orchestrator.driver.run import run_experiment
from distillery.testing.bfcl_scripts import (
    NO_MEMORY_REPLY,
    QUOTED,
    fill_memory_call,
    memory_procedure_text,
)
from distillery.testing.scripted_server import run_stub_server
from distillery.workers.envs.registry import make_benchmark
from distillery.workers.trajectories import read_episodes
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

TASKS = [f"multi_turn_base_{n}" for n in (120, 124, 127, 146)]
# Where each solved task's Subtask segments came from (never itself).
SOLVED_WITH_MEMORY = {
    "multi_turn_base_124": {"multi_turn_base_120", "multi_turn_base_127"},
    "multi_turn_base_127": {"multi_turn_base_146", "multi_turn_base_120"},
}


@pytest.mark.slow
def test_memory_from_near_duplicate_tasks_solves_what_the_student_fails_alone(tmp_path, ray_local):
    started = time.monotonic()
    with run_stub_server(script="distillery.testing.bfcl_scripts:memory_procedure_text") as url:
        cfg = _config(
            tmp_path,
            f"benchmark.task_ids=[{','.join(TASKS)}]",
            "benchmark.limit=null",  # the quickstart experiment caps at 2 tasks
            "methods=[teacher,zero_shot,amd_wf_st_fn]",
            "protocol=self_excluded",
            # The oracle is no model: the bank is built deterministically, and its
            # Subtask keys ("use TradingBot get_stock_info place_order: Handle user turn
            # 1 (<12-word excerpt>) by calling ...") score 0.28-0.48 against the other
            # pair's user turns with MiniLM in a bank this small (in a 200-task bank the
            # correct hits score a median 0.52). The authors' 0.45 would drop most of
            # them, so the threshold is lowered, not removed: 0.2 still admits them all.
            "memory.retrieval.threshold_st=0.2",
            # One Subtask query per user turn (the authors' BFCL code; quickstart sets
            # decompose for llama.cpp's prompt cache): each turn gets its own segment.
            "memory.retrieval.subtask_query=per_turn",
            *_student(url),
        )
        result = run_experiment(cfg, progress=False)
    elapsed = time.monotonic() - started

    assert sorted(result.task_ids) == TASKS
    teacher = result.method("teacher")
    zero_shot, amd = result.method("zero_shot"), result.method("amd_wf_st_fn")
    assert teacher.metrics["success_rate"] == 1.0  # the memory's source trajectories

    # Alone the student knows no procedure: no call, no success.
    alone = {r.task_id: r for r in read_episodes(zero_shot.episodes_dir)}
    assert sorted(alone) == TASKS
    for record in alone.values():
        assert record.success is False and record.total_steps == 0
        assert json.loads(record.messages_json)[2]["content"] == NO_MEMORY_REPLY

    # With memory from the OTHER tasks it solves the two tasks whose data it can find.
    bench = make_benchmark("bfcl_multi_turn_base")
    truth = {t.task_id: bench.oracle_turns(t) for t in bench.load_tasks(task_ids=TASKS)}
    records = {r.task_id: r for r in read_episodes(amd.episodes_dir)}
    assert sorted(records) == TASKS
    assert {t for t, r in records.items() if r.success} == set(SOLVED_WITH_MEMORY)
    for task_id, record in records.items():
        log = json.loads(record.extra_json)
        assert log["isolation_violations"] == 0
        assert log["retrievals"], task_id
        for event in log["retrievals"]:
            assert event["allowed"] and event["source_task_id"] != task_id, event
            assert event["source_task_id"] in TASKS
        if task_id in SOLVED_WITH_MEMORY:
            # A Subtask segment for every turn, and exactly the ground-truth calls made.
            segments = [e for e in log["retrievals"] if e["type"] == "st"]
            assert {e["turn"] for e in segments} == set(range(len(truth[task_id])))
            assert {e["source_task_id"] for e in segments} == SOLVED_WITH_MEMORY[task_id]
            assert record.steps_per_turn == [len(calls) for calls in truth[task_id]]
            system = json.loads(record.messages_json)[0]["content"]
            assert system.index("[Subtask]") < system.index("You are an expert")

    assert zero_shot.metrics["success_rate"] == 0.0
    assert amd.metrics["success_rate"] == 0.5
    assert amd.metrics["isolation_violations"] == 0
    assert amd.metrics["isolation_checked"] > 0

    client = MlflowClient(cfg.tracking_uri)
    children = {
        r.data.tags["method"]: r
        for r in client.search_runs(
            [client.get_experiment_by_name("distillery").experiment_id],
            filter_string=f"tags.mlflow.parentRunId = '{result.parent_run_id}'",
        )
    }
    assert set(children) == {"teacher", "zero_shot", "amd_wf_st_fn"}
    assert children["teacher"].data.metrics["success_rate"] == 1.0
    assert children["zero_shot"].data.metrics["success_rate"] == 0.0
    memory_run = children["amd_wf_st_fn"].data
    assert memory_run.metrics["success_rate"] == 0.5
    assert memory_run.metrics["isolation_violations"] == 0
    assert memory_run.params["memory.retrieval.threshold_st"] == "0.2"
    assert memory_run.params["eval_n_tasks"] == "4"
    print(f"amd acceptance: {elapsed:.1f} s")


# --- the scripted student itself (no Ray) -------------------------------------------

PLACE_ORDER = {
    "place_order": {
        "parameters": {
            "properties": {
                "order_type": {"type": "string"},
                "symbol": {"type": "string"},
                "price": {"type": "float"},
                "amount": {"type": "integer"},
            }
        }
    },
    "get_order_details": {"parameters": {"properties": {"order_id": {"type": "integer"}}}},
}


def test_placeholders_take_episode_results_then_the_users_words():
    masked = "place_order(order_type='Buy', symbol=<SYMBOL>, price=<AMOUNT>, amount=<AMOUNT>)"
    # price: the key the environment returned; symbol and amount: the user's request.
    assert (
        fill_memory_call(masked, PLACE_ORDER, [{"price": 227.16}], ["Buy 100 shares of AAPL"])
        == "place_order(order_type='Buy', symbol='AAPL', price=227.16, amount=100)"
    )
    assert (
        fill_memory_call(
            "get_order_details(order_id=<ORDER_ID>)",
            PLACE_ORDER,
            [{"order_id": 1}, {"order_id": 12446, "status": "Pending"}],
            ["the latest order"],
        )
        == "get_order_details(order_id=12446)"
    )


def test_a_placeholder_without_a_value_skips_the_call():
    masked = "place_order(order_type='Buy', symbol=<SYMBOL>, price=<AMOUNT>, amount=<AMOUNT>)"
    # "Apple" is no ticker and nothing returned a price: the student does not guess.
    assert fill_memory_call(masked, PLACE_ORDER, [], ["Buy 100 Apple shares"]) is None
    assert fill_memory_call("f(x=[<X>])", {}, [{"x": 1}], ["'a'"]) is None  # inside a container


def test_quotes_open_and_close_at_word_boundaries():
    text = "It'd be great to drop 'Zeta Corp' from Alice's list, said \"Bob\"."
    assert [a or b for a, b in QUOTED.findall(text)] == ["Zeta Corp", "Bob"]


def _system(memory: str) -> str:
    docs = json.dumps([{"name": n, **d} for n, d in PLACE_ORDER.items()])
    return (
        f"{memory}\n\nYou are an expert in composing functions.\n"
        f"Here is a list of functions in json format that you can invoke.\n{docs}\n"
    )


def test_the_student_replays_its_memory_and_calls_nothing_without_it():
    user = {"role": "user", "content": "Please buy 100 shares of AAPL now."}
    alone = memory_procedure_text({"messages": [{"role": "system", "content": _system("")}, user]})
    assert alone == {"content": NO_MEMORY_REPLY}

    memory = (
        "[Subtask] buy: Buy a stock.\nget_stock_info(symbol=<SYMBOL>)\n# -> {...}\n"
        "place_order(order_type='Buy', symbol=<SYMBOL>, price=<AMOUNT>, amount=<AMOUNT>)\n"
        "# -> {...}"
    )
    messages = [{"role": "system", "content": _system(memory)}, user]
    assert memory_procedure_text({"messages": messages}) == {
        "content": "[get_stock_info(symbol='AAPL')]"
    }
    messages += [
        {"role": "assistant", "content": "[get_stock_info(symbol='AAPL')]"},
        {
            "role": "user",
            "content": repr(
                [
                    {
                        "role": "tool",
                        "name": "get_stock_info(symbol='AAPL')",
                        "content": '{"price": 227.16}',
                    }
                ]
            ),
        },
    ]
    assert memory_procedure_text({"messages": messages}) == {
        "content": "[place_order(order_type='Buy', symbol='AAPL', price=227.16, amount=100)]"
    }
    messages.append({"role": "assistant", "content": "[place_order(...)]"})
    assert memory_procedure_text({"messages": messages}) == {"content": "Done."}
