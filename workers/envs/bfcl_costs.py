"""Bounds on what one validated BFCL call may cost to run.

A call with literal arguments can still be unbounded: BFCL's MathAPI computes
``base ** exponent`` on Python integers (``power(base=10, exponent=10**29)`` never
returns), sets mpmath's or decimal's precision to whatever it is given (``logarithm(...,
precision=10**8)``) and rounds integers to any number of places (``round_number(5,
-10**29)`` computes ``10**(10**29)``). These run in C holding the GIL, so no timeout or
thread can stop them: they would freeze every episode of the worker. Such calls are
refused before they run, with the reason, like any other invalid call (and so never
reach the checker's replay either).

The limits are far beyond any value the benchmark's tasks use (results of at most
`MAX_RESULT_BITS` bits, precisions of at most `MAX_PRECISION` digits), so a call a
task needs always runs exactly as BFCL's own runner would run it.
"""

from __future__ import annotations

import math
from typing import Any

from distillery.workers.envs.base import ToolCall

MAX_RESULT_BITS = 100_000  # ~30,000 decimal digits: computed in well under a millisecond
MAX_PRECISION = 10_000  # digits of mpmath / decimal precision
MAX_DECIMAL_PLACES = 10_000

# Parameter order of the MathAPI functions concerned (their calls may be positional).
_PARAMETERS = {
    "power": ("base", "exponent"),
    "logarithm": ("value", "base", "precision"),
    "square_root": ("number", "precision"),
    "round_number": ("number", "decimal_places"),
}


def _argument(call: ToolCall, name: str) -> Any:
    if name in call.kwargs:
        return call.kwargs[name]
    index = _PARAMETERS[call.name].index(name)
    return call.args[index] if index < len(call.args) else None


def _is_int(value: Any) -> bool:
    return type(value) is int


def execution_cost_error(call: ToolCall) -> str | None:
    """Why `call` would run without bound, or None when its cost is bounded."""
    if call.name not in _PARAMETERS:
        return None
    if call.name == "power":
        base, exponent = _argument(call, "base"), _argument(call, "exponent")
        # Only integer ** positive integer is exact (and so as large as it gets); floats
        # overflow at once and negative exponents give floats.
        if _is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1:
            bits = exponent * math.log2(abs(base))
            if bits > MAX_RESULT_BITS:
                return (
                    f"power({base}, {exponent}) would have about {bits:.3g} bits "
                    f"(limit {MAX_RESULT_BITS})"
                )
        return None
    if call.name in ("logarithm", "square_root"):
        precision = _argument(call, "precision")
        if isinstance(precision, (int, float)) and abs(precision) > MAX_PRECISION:
            return f"precision {precision} is over the limit of {MAX_PRECISION} digits"
        return None
    places = _argument(call, "decimal_places")
    if isinstance(places, (int, float)) and abs(places) > MAX_DECIMAL_PLACES:
        return f"decimal_places {places} is over the limit of {MAX_DECIMAL_PLACES}"
    return None
