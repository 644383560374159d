"""MemP's read settings, with the source of each default.

Sources: zjunlp/MemP (`ProcedureMem/memory.py`, `run_memp_offline.py`), the MemP paper
(arXiv 2508.06433; not in ../shared/papers: its build comparison as the paper and its
summaries report it), and the AMD authors' AppWorld MemP
(taeilkim2465/agentic_memory_distillation, `appworld/memp/`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from distillery.workers.memory.port_context import PortContextSettings

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
            policy = data.get("retrieve", cls.model_fields["retrieve"].default)
            data = {**data, "threshold": QUERY_THRESHOLD if policy == "query" else None}
        return data


class MempPortSettings(MempSettings, PortContextSettings):
    """The AMD authors' ports' read settings (`memp_amd`): their AppWorld student
    (appworld/memp/experiments/configs/MEMP_student_no_GT_qwen3_4b.jsonnet,
    memp_student_react.py): AveFact keywords asked of the student's own model, top-3
    (`retrieval_top_k: 3`), the script only, in the generator prompt's memory slot
    (the system part here, the slot of the authors' prompt on AppWorld); their
    ToolSandbox scripts (toolsandbox/memp/scripts/run_memp_student.sh): keywords,
    `MEMP_TOP_K=3`."""

    retrieve: Literal["query", "keywords"] = "keywords"
    k: int = Field(3, ge=1, le=20)
    content: Literal["script", "trajectory", "both"] = "script"
    placement: Literal["user", "system"] = "system"
    # The AppWorld student's loop hints (memp_student_react.py `_build_loop_hint`: the
    # same code, the same error or failures three times; memory/repeats.py `LoopHints`).
    # Off by default: their ToolSandbox student's code is not public; memp_amd_appworld
    # sets it.
    loop_hints: bool = False
    # `context_trim`, `context_buffer` (memory/port_context.py): how the student's
    # history is trimmed to its context. Their AppWorld student blanks old outputs, then
    # drops messages (memp_student_react.py `trimmed_messages`, lines 322-352), with
    # 1,536 tokens free for Qwen3-4B (MEMP_student_no_GT_qwen3_4b.jsonnet:47) and its
    # loop's default 256 otherwise (memp_student_react.py:35; the Gemma config sets
    # none): memp_amd_appworld sets both. None: the benchmark's own.


# How the `memp_amd` method differs from the AMD authors' ports and from zjunlp/MemP,
# whatever the settings (recorded with every run: the `differences` tag);
# docs/fidelity/appworld.md explains each.
PORT_DIFFERENCES = (
    # One builder call writes the script and the keywords (the ports ask twice).
    "script_and_keywords_in_one_builder_call",
    # The ports' builder prompts are their own; these are written for this project.
    "builder_prompts_ours",
    # The ports keep the proceduralized trajectory's adjust step (memp_adjust_prompt);
    # the bank is built once, frozen (no adjust, no online update).
    "no_adjust_no_online_update",
    # The AppWorld port's loop hints (memp_student_react.py `_build_loop_hint`) are
    # `loop_hints` (on in memp_amd_appworld), their texts in our wording; without it
    # the tag adds `no_loop_hints`.
    "loop_hints_in_our_wording",
    # Nothing retrieved: nothing injected (the ports write a "no relevant past
    # experience" line).
    "empty_retrieval_injects_nothing",
    # The ToolSandbox port asks gpt-5-mini for the keywords (--keyword_llm); here the
    # student's own model, as on AppWorld.
    "keywords_by_the_student_on_toolsandbox",
    # The query is embedded by memory.embedder (the ports: text-embedding-3-small).
    "embedder_configurable",
)
