"""AMD's read settings (`memory.retrieval` and an AMD catalog entry's `retrieval`):
which memory types a student reads, how many entries, how similar, in which form."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from distillery.workers.memory.amd import appworld_prompts, toolsandbox_prompts
from distillery.workers.memory.amd.records import MEMORY_TYPES, MemoryType, Representation

SubtaskQuery = Literal["decompose", "per_turn"]
# What the proactive retrieval (Workflow, and the decomposition that queries Subtask
# memory) is asked with: the task's user turn, what the agent is given; or, where the
# benchmark's simulated user has an instruction of its own (ToolSandbox), that hidden
# instruction, as the AMD authors' ToolSandbox student retrieved
# (toolsandbox/common/roles/memory_augmented_agent.py reads the SYSTEM->USER message).
# ToolSandbox's composed settings ask with the hidden instruction
# (conf/memory/benchmark/toolsandbox.yaml: the paper's ToolSandbox numbers come from
# it); `query=user_turn` there is ours, a named option recorded in the stage identity:
# the agent never sees that instruction, so retrieving by it hands the student the
# user's private goal, which no deployed agent has.
RetrievalQuery = Literal["user_turn", "hidden_user_instruction"]
# How a failing tool's Function records are ranked. embedding: by the embedder's cosine
# of the turn's instruction with each record's (the authors' BFCL code ranks by the
# task's instruction; ours on BFCL and AppWorld). call_ngrams: by character 2/3-gram
# vectors of the failing step's calls against each record's reasoning, else of the
# task query against the record's (the authors' ToolSandbox student,
# toolsandbox/common/memory/store.py:184-216 and memory_augmented_agent.py:199-229;
# fn_ranking.py); ToolSandbox's composed value. Call actions only (AppWorld's are code).
FunctionRanking = Literal["embedding", "call_ngrams"]


class RetrievalConfig(BaseModel):
    """Defaults follow the authors' BFCL code: k = 1 for every type, Workflow without a
    threshold, Subtask cosine >= 0.45, Function top-1 by instruction similarity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    types: tuple[MemoryType, ...] = MEMORY_TYPES
    k_wf: int = Field(default=1, ge=1, le=20)
    k_st: int = Field(default=1, ge=1, le=20)
    k_fn: int = Field(default=1, ge=1, le=20)
    threshold_wf: float | None = Field(default=None, ge=-1, le=1)
    threshold_st: float | None = Field(default=0.45, ge=-1, le=1)
    threshold_fn: float | None = Field(default=None, ge=-1, le=1)
    representation_wf: Representation = "text"
    representation_st: Representation = "code"
    representation_fn: Representation = "code"
    # The embedding model the thresholds were tuned for: cosine scales differ between
    # embedders, so a run with another one is tagged (distillery.thresholds_embedder).
    # The defaults are the authors' BFCL values, set with OpenAI text-embedding-3-small.
    thresholds_set_for: str = "text-embedding-3-small"
    # decompose: the student splits the first instruction into <= max_subtasks labels
    # (paper Algorithm 1); per_turn: each user turn is the query (authors' BFCL code).
    subtask_query: SubtaskQuery = "per_turn"
    max_subtasks: int = Field(default=6, ge=1, le=12)
    block_max_chars: int = Field(default=6000, ge=200, description="Cap of the WF+ST block.")
    # None: the user's turn (accepted as written by configs of before).
    query: RetrievalQuery | None = "user_turn"
    # Function hints led by the failing tool's description and parameters, as the
    # authors' ToolSandbox student appends them (memory_augmented_agent.py:167-173,
    # `_format_func_description`): from the task's tool list, to every failing call of
    # a listed tool, with or without an example: ToolSandbox's composed value.
    fn_description: bool = False
    fn_ranking: FunctionRanking = "embedding"

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

    def read_settings(self) -> dict[str, Any]:
        """The settings a method with these `types` actually reads (see
        `memory/amd/hooks.py`): k, threshold and representation of its own types; the
        Subtask query only with Subtask memory (`max_subtasks` only when it
        decomposes); the block cap only when a WF or ST block is injected. A stage's
        identity holds these and nothing else, so a sweep over `k_st` does not re-run
        a Workflow-only method."""
        types: list[MemoryType] = [t for t in MEMORY_TYPES if t in self.types]  # order unread
        out: dict[str, Any] = {"types": types}
        for t in types:
            out[f"k_{t}"] = self.k(t)
            out[f"threshold_{t}"] = self.threshold(t)
            out[f"representation_{t}"] = self.representation(t)
        if "fn" in self.types and self.fn_description:  # off: existing keys unchanged
            # The rule it follows (True in keys of before: from an example's schema,
            # only with an example; now the task's tools, always).
            out["fn_description"] = "task_tools"
        if "fn" in self.types and self.fn_ranking != "embedding":  # the default: unchanged
            out["fn_ranking"] = self.fn_ranking
        if "st" in self.types:
            out["subtask_query"] = self.subtask_query
            if self.subtask_query == "decompose":
                out["max_subtasks"] = self.max_subtasks
        if "wf" in self.types or "st" in self.types:
            out["block_max_chars"] = self.block_max_chars
            if self.query not in (None, "user_turn"):  # the default: existing keys unchanged
                out["query"] = self.query
        return out

    def threshold(self, memory_type: MemoryType) -> float | None:
        return getattr(self, f"threshold_{memory_type}")

    def representation(self, memory_type: MemoryType) -> Representation:
        return getattr(self, f"representation_{memory_type}")


