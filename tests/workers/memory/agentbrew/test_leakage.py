"""The leakage guard recognises a stated final answer however a grader would read it,
and keeps a note that only uses the number in a rule."""

from __future__ import annotations

import pytest

from distillery.workers.memory.agentbrew.leakage import check_truth, stated_answers

STATED_7 = [
    "the answer is 7.",
    "Answer: 7",
    "the result is 7.",
    "The total is 7.",
    "Final answer: **7**",
    "Answer: \\(7\\)",
    "the answer should be 7",
    "so \\boxed{7} is what to write",
    "The answer is 7 apples.",
    "the final answer = 7, then stop",
]
KEPT_7 = [
    "multiply by 7",
    "Divide the 7 boxes evenly before adding the rest.",
    "if the answer is not 7, recheck the units",
    "the answer is 7 times the number of rows",
    "count 17 and 70 separately",
]


@pytest.mark.parametrize("text", STATED_7)
def test_a_stated_answer_is_found_however_it_is_phrased(text):
    assert check_truth([text], ["7"], min_chars=2).leaks, stated_answers(text)


@pytest.mark.parametrize("text", KEPT_7)
def test_a_number_used_in_a_rule_is_kept(text):
    assert not check_truth([text], ["7"], min_chars=2).leaks, stated_answers(text)


def test_a_dollar_amount_and_a_long_gold_stated_or_embedded():
    assert check_truth(["The answer is \\$5"], ["5"], 2).leaks
    assert check_truth(["the answer is $1,250."], ["1250"], 2).leaks
    assert check_truth(["that makes 1,000 in all"], ["1000"], 2).leaks  # long: anywhere


def test_an_equivalent_form_is_found_by_the_benchmarks_own_equivalence():
    calls = []

    def same(gold: str, answer: str) -> bool | None:
        calls.append((gold, answer))
        return gold == "\\frac{1}{2}" and answer in ("1/2", "0.5")

    assert check_truth(["the answer is 1/2."], ["\\frac{1}{2}"], 2, same).leaks
    assert ("\\frac{1}{2}", "1/2") in calls
    assert not check_truth(["the answer is 1/3."], ["\\frac{1}{2}"], 2, same).leaks
    # Without an equivalence the texts are compared: 1/2 is not \frac{1}{2} as text.
    assert not check_truth(["the answer is 1/2."], ["\\frac{1}{2}"], 2).leaks


def test_math_grading_says_one_half_is_a_half():
    """The MATH benchmark's own equivalence (math-verify in the isolated grader)."""
    from distillery.workers.envs.registry import same_answer

    assert same_answer("math", {}, "\\frac{1}{2}", "1/2") is True
    assert same_answer("math", {}, "\\frac{1}{2}", "1/3") is False
    assert same_answer("gsm8k", None, "72", "72.0") is True
