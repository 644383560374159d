"""Read settings of trajectory RAG, with the source of each default.

The AMD paper names the naive transfer (Figure 1 B, section 1: "naive memory
transfer yields only marginal improvements") but publishes no settings for it; the
defaults follow AMD's own read settings where one applies, so the comparison differs
only in what is stored, not in how much is retrieved.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class TrajectoryRagSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # Top-1: AMD paper section 4.1 retrieves the top-1 entry per query (k = 1), and the
    # issue's naive baseline is "top-1 by default".
    k: int = Field(default=1, ge=1, le=5)
    # No similarity floor: the naive baseline always shows its nearest trajectory
    # (AMD's thresholds are tuned for its own entry texts, not for whole requests).
    threshold: float | None = Field(default=None, ge=-1, le=1)
    # Budget of one rendered trajectory in characters (about 1.5 k tokens): not in the
    # paper. The oracle's 200 BFCL multi-turn trajectories render to a median 1.5 k
    # and at most 3.1 k characters, so a whole trajectory fits with room for a real
    # teacher's retries, while a runaway one cannot crowd out the benchmark's function
    # docs in a 4 B student's context.
    max_chars: int = Field(default=6000, ge=200, le=100_000)
    # Per-observation cut: the 500 characters this project's AMD keeps of a Subtask
    # step's observation (its SegmentStep), so both show observations alike.
    max_observation_chars: int = Field(default=500, ge=20, le=4000)
    # Whether the rendering shows stored answers. None (the default): where the benchmark
    # grades a closing reply (`TrajectoryRag.for_benchmark` resolves it from the
    # benchmark's trajectory contents); a value you set is kept. Off, it is left out of
    # the read identity: tool-use keys are as they were.
    answers: bool | None = None
