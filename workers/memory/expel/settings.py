"""ExpeL's settings, with the source of each default.

Sources: the original code (LeapLabTHU/ExpeL: `configs/agent/expel.yaml`,
`configs/benchmark/*.yaml`, `configs/train.yaml`, `agent/expel.py`,
`agent/reflect.py`, `utils.py`). What the original leaves to the model's context
(how much of a trajectory a prompt holds) is ours, marked.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from distillery.workers.memory.config import EmbedderConfig
from distillery.workers.memory.feedback import DEFAULT_FEEDBACK, Feedback

# The original's embedder for task similarity (configs/agent/expel.yaml
# `retrieval_kwargs.embedder_path: all-mpnet-base-v2`, `embedder_type: huggingface`).
# A run under another is tagged `expel_embedder` (`Expel.tags`).
ORIGINAL_EMBEDDER = "all-mpnet-base-v2"

# The settings that decide the bank (the gathering and the extraction): the stage's
# identity. The others decide what a student reads of it.
BUILD_FIELDS = (
    "max_reflection_depth",
    "max_num_rules",
    "success_critique_num",
    "shuffle_seed",
    "trajectory_chars",
    "observation_chars",
)


class ExpelSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # -- gathering (the teacher on the memory split) ----------------------------------
    # Reflections (re-plays) after a failed play of a training task: configs/agent/
    # expel.yaml `max_reflection_depth: 3` (so up to 4 plays of a task).
    max_reflection_depth: int = Field(default=3, ge=0, le=10)
    # What a gathering reflection reads of a failed play: the one feedback setting of
    # AgentBrew and every baseline (workers/memory/feedback.py; memory.retrieval.feedback
    # sets it for all). binary: the AgentBrew paper's regime (the original's ReflectAgent
    # is told only that its trial failed on AlfWorld and WebShop).
    feedback: Feedback = DEFAULT_FEEDBACK
    # -- insight extraction -----------------------------------------------------------
    # The rule list's size past which the critique is told to remove rather than add
    # (and a REMOVE weighs 3 once it is 5 longer): expel.yaml `max_num_rules: 20`,
    # agent/expel.py `create_rules` / `update_rules`.
    max_num_rules: int = Field(default=20, ge=1, le=200)
    # Successful trajectories per all-success critique: expel.yaml
    # `success_critique_num: 8` (utils.py `random_divide_list`: chunks of at most 8).
    success_critique_num: int = Field(default=8, ge=1, le=50)
    # The successes are shuffled before chunking (the original's `random.shuffle`, under
    # configs/train.yaml `seed: 42`): seeded, so a bank is reproducible.
    shuffle_seed: int = 42
    # Ours (the original shows whole trials and relies on the model's context; a cut
    # keeps a runaway episode from overflowing a critique): a trajectory's characters in
    # a critique or an example, each observation's.
    trajectory_chars: int = Field(default=8_000, ge=1_000, le=200_000)
    observation_chars: int = Field(default=1_000, ge=100, le=20_000)
    # -- what the student reads -------------------------------------------------------
    # In-context examples: the successful trajectories of the most similar training
    # tasks by task similarity (expel.yaml `fewshot_strategy: task_similarity`);
    # configs/benchmark/alfworld.yaml `num_fewshots: 2` (HotPotQA's 6, WebShop's 2).
    k: int = Field(default=2, ge=0, le=10)
    # Candidates per example, filtered for length (expel.yaml `buffer_retrieve_ratio: 4`).
    buffer_retrieve_ratio: int = Field(default=4, ge=1, le=20)
    # The example budget: an example longer than this is skipped, the next candidate
    # tried (the original skips one over its token limit, expel.yaml `max_fewshot_tokens:
    # auto`: the longest of the benchmark's hand-written few-shots). Ours, 6,000
    # characters (about 1.5 k tokens): our benchmarks have no hand-written few-shots to
    # measure. Each skip is counted (episode log and metric `examples_too_long`) and
    # marked next to ExpeL's cell in the report; long AppWorld runs may leave a student
    # with insights only, so raise it there
    # (method_catalog.<entry>.retrieval.max_example_chars=<chars>).
    max_example_chars: int = Field(default=6_000, ge=500, le=100_000)
    # The insights in the prompt (configs/eval.yaml `no_rules: false`); false: examples
    # only (the original's ablation).
    insights: bool = True
    # ExpeL's own embedder for its bank and its task-similarity queries (an embedder
    # config as conf/memory/embedder/*.yaml: the original's, all-mpnet-base-v2, is the
    # catalog entry `expel_mpnet`'s); None: the sweep's `memory.embedder`, as every
    # other method (offline default all-MiniLM-L6-v2). Ours: the original has one
    # embedder per run; a sweep comparing methods has one for all, so ExpeL's own is
    # a setting. In the bank's and the read's identity when set.
    embedder: EmbedderConfig | None = None

    def build_identity(self) -> dict[str, Any]:
        out = self.model_dump(mode="json", include=set(BUILD_FIELDS))
        if self.feedback != DEFAULT_FEEDBACK:  # set only: the banks of old keep their keys
            out["feedback"] = self.feedback
        return out
