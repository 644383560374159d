"""Small statistics used by metrics and reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# What a point or cell with no scored episode shows for its rate, everywhere (console,
# MLflow's `success` tag, the report): no number that reads as one (`nan%`, `0 %`).
NO_SCORED_EPISODES = "no scored episodes"


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95 % Wilson score interval for a binomial proportion (sane at 0 and n). With no
    trials there is no interval: (nan, nan), never a [0, 0] that reads as a result."""
    if n <= 0:
        return (math.nan, math.nan)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))


@dataclass(frozen=True)
class McNemar:
    """Paired test on discordant pairs: b = only the first arm succeeded, c = only the
    second did. `method` is "exact" (two-sided binomial, p = 1/2) or "chi2"
    (continuity-corrected); `statistic` is the chi-square value (None for exact)."""

    b: int
    c: int
    p: float
    method: str
    statistic: float | None


def mcnemar(b: int, c: int, exact_below: int = 25) -> McNemar:
    """McNemar's test. Exact binomial when b + c < `exact_below` (the chi-square
    approximation is poor for few discordant pairs), else chi-square with continuity
    correction. Both are computed exactly in closed form: the binomial tail with integer
    arithmetic, and P(chi2_1 > x) = erfc(sqrt(x / 2))."""
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return McNemar(b, c, 1.0, "exact", None)
    if n < exact_below:
        tail = sum(math.comb(n, i) for i in range(min(b, c) + 1))
        return McNemar(b, c, min(1.0, 2 * tail / 2**n), "exact", None)
    statistic = max(0, abs(b - c) - 1) ** 2 / n  # b == c: no evidence either way, p = 1
    return McNemar(b, c, math.erfc(math.sqrt(statistic / 2)), "chi2", statistic)
