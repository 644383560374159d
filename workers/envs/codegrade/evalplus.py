"""EvalPlus's MBPP+ grading rules, as EvalPlus v0.2.0 applies them (evalplus/eval/
__init__.py `unsafe_execute`, evalplus/eval/_special_oracle.py, evalplus/data/mbpp.py
`mbpp_deserialize_inputs`, evalplus/config.py), applied here outside the sandbox to the
outputs the program returned (`values.py`).

- An output matches when it equals the expected one; a few tasks have their own
  oracle (below); when it does not and the tolerance `atol` is not 0 — or the expected
  value is a float or a list/tuple of floats, which forces ``atol=1e-6`` — it matches
  when its type is the expected one, its length too (for a list or tuple), and
  ``numpy.allclose(out, exp, rtol=1e-07, atol=atol)``.
- Time limit of an input: ``max(4.0, 4.0 × the reference's time on it)``; of a whole
  check: ``min(60, sum of the inputs' limits) + 2`` seconds.
- The JSON release stores tuples, sets and complex numbers as lists and strings; the
  inputs of the tasks EvalPlus lists are rebuilt as it rebuilds them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MIN_TIME_LIMIT_S = 4.0  # evalplus/config.py DEFAULT_MIN_TIME_LIMIT
TIME_LIMIT_FACTOR = 4.0  # evalplus/config.py DEFAULT_GT_TIME_LIMIT_FACTOR
TASK_TIMEOUT_CAP_S = 60.0  # evalplus/eval/__init__.py EVALPLUS_TIMEOUT_PER_TASK default
FLOAT_ATOL = 1e-6  # forced for float outputs when a task's atol is 0

# Tasks whose outputs are not serialisable: only "is it not None" is compared.
OUTPUT_NOT_NONE_TASKS = frozenset({"check_str", "text_match_three", "text_starta_endb"})
# Tasks whose outputs are compared as sets.
OUTPUT_SET_EQ_TASKS = frozenset(
    {
        "similar_elements",  # Mbpp/2
        "find_char_long",  # Mbpp/7
        "common_in_nested_lists",  # Mbpp/111
        "extract_singly",  # Mbpp/140
        "larg_nnum",  # Mbpp/232
        "intersection_array",  # Mbpp/249
        "find_dissimilar",  # Mbpp/579
        "Diff",  # Mbpp/769
    }
)


def _surface_area(base_edge: float, height: float) -> int:
    """Mbpp/581's oracle: "height" is the pyramid's perpendicular height."""
    slant = math.sqrt((base_edge / 2) ** 2 + height**2)
    return round(base_edge**2 + 4 * (base_edge * slant) / 2)


def _digit_distance(num1: int, num2: int) -> int:
    """Mbpp/558's oracle: the shorter number is padded with zeros."""
    a, b = str(num1), str(num2)
    width = max(len(a), len(b))
    return sum(abs(int(x) - int(y)) for x, y in zip(a.zfill(width), b.zfill(width), strict=True))


def is_floats(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, (list, tuple)) and value:
        return all(isinstance(item, float) for item in value)
    return False


def output_matches(entry_point: str, inputs: list[Any], out: Any, exp: Any, atol: float) -> bool:
    """Whether `out` passes for the input `inputs` of an MBPP+ task (never raises: a
    comparison that fails to run is a failed input, as in EvalPlus)."""
    try:
        return _matches(entry_point, inputs, out, exp, atol)
    except Exception:  # noqa: BLE001 - EvalPlus catches everything here too
        return False


def _matches(entry_point: str, inputs: list[Any], out: Any, exp: Any, atol: float) -> bool:
    exact = out == exp
    if entry_point == "are_equivalent":  # Mbpp/164
        exact = True
    elif entry_point == "sum_div":  # Mbpp/295
        exact = exact or out == 0
    elif entry_point == "surface_Area":  # Mbpp/581
        exact = exact or abs(out - _surface_area(*inputs)) <= atol
    elif entry_point == "digit_distance_nums":  # Mbpp/558
        exact = exact or out == _digit_distance(*inputs)
    elif entry_point in OUTPUT_SET_EQ_TASKS:
        exact = set(out) == set(exp)
    elif entry_point in OUTPUT_NOT_NONE_TASKS:
        exact = out == exp if isinstance(out, bool) else exp == (out is not None)
    if atol == 0 and is_floats(exp):
        atol = FLOAT_ATOL
    if not exact and atol != 0:
        if type(out) is not type(exp):
            return False
        # `out` has `exp`'s type (above): a list or tuple exactly where `exp` is one.
        if isinstance(out, (list, tuple)) and len(out) != len(exp):
            return False
        return bool(np.allclose(out, exp, rtol=1e-07, atol=atol))
    return bool(exact)