# --- per-benchmark profiles -------------------------------------------------------
#
# AMD differs by benchmark where the paper does (its appendix C and the authors' code).
# Its read settings on a benchmark are CONFIG, composed into `memory.retrieval` by
# Hydra (conf/memory/benchmark/<benchmark>.yaml, chosen by the benchmark; below the
# experiment and the command line, so a value set there is kept whatever it equals):
# nothing here changes a setting after composition. What stays here is what is no
# setting: how AMD builds on the benchmark (AppWorld's actions are Python code, so its
# Subtask and Function memory are code and its prompts are the paper's figures 13-15)
# and the profile's name and digest in a read stage's identity. The benchmark name
# carried by the tasks and trajectories picks the profile, and nowhere else; a
# benchmark without an entry reads and builds AMD as on BFCL.

Actions = Literal["calls", "code"]
# Composed values a read stage's identity holds through `read_settings` alone (only
# where its method reads them), kept out of the profile's digest: a Workflow-only
# method's stage does not move when a Function setting is composed.
IN_READ_SETTINGS_ONLY = frozenset({"fn_ranking"})
# The composed settings of each profile: the conf package's file (one source of the values).
PROFILE_SETTINGS_DIR = "memory/benchmark"


def composed_profile_settings(name: str) -> dict[str, Any]:
    """The read settings `conf/memory/benchmark/<name>.yaml` composes into
    `memory.retrieval` on benchmark `name` ({} where it has no file)."""
    from importlib.resources import files

    import yaml

    path = files("distillery.conf").joinpath(f"{PROFILE_SETTINGS_DIR}/{name}.yaml")
    if not path.is_file():
        return {}
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


