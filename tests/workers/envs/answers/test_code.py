"""MBPP, MBPP+ and HumanEval: every reference program passes its own tests in the
sandbox; EvalPlus's rules on MBPP+'s layout; episodes end to end with a scripted
student (right, wrong, malformed, hostile programs), the run_tests tool and feedback."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from distillery.workers.envs.codegrade import extract
from distillery.workers.envs.codegrade.checks import EvalPlusTask
from distillery.workers.envs.registry import make_benchmark, trajectory_contents
from distillery.workers.llm.config import ModelConfig

from .conftest import MBPP_PLUS, play, scripted_student

pytestmark = pytest.mark.usefixtures("sandboxed")


@pytest.mark.slow
def test_every_reference_program_passes_in_the_sandbox(mbpp_dir):
    """All 427 sanitized MBPP programs and all 164 HumanEval canonical solutions,
    graded as a model's answer is graded (the reply written as a code block)."""
    # Generous limits: a loaded machine must not fail a reference (MBPP 123 takes ~6 s).
    mbpp = make_benchmark("mbpp", {"data_path": str(mbpp_dir), "split": "full", "timeout_s": 600})
    humaneval = make_benchmark("humaneval", {"timeout_s": 120})
    jobs = [(mbpp, mbpp.record(t.task_id)) for t in mbpp.load_tasks()]
    jobs += [(humaneval, humaneval.record(t.task_id)) for t in humaneval.load_tasks()]
    assert len(jobs) == 427 + 164

    def grade(job):
        bench, record = job
        return record["task_id"], bench.grade(record, bench.oracle_answer(record))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(grade, jobs))
    failed = [(task_id, a.reason) for task_id, a in results if not a.correct]
    assert failed == []


def test_wrong_and_hostile_programs_fail_and_are_contained(mbpp_dir, tmp_path):
    bench = make_benchmark("mbpp", {"data_path": str(mbpp_dir), "timeout_s": 5})
    record = bench.record("Mbpp/17")  # square_perimeter(a) == 4 * a
    right = "```python\ndef square_perimeter(a):\n    return 4 * a\n```"
    assert bench.grade(record, right).correct
    hostile = {
        "wrong": "def square_perimeter(a):\n    return 3 * a",
        "exits early": "import sys\ndef square_perimeter(a):\n    sys.exit(0)",
        "reads the project": "def square_perimeter(a):\n    return len(open('/work').read())",
        "loops": "def square_perimeter(a):\n    while True:\n        pass",
        "no code": "I would rather not.",
    }
    graded = {
        name: bench.grade(record, f"```python\n{code}\n```") for name, code in hostile.items()
    }
    assert not any(a.correct for a in graded.values())
    assert graded["loops"].error_type == "timeout"
    assert graded["no code"].error_type in ("no_code", "tests_failed")


def test_the_program_is_evalplus_sanitized_from_the_reply():
    reply = (
        "Here you go:\n```python\nimport math\n\ndef helper(x):\n    return x * 2\n\n"
        "def f(x):\n    return helper(x) + math.floor(0.5)\n\nprint(f(2))\n"
        "assert f(1) == 2\n```\nAnd an example:\n```python\nf(3)\n```"
    )
    program = extract.sanitize(reply, "f")
    assert "print(" not in program and "assert" not in program
    assert "import math" in program and "def helper" in program and "def f" in program
    assert extract.sanitize("no code here at all", "f") == ""
    broken = "```python\ndef f(x):\n    return (x\n```"
    assert "def f" not in extract.sanitize(broken, "f")


def test_evalplus_rules_on_the_release_layout(mbpp_plus_dir, sandboxed):
    bench = make_benchmark("mbpp", {"variant": "plus", "data_path": str(mbpp_plus_dir)})
    assert [t.task_id for t in bench.load_tasks()] == [t["task_id"] for t in MBPP_PLUS]
    brew_free = make_benchmark(
        "mbpp", {"variant": "plus", "data_path": str(mbpp_plus_dir), "split": "agentbrew_test"}
    )
    assert [t.task_id for t in brew_free.load_tasks()] == ["Mbpp/2", "Mbpp/3", "Mbpp/787"]

    def grade(task_id: str, code: str):
        return bench.grade(bench.record(task_id), f"```python\n{code}\n```")

    for task in MBPP_PLUS:  # every reference passes its own differential test
        assert bench.grade(task, bench.oracle_answer(task)).correct, task["task_id"]
    # Set equality (Mbpp/2): another order of the same elements passes.
    assert grade(
        "Mbpp/2",
        "def similar_elements(a, b):\n    return tuple(sorted(set(a) & set(b), reverse=True))",
    ).correct
    # The tolerance (Mbpp/82): close is right, a float off by more is wrong.
    assert grade(
        "Mbpp/82", "import math\ndef volume_sphere(r):\n    return 4 / 3 * math.pi * r**3 + 1e-7"
    ).correct
    assert not grade("Mbpp/82", "def volume_sphere(r):\n    return 4.19 * r**3").correct
    # "Not None" (Mbpp/787): any match object for a match, None otherwise.
    assert grade(
        "Mbpp/787", "import re\ndef text_match_three(t):\n    return re.search('abbb', t)"
    ).correct
    # The base inputs pass but a plus input fails: MBPP+ fails it.
    plus_only = "def is_not_prime(n):\n    return n in (10, 35)"
    verdict = grade("Mbpp/3", plus_only)
    assert not verdict.correct and "plus input" in verdict.reason
    # A value whose __eq__ always agrees is compared as its base type, outside.
    sneaky = "class Any(tuple):\n    def __eq__(self, o):\n        return True\ndef similar_elements(a, b):\n    return Any()"
    assert not grade("Mbpp/2", sneaky).correct