def time_limits(reference_times: list[float]) -> list[float]:
    return [max(MIN_TIME_LIMIT_S, TIME_LIMIT_FACTOR * t) for t in reference_times]


def check_timeout(limits: list[float]) -> float:
    """The wall clock of one check (EvalPlus: ``min(60, sum) + 1``, joined + 1)."""
    return min(TASK_TIMEOUT_CAP_S, sum(limits)) + 2.0


# -- the release's inputs, rebuilt (evalplus/data/mbpp.py `mbpp_deserialize_inputs`) --

_TUPLE_ARGS = frozenset(
    {2, 116, 132, 143, 222, 261, 273, 394, 399, 421, 424, 429, 470, 560, 579, 596, 616,
     630, 726, 740, 744, 809}
)  # fmt: skip
_TUPLES_IN_LISTS = frozenset(
    {63, 64, 70, 94, 120, 237, 272, 299, 400, 409, 417, 438, 473, 614, 780}
)  # fmt: skip
_FIRST_ARG_TUPLES = frozenset({75, 413, 444, 753})
_SECOND_ARG_TUPLE = frozenset({106, 750})
_FIRST_TUPLE_THEN_REST = frozenset({250, 405, 446, 617, 720, 763, 808})
_TUPLES_OF_TUPLES = frozenset({259, 401, 445})
_ALL_TUPLES = frozenset({580, 615, 791})


def _all_tuples(value: Any) -> Any:
    return tuple(_all_tuples(v) for v in value) if isinstance(value, list) else value


def deserialize_inputs(task_number: int, inputs: list[Any]) -> list[Any]:
    """The input lists of MBPP+ task `task_number` as EvalPlus hands them to the
    function (its release stores tuples and complex numbers as JSON lists/strings)."""
    n = task_number
    if n in _TUPLE_ARGS:
        return [[tuple(arg) for arg in inp] for inp in inputs]
    if n in _TUPLES_IN_LISTS:
        return [[[tuple(x) for x in arg] for arg in inp] for inp in inputs]
    if n in _FIRST_ARG_TUPLES:
        return [[[tuple(x) for x in inp[0]], inp[1]] for inp in inputs]
    if n in _SECOND_ARG_TUPLE:
        return [[inp[0], tuple(inp[1])] for inp in inputs]
    if n == 115:
        return [
            [[set(x) if isinstance(x, list) and len(x) else {} for x in inp[0]]] for inp in inputs
        ]
    if n == 124:
        return [(float(inp[0]), complex(inp[1])) for inp in inputs]
    if n in _FIRST_TUPLE_THEN_REST:
        return [[tuple(inp[0]), inp[1]] for inp in inputs]
    if n in _TUPLES_OF_TUPLES:
        rebuilt = [[[tuple(x) for x in arg] for arg in inp] for inp in inputs]
        return [[tuple(arg) for arg in inp] for inp in rebuilt]
    if n == 278:
        rebuilt = [[[tuple(x) if isinstance(x, list) else x for x in inp[0]]] for inp in inputs]
        return [[tuple(arg) for arg in inp] for inp in rebuilt]
    if n == 307:
        return [[tuple(inp[0]), inp[1], inp[2]] for inp in inputs]
    if n == 722:
        return [[{k: tuple(v) for k, v in inp[0].items()}, *inp[1:]] for inp in inputs]
    if n == 252:
        return [[complex(inp[0])] for inp in inputs]
    if n in _ALL_TUPLES:
        return [_all_tuples(inp) for inp in inputs]
    return inputs
