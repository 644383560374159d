"""Stage identities: what a stage computes, hashed, so sweeps share and resume work.

A sweep point expands into stages:

    collect  (the teacher plays the memory and evaluated tasks)
      -> build   (a memory bank from the collect stage's successful trajectories)
        -> render  (text renderings layered on a bank, for text representations)
          -> evaluate (the student with a memory method plays the evaluated tasks)

`zero_shot` is an evaluate stage with no upstream; a memory method whose bank comes
from the student's own runs (its `bank_source`) builds from it.

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
from typing import Any, Literal

from distillery.workers.llm.config import ModelConfig

StageKind = Literal["collect", "build", "render", "evaluate"]
STAGE_KINDS: tuple[StageKind, ...] = ("collect", "build", "render", "evaluate")

# Bump when a stage's code changes what it produces in a way its config does not show
# (a scoring fix, a different trajectory format). Prompts are fingerprinted separately.
CODE_VERSIONS: dict[StageKind, str] = {
    "collect": "2",  # 2: BFCL's decoding, step limit and result format
    "build": "1",
    "render": "1",
    "evaluate": "2",  # 2: BFCL's decoding, step limit and result format
}

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


def code_fingerprint(
    kind: StageKind, benchmark: str | None = None, builders: str | None = None
) -> dict[str, str]:
    """What a stage's code contributes to its key: episode stages name their benchmark,
    bank stages carry their memory method's `build_fingerprint` (`builders`)."""
    if kind in ("build", "render"):
        if builders is None:
            raise ValueError(f"a {kind} stage's key needs its memory method's builders")
        return {"version": CODE_VERSIONS[kind], "builders": builders}
    if benchmark is None:
        raise ValueError(f"a {kind} stage's identity names its benchmark")
    return {"version": CODE_VERSIONS[kind], "prompts": agent_prompt_fingerprint(benchmark)}


def stage_key(
    kind: StageKind,
    identity: dict[str, Any],
    upstream: tuple[StageKey, ...] = (),
    builders: str | None = None,
) -> StageKey:
    payload = {
        "kind": kind,
        "identity": identity,
        "upstream": [str(u.kind) + ":" + u.digest for u in upstream],
        "code": code_fingerprint(kind, identity.get("benchmark"), builders),
    }
    return StageKey(kind, digest_of(payload))


@dataclass(frozen=True)
class Stage:
    """One node of the stage graph."""

    key: StageKey
    identity: dict[str, Any]
    upstream: tuple[StageKey, ...]
    label: str  # for people: "collect teacher=oracle bfcl_multi_turn_base"
    model: ModelConfig | None  # whose LLM this stage calls (None: no LLM)
    role: str = ""  # episode stages: teacher | student

    @property
    def plays_episodes(self) -> bool:
        return self.key.kind in ("collect", "evaluate")
