"""GSM8K and MATH: answers extracted as Qwen2.5-Math's evaluator extracts them, graded
by math-verify in grader processes with an outer limit, and episodes end to end with a
scripted student (right, wrong, malformed, hostile)."""

from __future__ import annotations

import json
import re

import pytest

from distillery.workers.envs.mathgrade.answers import extract_answer, gsm8k_gold, math_gold
from distillery.workers.envs.mathgrade.grader import MathGrader, shared_grader
from distillery.workers.envs.registry import (
    benchmark_options,
    known_deviations,
    make_benchmark,
    summed_benchmark_counters,
)
from distillery.workers.llm.config import ModelConfig

from .conftest import play, scripted_student


@pytest.mark.parametrize(
    "reply, answer",
    [
        ("So $x = \\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{\\sqrt{2}}", "\\sqrt{2}"),  # the last one
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # nested braces balanced
        ("The answer is 42.", "42"),
        ("... so the final answer is 7", "7"),
        ("She pays 1,234 dollars and 5 cents", "5"),  # the last number
        ("Total: 1,234", "1234"),  # commas stripped
        ("no number at all", ""),
        ("The final answer is $3$. I hope it is correct.", "3"),  # Minerva's format
    ],
)
def test_answers_are_extracted_as_qwen25_math_does(reply, answer):
    assert extract_answer(reply) == answer


def test_gold_answers():
    assert gsm8k_gold("Work <<1+1=2>>2\n#### 1,000") == "1000"
    assert math_gold("so $\\boxed{\\frac{3}{4}}$.") == "\\frac{3}{4}"
    with pytest.raises(ValueError):
        gsm8k_gold("no marker")


def _perturbed(gold: str) -> str:
    value = float(gold)
    return str(int(value) + 1) if value.is_integer() else str(value + 1)


@pytest.mark.slow
def test_every_gsm8k_test_gold_grades_correct_and_a_perturbed_one_wrong(gsm8k_dir):
    from concurrent.futures import ThreadPoolExecutor

    rows = [json.loads(line) for line in (gsm8k_dir / "test.jsonl").read_text().splitlines()]
    golds = [gsm8k_gold(row["answer"]) for row in rows]
    grader = shared_grader()
    # As a model writes it: the gold in a box, after its reasoning.
    replies = [f"Reasoning.\nThe answer is $\\boxed{{{g}}}$." for g in golds]
    with ThreadPoolExecutor(8) as pool:
        right = list(pool.map(lambda p: grader.grade(p[0], extract_answer(p[1]), 30),
                              zip(golds, replies, strict=True)))  # fmt: skip
        wrong = list(pool.map(lambda g: grader.grade(g, _perturbed(g), 30), golds))
    assert len(golds) == 1319
    assert [g for g, r in zip(golds, right, strict=True) if not r.correct] == []
    assert [g for g, r in zip(golds, wrong, strict=True) if r.correct] == []
    assert not any(r.timed_out for r in right + wrong)


def test_symbolic_equivalence_and_the_counted_timeout():
    grader = shared_grader()
    assert grader.grade("\\frac{1}{2}", "0.5", 30).correct
    assert grader.grade("x^2+2x+1", "(x+1)^2", 30).correct
    assert not grader.grade("18", "19", 30).correct
    assert not grader.grade("18", "", 30).correct  # no answer: never sent to the grader
    tower = grader.grade("2", "9^{9^{9^{9}}}", 2)
    assert tower.timed_out and not tower.correct
    assert grader.grade("2", "2", 30).correct  # the grader goes on after a timeout


def test_verdicts_are_kept_but_never_a_timeout():
    grader = MathGrader(processes=1)
    try:
        assert grader.grade("\\frac{1}{2}", "0.5", 30).correct
        assert grader.cache_hits == 0
        assert grader.grade("\\frac{1}{2}", "0.5", 30).correct  # a look-up, not a grading
        assert grader.cache_hits == 1
        assert not grader.grade("\\frac{1}{2}", "0.6", 30).correct
        assert not grader.grade("\\frac{1}{2}", "0.6", 30).correct
        assert grader.cache_hits == 2
        for _ in range(2):  # a timeout is graded again (the load decided it, not the strings)
            assert grader.grade("2", "9^{9^{9^{9}}}", 2).timed_out
        assert grader.cache_hits == 2
    finally:
        grader.close()
    uncached = MathGrader(processes=1, verdicts=0)
    try:
        for _ in range(2):
            assert uncached.grade("25\\%", "25", 30).correct
        assert uncached.cache_hits == 0
    finally:
        uncached.close()


@pytest.fixture(scope="module")
def gsm8k_script(gsm8k_dir, tmp_path_factory):
    """Scripted replies for the first five test problems: right, wrong, no answer,
    a grader-killing tower, and (with attempts=2) wrong then right."""
    rows = [json.loads(line) for line in (gsm8k_dir / "test.jsonl").read_text().splitlines()[:5]]
    gold = [gsm8k_gold(r["answer"]) for r in rows]
    replies = {
        rows[0]["question"]: [f"Step by step... \\boxed{{{gold[0]}}}"],
        rows[1]["question"]: [f"I think it is \\boxed{{{int(gold[1]) + 1}}}"],
        rows[2]["question"]: ["I cannot solve this."],
        rows[3]["question"]: ["\\boxed{9^{9^{9^{9^{9}}}}}"],
        rows[4]["question"]: ["\\boxed{0}", f"Sorry: \\boxed{{{gold[4]}}}"],
    }
    folder = tmp_path_factory.mktemp("gsm8k_student")
    with scripted_student(folder, replies) as (model, url):
        yield model, url


