"""The leakage guard: whether a note (or a merged text) holds its task's ground truth.

A long ground truth (a test's assert, a LaTeX expression) is found as a whole token in
the note's text, whitespace and thousands separators ignored. A final answer is found
where the note *states* it as one, in any of the forms a grader reads a final answer
in — ``\\boxed{...}``, "the answer is ...", "answer: ...", "final answer ...", "the
answer should be ...", a closing "the result/total/sum ... is ..." — with its wrappers
taken off (Markdown bold, ``\\( \\)``, ``$``, ``\\$``) and compared with the gold by the
benchmark's own equivalence (`same`: MATH and GSM8K ask their math-verify grader, so
"1/2" states ``\\frac{1}{2}``), else as text. A number that a note only uses in a rule
("multiply by 7") is no stated answer: a short gold (MATH's "2") appears in almost
any note as an ordinary number, so it is looked for only where stated, and counted as
`unchecked` besides (how many truths only the statement check covered).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_SPACE = re.compile(r"\s+")

# What introduces a stated final answer (the statement's value follows it).
_STATEMENT = re.compile(
    r"(?:\bfinal\s+answer|\banswer|\bthe\s+(?:final\s+)?(?:result|total|sum|product|"
    r"difference|quotient|value|solution|count|amount))\s*"
    r"(?:(?:is|was|will\s+be|would\s+be|should\s+be|must\s+be|equals|comes\s+to)\b\s*[:=]?|[:=])",
    re.IGNORECASE,
)
# Where a stated value ends: a line or clause break, a sentence's full stop (not a
# decimal point), or a word that starts a reason or another clause.
_VALUE_END = re.compile(
    r"\n|;|,\s|\.(?!\d)|\s+(?:because|since|so|and|which|as|if|when|but|for|then)\b",
    re.IGNORECASE,
)
_WRAPPERS = re.compile(r"^(?:\*\*|__|\\\(|\\\[|\$\$|\\\$|\$|`)+|(?:\*\*|__|\\\)|\\\]|\$\$|\$|`)+$")
_ONE_UNIT = re.compile(r"^(\S+)\s+[A-Za-z]+$")  # "7 apples": the number is the answer


def _normal(text: str) -> str:
    return _SPACE.sub(" ", _THOUSANDS.sub("", text)).strip().lower()


def _boxed_contents(text: str) -> list[str]:
    """Every ``\\boxed{...}``'s content, braces balanced."""
    out = []
    for match in re.finditer(r"\\boxed\s*\{", text):
        depth, chars = 1, []
        for char in text[match.end() :]:
            depth += (char == "{") - (char == "}")
            if depth == 0:
                break
            chars.append(char)
        out.append("".join(chars).strip())
    return out


def _unwrapped(value: str) -> str:
    previous = None
    value = value.strip()
    while value != previous:
        previous = value
        value = _WRAPPERS.sub("", value).strip().rstrip(".").strip()
    return value


def stated_answers(text: str) -> list[str]:
    """The values `text` states as a final answer (see the module docstring)."""
    found = _boxed_contents(text)
    for match in _STATEMENT.finditer(text):
        rest = text[match.end() :].lstrip()
        end = _VALUE_END.search(rest)
        value = _unwrapped(rest[: end.start()] if end else rest)
        if not value:
            continue
        found.append(value)
        unit = _ONE_UNIT.match(value)
        if unit:
            found.append(_unwrapped(unit.group(1)))
    return [v for v in found if v]


@dataclass(frozen=True)
class TruthCheck:
    """What the leakage check found in one note: whether it holds one of its task's
    ground-truth texts, and how many of those were too short to check."""

    found: tuple[str, ...] = ()
    unchecked: int = 0
    checked: int = 0

    @property
    def leaks(self) -> bool:
        return bool(self.found)


# The benchmark's equivalence of a gold answer and a stated one (None: it has none of
# its own, or cannot grade here: the texts are compared).
SameAnswer = Callable[[str, str], bool | None]


def check_truth(
    texts: Iterable[str],
    truths: Sequence[str],
    min_chars: int,
    same: SameAnswer | None = None,
) -> TruthCheck:
    """Which of `truths` (a task's gold answer, its test asserts) `texts` hold: stated
    as a final answer (any length; equal as text, or by `same`), or, for a truth of at
    least `min_chars` once normalized, anywhere as a whole token (a number is not found
    inside a longer one; a structured truth also with spaces ignored)."""
    raw = "\n".join(texts)
    text = _normal(raw)
    squeezed = text.replace(" ", "")
    stated = stated_answers(raw)
    found: list[str] = []
    unchecked = checked = 0
    for truth in truths:
        gold = _normal(truth)
        if not gold:
            continue
        short = len(gold) < min_chars
        unchecked += short
        checked += not short
        if _stated(truth, gold, stated, same):
            found.append(truth)
            continue
        if short:
            continue
        bounded = rf"(?<![a-z0-9.]){re.escape(gold)}(?![a-z0-9])"
        if re.search(bounded, text) or (
            re.search(r"[^a-z0-9 .]", gold) and gold.replace(" ", "") in squeezed
        ):
            found.append(truth)
    return TruthCheck(tuple(found), unchecked, checked)


def _stated(truth: str, gold: str, stated: Sequence[str], same: SameAnswer | None) -> bool:
    for value in stated:
        if _normal(value).replace(" ", "") == gold.replace(" ", ""):
            return True
        if same is not None and same(truth, value):
            return True
    return False
