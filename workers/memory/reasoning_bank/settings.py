"""ReasoningBank's read settings, with the original's defaults.

- `top_k` = 1: the original retrieves the single most similar past task and injects
  all of its memory items (google-research/reasoning-bank, WebArena/run.py:
  `select_memory(n=1, ...)`); the AMD paper describes the baseline as "retrieves a
  single reasoning insight per task". The AMD authors' AppWorld baseline uses 3
  (agentic_memory_distillation, appworld/rb/experiments/configs/*.jsonnet
  `"top_k": 3`): the catalog entry `reasoning_bank_amd_appworld`.
- `threshold` = None: neither ranks with a similarity floor (pure top-n by cosine).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ReasoningBankSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Records (past trajectories) retrieved per task; the original warns above 10
    # (memory_management.select_memory).
    top_k: int = Field(default=1, ge=1, le=10)
    threshold: float | None = Field(default=None, ge=-1, le=1)