def test_gsm8k_episodes_end_to_end(gsm8k_dir, gsm8k_script, tmp_path):
    model, url = gsm8k_script
    options = {"data_path": str(gsm8k_dir), "grader_timeout_s": 3}
    ids = [f"test_{i}" for i in range(5)]
    summaries, records = play(tmp_path, "gsm8k", options, model, url, ids)
    assert [summaries[i].success for i in ids] == [True, False, False, False, False]
    assert summaries["test_1"].error_type == "wrong_answer"
    assert summaries["test_2"].error_type == "no_answer"
    assert summaries["test_3"].error_type == "grader_timeout"
    assert summaries["test_4"].error_type == "wrong_answer"  # one answer by default
    first = records["test_0"]
    assert first.termination == "done" and first.steps_per_turn == [0] and first.n_llm_calls == 1
    messages = json.loads(first.messages_json)
    assert messages[0] == {"role": "system", "content": "Please reason step by step, and put "
                           "your final answer within \\boxed{}."}  # fmt: skip
    assert [m["role"] for m in messages] == ["system", "user", "assistant"]
    counted = summed_benchmark_counters("gsm8k", records.values())
    assert counted == {"grader_timeouts": 1.0, "sandbox_unisolated": 0.0}
    assert known_deviations("gsm8k") == ("grader_math_verify",)


def test_with_attempts_the_grader_feedback_comes_back(gsm8k_dir, gsm8k_script, tmp_path):
    model, url = gsm8k_script
    options = {"data_path": str(gsm8k_dir), "attempts": 2}
    summaries, records = play(tmp_path, "gsm8k", options, model, url, ["test_4", "test_1"])
    assert summaries["test_4"].success is True  # wrong, told so, then right
    assert summaries["test_1"].success is False  # its script repeats the wrong answer
    record = records["test_4"]
    assert record.n_turns == 2 and record.n_llm_calls == 2
    users = [m["content"] for m in json.loads(record.messages_json) if m["role"] == "user"]
    assert users[1] == "Your final answer is not correct. Please try again."
    assert json.loads(record.extra_json)["answers"] == 2
    assert "attempts" in benchmark_options("gsm8k", options).identity()


def test_the_oracle_solves_gsm8k_and_math(gsm8k_dir, math_dir, math500_dir, tmp_path):
    oracle = ModelConfig(name="oracle", backend="oracle")
    summaries, _ = play(tmp_path / "g", "gsm8k", {"data_path": str(gsm8k_dir)}, oracle, None,
                        [f"test_{i}" for i in range(8)])  # fmt: skip
    assert all(s.success for s in summaries.values())
    bench = make_benchmark("math", {"data_path": str(math_dir)})
    ids = [t.task_id for t in bench.load_tasks()]
    assert ids == ["test_algebra_5", "test_number_theory_2", "test_precalculus_807"]
    summaries, _ = play(tmp_path / "m", "math", {"data_path": str(math_dir)}, oracle, None, ids)
    assert all(s.success for s in summaries.values())
    five = make_benchmark("math", {"variant": "math500", "data_path": str(math500_dir)})
    assert sorted(t.task_id for t in five.load_tasks()) == ids  # the ids of full MATH
    assert bench.load_tasks()[0].group_id == "algebra"


def test_splits_and_their_partitions(gsm8k_dir, math_dir):
    def ids(name, **options):
        return [t.task_id for t in make_benchmark(name, options).load_tasks()]

    assert len(ids("gsm8k", data_path=str(gsm8k_dir))) == 1319
    brew = ids("gsm8k", data_path=str(gsm8k_dir), split="agentbrew_brew")
    assert len(brew) == 1000 and brew[0] == "train_0" and brew[-1] == "train_999"
    assert len(ids("gsm8k", data_path=str(gsm8k_dir), split="train")) == 7473
    assert ids("gsm8k", data_path=str(gsm8k_dir), split="agentbrew_test") == ids(
        "gsm8k", data_path=str(gsm8k_dir)
    )
    # MATH: subjects alphabetically, then files by number (12 after 1, not before).
    assert ids("math", data_path=str(math_dir), split="train") == [
        "train_algebra_1",
        "train_algebra_12",
        "train_geometry_3",
    ]
    with pytest.raises(ValueError, match="MATH-500 is a test set"):
        benchmark_options("math", {"variant": "math500", "split": "train"})


def test_a_math_answer_may_be_any_equivalent_form(math_dir, tmp_path):
    replies = {
        "Simplify $\\frac{2}{4}$.": ["It is \\boxed{0.5}"],
        "Expand $(x+1)^2$.": ["\\boxed{(x+1)^2}"],
        "What is $17 \\bmod 5$?": ["\\boxed{3}"],
    }
    with scripted_student(tmp_path, replies) as (model, url):
        summaries, _ = play(tmp_path, "math", {"data_path": str(math_dir)}, model, url,
                            ["test_algebra_5", "test_precalculus_807", "test_number_theory_2"])  # fmt: skip
    assert summaries["test_algebra_5"].success and summaries["test_precalculus_807"].success
    assert summaries["test_number_theory_2"].success is False


def test_the_prompt_is_cited_in_the_config():
    from pathlib import Path

    conf = Path(__file__).resolve().parents[4] / "conf" / "benchmark"
    for name in ("gsm8k", "math"):
        text = (conf / f"{name}.yaml").read_text()
        assert "qwen25-math-cot" in text and re.search(r"evaluation/utils\.py", text)
