"""Stage identities: what a stage computes, hashed, so sweeps share and resume work.

A sweep point expands into stages:

    collect  (the teacher plays the memory and evaluated tasks)
      -> build   (a memory bank from the collect stage's successful trajectories)
        -> render  (text renderings layered on a bank, for text representations)
          -> evaluate (the student with a memory method plays the evaluated tasks)

`zero_shot` is an evaluate stage with no upstream; a memory method whose bank comes
from the student's own runs (its `bank_source`) builds from it. Each kind is one node
class below (carrying its inputs) and one runner in `sweep.STAGE_RUNNERS`.

A stage's key is the sha256 of its own config subset, its upstream stages' keys and
its code version. Runtime knobs (concurrency, replicas, timeouts, endpoints, cluster,
output paths) are left out, so changing them reuses every finished stage; anything
that changes what a model sees or answers (model, sampling, prompts, retrieval
settings) is in. Task lists are NOT part of an episode stage's identity: its episodes
are kept per task, so a point on 50 tasks reuses the 20 a smaller point played.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from distillery.workers.llm.config import ModelConfig

if TYPE_CHECKING:
    from pydantic import BaseModel

    from distillery.orchestrator.config import DistilleryConfig
    from distillery.workers.memory.method import BankSourceKind
    from distillery.workers.memory.retrieval import Isolation

# A stage kind names one node type of the graph (`STAGE_TYPES`) and one runner of the
# sweep (`sweep.STAGE_RUNNERS`); the kind is part of every key, so a kind is never renamed.
StageKind = str

# Fields of a model config that decide how it is reached or launched, not what it
# answers: excluded from stage identities.
RUNTIME_MODEL_FIELDS = frozenset(
    {
        "name",
        "params_b",
        "base_url",
        "api_key_env",
        "request_timeout_s",
        "max_retries",
        "retry_backoff_s",
        "max_response_bytes",  # a guard against broken servers, far above any reply
        "max_request_bytes",  # a guard against runaway histories, above any context
        "replicas",
        "max_concurrency_per_server",
        "startup_timeout_s",
        "n_threads",
        "gpus_per_server",
        "tensor_parallel_size",
        "enable_prefix_caching",
        "gpu_memory_utilization",
        "extra_args",
        "max_num_seqs",
        "command",
        "command_cwd",
        "server_num_cpus",
        "server_resources",
        "server_host",
        "health_interval_s",
        "health_timeout_s",
        "health_failures",
        "max_restarts",
        "restart_backoff_s",
        "routing",
        "reroute_margin",
    }
)


# Fields added to model configs after stages were first keyed: left out of a model's
# identity while unset, so adding an option re-runs no finished stage; set, it counts.
UNSET_OMITTED_MODEL_FIELDS = ("chat_template_file",)


@dataclass(frozen=True, order=True)
class StageKey:
    kind: StageKind
    digest: str  # sha256 hex of the stage's identity

    @property
    def short(self) -> str:
        return self.digest[:16]

    def __str__(self) -> str:
        return f"{self.kind}:{self.short}"


def digest_of(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def model_identity(model: ModelConfig, sweep_seed: int = 0) -> dict[str, Any]:
    """What decides a model's answers. The oracle replays ground truth: only its kind.

    The sampling seed is the model's own plus the sweep point's `seed`, so a seed sweep
    samples differently while a fixed seed stays reproducible.
    """
    if model.backend == "oracle":
        return {"backend": "oracle"}
    data = model.model_dump(mode="json", exclude=set(RUNTIME_MODEL_FIELDS))
    for name in UNSET_OMITTED_MODEL_FIELDS:
        if data.get(name) is None:
            data.pop(name, None)
    if not model.cap_every_request:  # added later: off keeps the keys it had
        del data["cap_every_request"]
    data["seed"] = effective_seed(model, sweep_seed)
    return data


def effective_seed(model: ModelConfig, sweep_seed: int) -> int | None:
    return None if model.seed is None else model.seed + sweep_seed


def agent_prompt_fingerprint(benchmark: str) -> str:
    """The texts an agent is shown besides the task: a change re-runs agent stages.

    The benchmark's own fingerprint (its prompts and scoring facts, in its order), then
    the project's memory methods' hook texts, hashed as one flat list: the keys stay
    those computed when this function listed the first benchmark's constants itself.
    """
    from distillery.workers.envs.registry import benchmark_class
    from distillery.workers.memory.registry import builtin_hook_texts

    texts = [*benchmark_class(benchmark).fingerprint(), *builtin_hook_texts()]
    return digest_of(texts)[:16]


# -- the graph's nodes: one class per stage kind ------------------------------------
#
# A node carries everything its runner reads: its identity, its upstream keys and its
# inputs (a build stage its `BankSource`, a render stage its base build, a memory
# evaluation its `MemoryRead`). A subclass that sets `kind` registers itself in
# `STAGE_TYPES`, which is how keys and code fingerprints find a kind's facts.

STAGE_TYPES: dict[StageKind, type[Stage]] = {}


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One node of the stage graph (the base of one class per kind)."""

    kind: ClassVar[StageKind]  # set by each concrete node type
    # Bump when a stage's code changes what it produces in a way its config does not
    # show (a scoring fix, a different trajectory format). Prompts are hashed apart.
    code_version: ClassVar[str]
    plays_episodes: ClassVar[bool] = False  # kept per task in the ledger (`needs`)
    writes_bank: ClassVar[bool] = False  # records a `BankOutput` in the ledger
    role: ClassVar[str] = ""  # episode stages: whose model plays (teacher | student)

    key: StageKey
    identity: dict[str, Any]
    upstream: tuple[StageKey, ...]
    label: str  # for people: "collect teacher=oracle bfcl_multi_turn_base"
    model: ModelConfig | None  # whose LLM this stage calls (None: no LLM)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is None:  # an abstract family (episode stages, bank stages)
            return
        if kind in STAGE_TYPES and STAGE_TYPES[kind].__qualname__ != cls.__qualname__:
            raise ValueError(f"stage kind {kind!r} is already {STAGE_TYPES[kind].__name__}")
        STAGE_TYPES[kind] = cls

    @classmethod
    def code_fingerprint(
        cls, benchmark: str | None = None, builders: str | None = None
    ) -> dict[str, str]:
        """What the stage's code contributes to its key."""
        raise NotImplementedError(f"{cls.__name__} declares no code fingerprint")

    @classmethod
    def key_for(
        cls,
        identity: dict[str, Any],
        upstream: tuple[StageKey, ...] = (),
        builders: str | None = None,
    ) -> StageKey:
        payload = {
            "kind": cls.kind,
            "identity": identity,
            "upstream": [str(u.kind) + ":" + u.digest for u in upstream],
            "code": cls.code_fingerprint(identity.get("benchmark"), builders),
        }
        return StageKey(cls.kind, digest_of(payload))


