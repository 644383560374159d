"""MemP's read settings, with the source of each default.

Sources: zjunlp/MemP (`ProcedureMem/memory.py`, `run_memp_offline.py`), the MemP paper
(arXiv 2508.06433; not in ../shared/papers: its build comparison as the paper and its
summaries report it), and the AMD authors' AppWorld MemP
(taeilkim2465/agentic_memory_distillation, `appworld/memp/`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The original's "query" policy keeps hits with FAISS score <= 0.5
# (`similarity_search_with_score(key, k, score_threshold=0.5)`); LangChain's FAISS
# scores by squared L2 distance, which for unit vectors is 2 - 2 cos, so the floor is
# cosine >= 0.75. Its "ave_fact" policy has no floor. Its embedder is OpenAI's
# text-embedding-3-small (`llm_api.get_embedding_model`); cosine scales differ between
# embedders, so a run with another one is tagged (`MempMethod.tags`).
QUERY_THRESHOLD = 0.75
THRESHOLD_EMBEDDER = "text-embedding-3-small"


class MempSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # How entries are found. "query": cosine of the task query to each entry's query
    # (the original's `retrieve: "query"`, the policy of `run_memp_offline.py`);
    # "keywords": the student extracts the query's keywords and an entry's score is the
    # mean cosine of the keywords to its query + keywords (the paper's AveFact as the
    # AMD authors implement it, `memp/retriever.py`).
    retrieve: Literal["query", "keywords"] = "query"
    # Entries read: `retrieve_num: 10` of `run_memp_offline.py` (also the Memory
    # default). The AMD authors' AppWorld student reads 3 (`retrieval_top_k: 3`).
    k: int = Field(default=10, ge=1, le=20)
    # Cosine floor: QUERY_THRESHOLD for "query", none for "keywords" (see above).
    threshold: float | None = Field(default=None, ge=-1, le=1)
    # What an entry shows: "script" (the original code's `workflow` guidelines; the AMD
    # authors' student shows the script), "trajectory" (the executed calls), or "both"
    # (the paper's Proceduralization, script and trajectory together, its best build).
    content: Literal["script", "trajectory", "both"] = "both"
    # Where memory goes: "user" (the original appends it to the task's first
    # observation, `run_memp_offline.py`: the first user message here), or "system"
    # (the AMD authors' AppWorld generator prompt puts it in the system part).
    placement: Literal["user", "system"] = "user"

    @model_validator(mode="before")
    @classmethod
    def _policy_threshold(cls, data: Any) -> Any:
        if isinstance(data, dict) and "threshold" not in data:
            policy = data.get("retrieve", "query")
            data = {**data, "threshold": QUERY_THRESHOLD if policy == "query" else None}
        return data
