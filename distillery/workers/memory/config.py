"""How a student uses AMD memory: which types, how many, how similar, in which form."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from distillery.workers.memory.records import MEMORY_TYPES, MemoryType, Representation

SubtaskQuery = Literal["decompose", "per_turn"]


class RetrievalConfig(BaseModel):
    """Defaults follow the authors' BFCL code: k = 1 for every type, Workflow without a
    threshold, Subtask cosine >= 0.45, Function top-1 by instruction similarity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    types: tuple[MemoryType, ...] = MEMORY_TYPES
    k_wf: int = Field(1, ge=1, le=20)
    k_st: int = Field(1, ge=1, le=20)
    k_fn: int = Field(1, ge=1, le=20)
    threshold_wf: float | None = Field(None, ge=-1, le=1)
    threshold_st: float | None = Field(0.45, ge=-1, le=1)
    threshold_fn: float | None = Field(None, ge=-1, le=1)
    representation_wf: Representation = "text"
    representation_st: Representation = "code"
    representation_fn: Representation = "code"
    # decompose: the student splits the first instruction into <= max_subtasks labels
    # (paper Algorithm 1); per_turn: each user turn is the query (authors' BFCL code).
    subtask_query: SubtaskQuery = "per_turn"
    max_subtasks: int = Field(6, ge=1, le=12)
    block_max_chars: int = Field(6000, ge=200, description="Cap of the WF+ST block.")

    @model_validator(mode="after")
    def _types_known(self) -> RetrievalConfig:
        unknown = set(self.types) - set(MEMORY_TYPES)
        if unknown:
            raise ValueError(f"unknown memory types {sorted(unknown)}; use wf, st, fn")
        if len(set(self.types)) != len(self.types):
            raise ValueError("memory types repeat")
        return self

    def k(self, memory_type: MemoryType) -> int:
        return getattr(self, f"k_{memory_type}")

    def threshold(self, memory_type: MemoryType) -> float | None:
        return getattr(self, f"threshold_{memory_type}")

    def representation(self, memory_type: MemoryType) -> Representation:
        return getattr(self, f"representation_{memory_type}")