@dataclass(frozen=True, kw_only=True)
class EpisodeStage(Stage):
    """A stage that plays episodes: its code is the benchmark's prompts and the hooks'."""

    plays_episodes: ClassVar[bool] = True

    @classmethod
    def code_fingerprint(
        cls, benchmark: str | None = None, builders: str | None = None
    ) -> dict[str, str]:
        if benchmark is None:
            raise ValueError(f"a {cls.kind} stage's identity names its benchmark")
        return {"version": cls.code_version, "prompts": agent_prompt_fingerprint(benchmark)}


@dataclass(frozen=True, kw_only=True)
class BankStage(Stage):
    """A stage that writes a bank: its code is its memory method's builders."""

    writes_bank: ClassVar[bool] = True

    @classmethod
    def code_fingerprint(
        cls, benchmark: str | None = None, builders: str | None = None
    ) -> dict[str, str]:
        if builders is None:
            raise ValueError(f"a {cls.kind} stage's key needs its memory method's builders")
        return {"version": cls.code_version, "builders": builders}


@dataclass(frozen=True)
class BankSource:
    """What a build stage reads: the successful episodes of `source` on `task_ids`."""

    source: StageKey
    task_ids: tuple[str, ...]
    split: str  # the memory split label stored with every entry
    cfg: DistilleryConfig  # builder, builder model and embedder come from here
    kind: str  # the memory method that builds it
    origin: BankSourceKind = "teacher"  # whose episodes (who writes the bank differs)

    @property
    def builder_model(self) -> ModelConfig | None:
        return self.cfg.builder_model(self.origin == "student")


@dataclass(frozen=True)
class MemoryRead:
    """What a memory method's evaluate stage reads: which method, which bank, how."""

    kind: str  # the memory method (registry kind)
    bank_stage: StageKey
    isolation: Isolation
    settings: BaseModel  # the method's validated read settings (its `settings_model`)


@dataclass(frozen=True, kw_only=True)
class CollectStage(EpisodeStage):
    """The teacher plays the memory and evaluated tasks."""

    kind: ClassVar[StageKind] = "collect"
    code_version: ClassVar[str] = "2"  # 2: BFCL's decoding, step limit and result format
    role: ClassVar[str] = "teacher"


@dataclass(frozen=True, kw_only=True)
class EvaluateStage(EpisodeStage):
    """The student plays the evaluated tasks, reading `memory` (None: zero-shot)."""

    kind: ClassVar[StageKind] = "evaluate"
    code_version: ClassVar[str] = "2"  # 2: BFCL's decoding, step limit and result format
    role: ClassVar[str] = "student"

    memory: MemoryRead | None = None


@dataclass(frozen=True, kw_only=True)
class BuildStage(BankStage):
    """A bank built by `source.kind` from the successful episodes `source` names."""

    kind: ClassVar[StageKind] = "build"
    code_version: ClassVar[str] = "1"

    source: BankSource


@dataclass(frozen=True, kw_only=True)
class RenderStage(BankStage):
    """A bank derived from the `base` build's bank (AMD: text renderings)."""

    kind: ClassVar[StageKind] = "render"
    code_version: ClassVar[str] = "1"

    base: StageKey  # the build stage whose bank is rendered
    source: BankSource  # the base build's source: its method, builder and config


def stage_type(kind: StageKind) -> type[Stage]:
    try:
        return STAGE_TYPES[kind]
    except KeyError:
        raise ValueError(f"unknown stage kind {kind!r}; known: {sorted(STAGE_TYPES)}") from None


def code_fingerprint(
    kind: StageKind, benchmark: str | None = None, builders: str | None = None
) -> dict[str, str]:
    """What a stage's code contributes to its key: episode stages name their benchmark,
    bank stages carry their memory method's `build_fingerprint` (`builders`)."""
    return stage_type(kind).code_fingerprint(benchmark, builders)


def stage_key(
    kind: StageKind,
    identity: dict[str, Any],
    upstream: tuple[StageKey, ...] = (),
    builders: str | None = None,
) -> StageKey:
    return stage_type(kind).key_for(identity, upstream, builders)