class BenchmarkProfile(BaseModel):
    """How AMD builds on one benchmark, and what its read stages are labelled with.

    `retrieval`: the read settings the benchmark's config file composes into
    `memory.retrieval` (composed_profile_settings: read from that file, for the
    profile's digest and for the identity's `query` rule; never applied here).
    `actions`: "calls" (a step is one function call, BFCL) or "code" (a step is one
    executed code block whose `apis.<app>.<api>(...)` calls are the functions).
    `function_reasoning`: the Function build asks the builder model why each stored
    call was made (`call_reasoning.py`), as the AMD authors' ToolSandbox builder does
    (toolsandbox/common/memory/builder.py:250); calls only. In the profile's digest
    (so its banks' ids) only when on."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    actions: Actions = "calls"
    retrieval: dict[str, Any] = Field(default_factory=dict)
    function_reasoning: bool = False

    @model_validator(mode="after")
    def _reasoning_of_calls(self) -> BenchmarkProfile:
        if self.function_reasoning and self.actions != "calls":
            raise ValueError("function_reasoning is built for call actions only")
        return self

    def label(self, config: RetrievalConfig) -> RetrievalConfig:
        """`config`, every value as composed, labelled with this profile (part of a
        read stage's identity: the profile's prompts are what the student reads);
        BFCL's profile returns `config` itself. Idempotent."""
        if self.name == BFCL_NAME or getattr(config, "profile", None) == self.name:
            return config
        base = config.model_dump(exclude={"profile"})
        return ProfiledRetrievalConfig.model_validate({**base, "profile": self.name})

    @property
    def builds_differently(self) -> bool:
        """Whether a build on this benchmark differs from BFCL's (code actions, or
        prompts of its own); its read values alone do not make it."""
        return self.name != BFCL_NAME and (
            self.actions != "calls" or self.function_reasoning or self.name in PROFILE_PROMPTS
        )

    def version(self) -> str:
        """This profile's composed values and the prompts its builders and students are
        given (AppWorld's: the paper's figures 13-15), as a short digest."""
        module = PROFILE_PROMPTS.get(self.name)
        texts = {
            name: value
            for name, value in (vars(module).items() if module else ())
            if name.isupper() and isinstance(value, str)
        }
        # A build setting enters only when on: AppWorld's digest stays as it was.
        profile = self.model_dump(
            exclude=set() if self.function_reasoning else {"function_reasoning"}
        )
        profile["retrieval"] = {
            k: v for k, v in self.retrieval.items() if k not in IN_READ_SETTINGS_ONLY
        }
        payload = json.dumps({"profile": profile, "prompts": texts}, sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]


class ProfiledRetrievalConfig(RetrievalConfig):
    """Read settings on a benchmark with a profile of its own (AppWorld): the profile
    is part of what a student reads, so of its stage's identity."""

    profile: str

    def read_settings(self) -> dict[str, Any]:
        out = super().read_settings()
        profiled = profile_for(self.profile).retrieval.get("query")
        if ("wf" in self.types or "st" in self.types) and profiled and self.query != profiled:
            out["query"] = self.query or "user_turn"  # off the profile's: a named choice
        return {**out, "profile": f"{self.profile}:{profile_for(self.profile).version()}"}


BFCL_NAME = "bfcl"
BFCL = BenchmarkProfile(name=BFCL_NAME)
APPWORLD = BenchmarkProfile(
    name="appworld", actions="code", retrieval=composed_profile_settings("appworld")
)
# ToolSandbox's Function records carry the builder model's reasoning per call, which
# its ranking (`fn_ranking=call_ngrams`) compares the failing step's calls with.
TOOLSANDBOX = BenchmarkProfile(
    name="toolsandbox",
    retrieval=composed_profile_settings("toolsandbox"),
    function_reasoning=True,
)
PROFILES: dict[str, BenchmarkProfile] = {"appworld": APPWORLD, "toolsandbox": TOOLSANDBOX}
# The prompt texts of each profile (module constants), part of its identity.
PROFILE_PROMPTS = {"appworld": appworld_prompts, "toolsandbox": toolsandbox_prompts}


def profile_for(benchmark: str | None) -> BenchmarkProfile:
    """The profile of a benchmark name (BFCL's for any benchmark without its own)."""
    return PROFILES.get(benchmark or "", BFCL)


def profile_of(benchmarks: Iterable[str | None]) -> BenchmarkProfile:
    """The one profile of the benchmarks a build reads (its episodes' and tasks'):
    a bank mixing benchmarks of different profiles is refused, not guessed at."""
    found = {profile_for(b).name: profile_for(b) for b in benchmarks}
    if len(found) > 1:
        raise ValueError(
            f"an AMD bank is built from one kind of benchmark; these need different "
            f"profiles: {sorted(found)}"
        )
    return next(iter(found.values()), BFCL)
