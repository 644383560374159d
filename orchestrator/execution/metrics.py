"""Per-agent metrics from episode summaries (the numbers every child run logs). A memory
method's own metrics (from its hooks' records) are the method's (`MemoryMethod.metrics`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

from distillery.orchestrator.core.stats import percentile, wilson_interval
from distillery.workers.trajectories import INFRA_TERMINATIONS


class EpisodeLike(Protocol):
    success: bool | None
    termination: str
    total_steps: int
    tokens_in: int
    tokens_out: int
    wall_s: float


def agent_metrics(episodes: Sequence[Any]) -> dict[str, float]:
    """Success over scored episodes only: infrastructure failures are excluded from the
    denominator and counted in `infra_errors` instead. With no scored episode there is
    no success rate: it, its interval, the mean steps and the latencies are NaN (a 0 %
    would read as a result)."""
    scored = [e for e in episodes if e.success is not None]
    wins = sum(1 for e in scored if e.success)
    low, high = wilson_interval(wins, len(scored))
    walls = [e.wall_s for e in scored]
    nan = math.nan
    return {
        "success_rate": wins / len(scored) if scored else nan,
        "success_rate_ci_low": low,
        "success_rate_ci_high": high,
        "n_tasks": float(len(episodes)),
        "n_scored": float(len(scored)),
        "n_unscored": float(len(episodes) - len(scored)),
        "n_success": float(wins),
        "mean_steps": sum(e.total_steps for e in scored) / len(scored) if scored else nan,
        "tokens_in": float(sum(e.tokens_in for e in episodes)),
        "tokens_out": float(sum(e.tokens_out for e in episodes)),
        "latency_p50_s": percentile(walls, 50) if walls else nan,
        "latency_p95_s": percentile(walls, 95) if walls else nan,
        "infra_errors": float(sum(1 for e in episodes if e.termination in INFRA_TERMINATIONS)),
        "step_limit_hits": float(sum(1 for e in episodes if e.termination == "step_limit")),
        # The model's own failure (scored), counted apart from other failures.
        "context_overflows": float(sum(1 for e in episodes if e.termination == "context_overflow")),
        "tokens_reasoning": float(sum(getattr(e, "tokens_reasoning", 0) for e in episodes)),
    }
