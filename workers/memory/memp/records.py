"""MemP's memory entries: one procedure per successful teacher trajectory.

The original keys a document by the task query (zjunlp/MemP `ProcedureMem/memory.py`:
`Document(page_content=query, metadata={"workflow": ...})`) and stores the built
workflow (script) beside it; the AMD authors' AppWorld adaptation
(taeilkim2465/agentic_memory_distillation, `appworld/memp/.../memp/memory_store.py`)
keeps the trajectory, the script and the query's keywords in one entry. Both keys are
stored here, as two collections of the same entries: `procedure` keyed by the query
(the query variant) and `procedure-kw` keyed by query + keywords (the text the AMD
authors' AveFact retriever embeds per entry, `retriever.py` `_entry_text`).
"""

from __future__ import annotations

from dataclasses import dataclass

from distillery.workers.memory.entries import CollectionSpec, MemorySource

# The first part of MemP's Qdrant collection names (`memp_procedure_<bank16>`).
STORE_PREFIX = "memp"
QUERY_COLLECTION = "procedure"
KEYWORD_COLLECTION = "procedure-kw"


@dataclass(frozen=True)
class Procedure:
    """One successful teacher trajectory as procedural memory."""

    memory_id: str
    source: MemorySource
    query: str  # the task's first user message: the key
    script: str  # abstract numbered procedure (builder LLM, or the deterministic one)
    trajectory: str  # the executed calls with their (cut) observations, one per line
    keywords: tuple[str, ...]  # of the query: the keyword variant's entry key
    fallback: bool = False  # True when the deterministic script replaced the LLM's
    # The trajectory's verdict: "success", or "failure" in the AMD authors' ports'
    # banks (`memp_amd`), which keep failed teacher trajectories too, labelled.
    outcome: str = "success"

    @property
    def key_text(self) -> str:
        return self.query


@dataclass(frozen=True)
class KeywordProcedure(Procedure):
    """The same procedure, keyed by its query and keywords (AveFact's entry text)."""

    @property
    def key_text(self) -> str:
        return " ".join([self.query, *self.keywords]).strip()


COLLECTIONS: tuple[CollectionSpec, ...] = (
    CollectionSpec(QUERY_COLLECTION, Procedure),
    CollectionSpec(KEYWORD_COLLECTION, KeywordProcedure),
)
