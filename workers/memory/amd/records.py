"""AMD memory entries (paper section 3.2): Workflow, Subtask and Function memory.

A memory method knows retrieval and injection and nothing of Ray. Every entry carries
its provenance (`MemorySource`) so that retrieval can prove isolation: under
`self_excluded` a task never sees an entry built from itself, under `cross_split` only
entries from the memory split are visible.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# Generic provenance (the store and retrieval read it); re-exported for AMD's modules.
from distillery.workers.memory.entries import CollectionSpec, MemorySource

__all__ = ["MemorySource"]

MemoryType = Literal["wf", "st", "fn"]
Representation = Literal["text", "code"]
MEMORY_TYPES: tuple[MemoryType, ...] = ("wf", "st", "fn")
# The first part of AMD's collection names (`amd_wf_<bank16>`): stored banks are found
# by these names, so they never change.
STORE_PREFIX = "amd"


@dataclass(frozen=True)
class WorkflowMemory:
    """One insight per successful trajectory; retrieved by the task instruction."""

    memory_id: str
    source: MemorySource
    query: str  # the task's first user message: the retrieval key
    text: str  # prose insight (2-4 sentences, < 120 words, names Class.method functions)
    code: str  # the trajectory's masked calls, one per line: the `code` representation
    functions: tuple[str, ...]  # functions the trajectory used
    fallback: bool = False  # True when the deterministic insight replaced the LLM's

    @property
    def key_text(self) -> str:
        return self.query


@dataclass(frozen=True)
class SegmentStep:
    call: str  # masked canonical call, e.g. "cd(folder=<FOLDER>)"
    observation: str  # sanitised, cut to 500 characters


@dataclass(frozen=True)
class SubtaskSegment:
    """A labelled run of consecutive steps; retrieved by label + description."""

    memory_id: str
    source: MemorySource
    index: int  # position in the trajectory's segmentation
    label: str  # at most 5 words
    description: str  # one sentence
    steps: tuple[SegmentStep, ...]
    text: str  # prose rendering of the steps (written by the builder LLM)
    fallback: bool = False

    @property
    def key_text(self) -> str:
        return f"{self.label}: {self.description}"

    @property
    def code(self) -> str:
        return "\n".join(f"{s.call}\n# -> {s.observation}" for s in self.steps)


@dataclass(frozen=True)
class FunctionRecord:
    """One successful call; looked up by exact function name, ranked by instruction."""

    memory_id: str
    source: MemorySource
    function: str  # exact function name, the lookup key
    call: str  # masked canonical call
    result: str  # truncated observation
    instruction: str  # the user message of the turn the call was made in (ranking key)
    schema: dict[str, Any] = field(default_factory=dict)  # the function's doc
    text: str = ""  # prose rendering (builder LLM), for the `text` representation
    # Why the teacher made the call: the AMD authors' ToolSandbox records carry one
    # (`think`, toolsandbox/common/memory/data_model.py:72, written by their builder's
    # think model, builder.py:250), which `fn_ranking=call_ngrams` ranks by
    # (fn_ranking.py). Built on profiles with `function_reasoning` (ToolSandbox,
    # call_reasoning.py); elsewhere, or where the builder model gave no valid answer,
    # empty: that ranking then falls back to the query, as their store does for records
    # without one (store.py:207).
    reasoning: str = ""

    @property
    def key_text(self) -> str:
        return self.instruction

    @property
    def code(self) -> str:
        return f"{self.call}\n# -> {self.result}"


MemoryEntry = WorkflowMemory | SubtaskSegment | FunctionRecord

# One collection per memory type: Subtask labels are payload fields (filtering,
# exports), Function records are ranked within their function (the lookup key).
COLLECTIONS: tuple[CollectionSpec, ...] = (
    CollectionSpec("wf", WorkflowMemory),
    CollectionSpec("st", SubtaskSegment, filter_fields=("label",)),
    CollectionSpec("fn", FunctionRecord, group_field="function"),
)
SPECS: dict[MemoryType, CollectionSpec] = {s.name: s for s in COLLECTIONS}  # type: ignore[misc]