def test_evalplus_task_rebuilds_the_inputs_of_the_release():
    task = EvalPlusTask(MBPP_PLUS[0])  # Mbpp/2: its inputs are tuples
    assert task.inputs["base"][0] == [(3, 4, 5, 6), (5, 7, 4, 10)]


@pytest.fixture(scope="module")
def code_student(mbpp_dir, tmp_path_factory):
    mbpp = make_benchmark("mbpp", {"data_path": str(mbpp_dir)})
    humaneval = make_benchmark("humaneval", {})
    first = {t.task_id: t.turns[0] for t in mbpp.load_tasks()[:4]}
    he = {t.task_id: t.turns[0] for t in humaneval.load_tasks()[:2]}
    ids = list(first)
    right = mbpp.oracle_answer(mbpp.record(ids[0]))
    replies = {
        first[ids[0]]: [right],
        first[ids[1]]: ["```python\ndef nope():\n    return 1\n```"],
        first[ids[2]]: [
            "```python\nimport os\nos.system('touch /tmp/escaped')\nwhile True:\n    os.fork()\n```"
        ],  # fmt: skip
        first[ids[3]]: [{"tool_calls": [{"name": "run_tests", "arguments": {"code": "x"}}]}],
        he["HumanEval/0"]: [humaneval.oracle_answer(humaneval.record("HumanEval/0"))],
        he["HumanEval/1"]: ["def separate_paren_groups(s):\n    return []"],
    }
    folder = tmp_path_factory.mktemp("code_student")
    with scripted_student(folder, replies) as (model, url):
        yield model, url, ids


def test_mbpp_and_humaneval_episodes_end_to_end(mbpp_dir, code_student, tmp_path):
    model, url, ids = code_student
    options = {"data_path": str(mbpp_dir), "timeout_s": 5}
    summaries, records = play(tmp_path / "m", "mbpp", options, model, url, ids)
    assert [summaries[i].success for i in ids] == [True, False, False, False]
    assert summaries[ids[1]].error_type == "tests_failed"
    # Its shell command and fork bomb stayed in the jail: a failure, and no trace here.
    assert summaries[ids[2]].error_type in ("timeout", "crashed", "tests_failed")
    assert not Path("/tmp/escaped").exists()
    # A reply of tool calls only (none offered; the prompt format reads its text): no code.
    assert summaries[ids[3]].error_type == "no_code"
    messages = json.loads(records[ids[0]].messages_json)
    assert [m["role"] for m in messages] == ["user", "assistant"]  # no system prompt
    assert messages[0]["content"].startswith("You are an expert Python programmer")
    summaries, _ = play(tmp_path / "h", "humaneval", {}, model, url, ["HumanEval/0", "HumanEval/1"])
    assert summaries["HumanEval/0"].success is True and summaries["HumanEval/1"].success is False


def test_the_run_tests_tool(mbpp_dir, tmp_path):
    bench = make_benchmark("mbpp", {"data_path": str(mbpp_dir), "tools": True})
    task = bench.load_tasks()[0]
    record = bench.record(task.task_id)
    right = bench.reference(record)
    replies = {
        task.turns[0]: [
            {"tool_calls": [{"name": "run_tests", "arguments": {"code": "def x():\n    pass"}}]},
            {"tool_calls": [{"name": "run_tests", "arguments": {"code": right}}]},
            f"Final:\n```python\n{right}\n```",
        ]
    }
    with scripted_student(tmp_path, replies) as (model, url):
        native = model.model_copy(update={"action_format": "native"})
        summaries, records = play(tmp_path, "mbpp", {"data_path": str(mbpp_dir), "tools": True},
                                  native, url, [task.task_id])  # fmt: skip
    assert summaries[task.task_id].success is True
    record = records[task.task_id]
    assert record.steps_per_turn == [2]
    results = [c.content for step in record.steps for c in step.calls]
    assert results[0].startswith("Tests failed") and results[1] == "All tests passed."
    assert task.tools and task.tools[0]["function"]["name"] == "run_tests"
    # The graded program is the closing reply; with the tool, calls come before it.
    assert trajectory_contents("mbpp", {"tools": True}) == {"tool_calls", "answer"}
    assert trajectory_contents("mbpp", {}) == {"answer"}


def test_oracle_episodes_of_mbpp_plus(mbpp_plus_dir, tmp_path):
    oracle = ModelConfig(name="oracle", backend="oracle")
    options = {"variant": "plus", "data_path": str(mbpp_plus_dir)}
    summaries, _ = play(tmp_path, "mbpp", options, oracle, None, [t["task_id"] for t in MBPP_PLUS])
    assert all(s.success for s in summaries.values())
