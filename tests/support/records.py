"""Test record factories shared by the tests: one place that builds an `EpisodeRecord`,
so a new field of the record is added here once, not in every test that needs one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distillery.workers.trajectories import EpisodeRecord, StepRecord


def episode_record(
    task_id: str = "multi_turn_base_0",
    success: bool | None = True,
    steps: Sequence[StepRecord] = (),
    **fields: Any,
) -> EpisodeRecord:
    """A consistent one-turn episode: step counts, LLM calls, tokens and latency are the
    sums over `steps`; `success=None` is an infrastructure failure (not scored). Any
    other field is given by keyword and wins over the derived value."""
    steps = list(steps)
    infra = success is None
    values: dict[str, Any] = {
        "run_id": "r",
        "stage": "evaluate",
        "role": "student",
        "agent": "a",
        "model": "m",
        "backend": "external",
        "action_format": "prompt",
        "benchmark": "bfcl_multi_turn_base",
        "task_id": task_id,
        "group_id": None,
        "n_turns": 1,
        "success": success,
        "error_type": "infra_error" if infra else None,
        "error_message": None,
        "termination": "infra_error" if infra else "done",
        "steps_per_turn": [len(steps)],
        "total_steps": len(steps),
        "n_llm_calls": len(steps),
        "tokens_in": sum(s.tokens_in for s in steps),
        "tokens_out": sum(s.tokens_out for s in steps),
        "llm_latency_s": sum(s.latency_s for s in steps),
        "wall_s": 0.2,
        "started_at": 1.0,
        "finished_at": 1.2,
        "attempts": 1,
        "episode_id": f"e-{task_id}",
        "steps": steps,
    }
    unknown = set(fields) - set(EpisodeRecord.__dataclass_fields__)
    if unknown:
        raise TypeError(f"EpisodeRecord has no field(s) {sorted(unknown)}")
    return EpisodeRecord(**{**values, **fields})
