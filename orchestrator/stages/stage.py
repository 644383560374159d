"""Stage identities: what a stage computes, hashed, so sweeps share and resume work.

A sweep point expands into stages:

    collect  (the teacher plays the memory and evaluated tasks)
      -> build   (a memory bank from the collect stage's successful trajectories)
        -> render  (text renderings layered on a bank, for text representations)
          -> evaluate (the student with a memory method plays the evaluated tasks)

`zero_shot` is an evaluate stage with no upstream; a memory method whose bank comes
from the student's own runs (it asks the planner for them) builds from it. Each kind is
one node class (carrying its inputs) that owns its key, its runner, its `--plan` status,
its progress line and its cost rows; kinds are registered plugins
(`orchestrator/stages/kinds.py`: built in, or the `distillery.stage_kinds` entry points).

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
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

from distillery.workers.llm.config import ModelConfig

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pydantic import BaseModel

    from distillery.orchestrator.core.config import DistilleryConfig
    from distillery.orchestrator.execution.sweep import Sweep
    from distillery.orchestrator.state.ledger import Ledger
    from distillery.workers.memory.retrieval import Isolation

# A stage kind names one node type of the graph (registered in `stage_kinds`); the kind
# is part of every key, so a kind is never renamed.
StageKind = str

# Fields of a model config that decide how it is reached or launched, not what it
# answers: excluded from stage identities.
RUNTIME_MODEL_FIELDS = frozenset(
    {
        "name",
        "params_b",
        "known_weaknesses",  # read by other models' prompts (a stage using it holds it)
        "paper_requests",  # read by the paper configs, whose values it sets count
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
# evaluation its `MemoryRead`). Its type owns what the orchestrator does with a kind:
# its key (`code`: every fingerprint of its code), `run`, `status` (what `--plan` says),
# `progress_line` and `cost_rows`. A kind is registered in `stage_kinds` (built in, or an
# entry point of `distillery.stage_kinds`); `plan` makes a node of it when a method asks
# the planner for one (`BankPlanner.stage`).


@dataclass(frozen=True)
class CostRow:
    """What one model did for a stage, in one role (the stages table has a row each)."""

    role: str  # teacher | student | builder | curator | ... (the stage's own word)
    model: str  # the model config's name ("oracle", "none": no LLM)
    tokens_in: int = 0
    tokens_out: int = 0
    n_llm_calls: int = 0
    embed_tokens: int = 0


@dataclass(frozen=True)
class StageFigure:
    """One figure a stage reports of itself (beyond its cost rows): a row of its table in
    `distillery report` and a metric of its own MLflow run."""

    metric: str  # the MLflow metric name, e.g. "brew.failed_tasks"
    label: str  # the report's row label, e.g. "Failed tasks (F)"
    value: float
    unit: str = "count"  # count | rate (a fraction, shown as %) | check (1: holds, 0: not)


@dataclass(frozen=True)
class StageReport:
    """What a stage reports of itself: a table in `distillery report` (its `title`, one
    column per stage that reports under it) and a child run of its own under the sweep's
    parent in MLflow (its figures as metrics, `documents` as JSON artifacts, and each of
    `episode_files` as a trace per play)."""

    title: str
    figures: tuple[StageFigure, ...]
    documents: Mapping[str, Any] = field(default_factory=dict)
    episode_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class StageStatus:
    """What `--plan` says of a stage: done or not, and in words."""

    cached: bool
    state: str  # e.g. "cached (12 episodes)", "run 3 of 12 episodes (9 cached)", "build"
    needed: int = 0  # episodes or tasks this sweep needs of it
    done: int = 0  # of those, finished and intact in the ledger


@dataclass(frozen=True, kw_only=True)
class Stage:
    """One node of the stage graph (the base of one class per kind)."""

    kind: ClassVar[StageKind]  # set by each concrete node type
    # Bump when a stage's code changes what it produces in a way its config does not
    # show (a scoring fix, a different trajectory format). Prompts are hashed apart.
    code_version: ClassVar[str]
    plays_episodes: ClassVar[bool] = False  # kept per task in the ledger (`needs`)
    writes_bank: ClassVar[bool] = False  # records a `BankOutput` in the ledger
    role: ClassVar[str] = ""  # whose model `model` is: teacher | student | builder

    identity: dict[str, Any]
    upstream: tuple[StageKey, ...]
    label: str  # for people: "collect teacher=oracle bfcl_multi_turn_base"
    model: ModelConfig | None  # the model it plays or builds with (None: no LLM)
    # Further models it calls, by role (a brew stage's teacher and curator): each is
    # started and stopped by the server pool like `model`, and has its own cost row.
    other_models: Mapping[str, ModelConfig] = field(default_factory=dict)

    # -- identity ------------------------------------------------------------------

    def code(self) -> dict[str, str]:
        """What the stage's code contributes to its key: every fingerprint of it (the
        prompts of every model it calls and of the benchmark it plays)."""
        raise NotImplementedError(f"{type(self).__name__} declares no code fingerprint")

    @cached_property
    def key(self) -> StageKey:
        payload = {
            "kind": self.kind,
            "identity": self.identity,
            "upstream": [str(u.kind) + ":" + u.digest for u in self.upstream],
            "code": self.code(),
        }
        return StageKey(self.kind, digest_of(payload))

    @property
    def models(self) -> dict[str, ModelConfig]:
        """Every model the stage calls, by role (servers start for each)."""
        own = {self.role or "model": self.model} if self.model is not None else {}
        return {**own, **self.other_models}

    # -- what the orchestrator does with it ----------------------------------------

    def run(self, sweep: Sweep, prefix: str) -> bool:
        """Run the stage (`prefix`: "[3/7]" for progress lines); False when the ledger
        had everything (nothing ran)."""
        raise NotImplementedError(f"{type(self).__name__} has no runner")

    def status(self, ledger: Ledger, needs: set[str]) -> StageStatus:
        """What `--plan` says of it (`needs`: the tasks the sweep needs it to play)."""
        raise NotImplementedError(f"{type(self).__name__} has no plan status")

    def progress_line(self, names: str) -> str:
        """The progress bar's title of its episodes (`names`: what tells it from the
        sweep's other stages, e.g. `k_st=3`)."""
        model = self.model.name if self.model is not None else "oracle"
        return f"{self.kind} {self.role}:{model} {names}".strip()

    def cost_rows(self, ledger: Ledger, needs: set[str]) -> list[CostRow]:
        """One row per model and role of what the stage spent (the stages table)."""
        raise NotImplementedError(f"{type(self).__name__} reports no cost rows")

    def episode_demand(self, ledger: Ledger, needs: set[str]) -> int:
        """Episodes it could have in flight at once were it started now (0: it plays
        none), so the scheduler gives it episode workers and request slots it can use."""
        return 0

    def test_time(self) -> tuple[int, bool]:
        """What scoring one task on this stage spends at test time: the plays it may
        get (1: a single rollout) and whether the environment's verdict is fed back
        between them (Reflexion's re-plays); the report's test-time column."""
        return 1, False

    def writer(self) -> str:
        """Who wrote the bank it records (bank stages), for tags: a model config name,
        or `deterministic`."""
        return self.model.name if self.model is not None else "deterministic"

    def report(self, ledger: Ledger, needs: set[str]) -> StageReport | None:
        """Its own statistics, table and MLflow run (None: a stage reports only its cost
        rows, as the built-in kinds do). Read once its run is over."""
        return None

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> Stage:
        """A node of this kind for a method that asks the planner for one
        (`BankPlanner.stage(kind, **inputs)`); `planner` is a `plan.StagePlanner`."""
        raise NotImplementedError(f"stage kind {cls.kind!r} is not planned on request")


@dataclass(frozen=True, kw_only=True)
class EpisodeStage(Stage):
    """A stage that plays episodes: its code is the benchmark's prompts and the hooks'."""

    plays_episodes: ClassVar[bool] = True

    # The benchmark options its episodes are played with when not the point's own (the
    # memory split's under protocol=split); their identity is in `identity` already.
    options: Mapping[str, Any] | None = None

    def code(self) -> dict[str, str]:
        benchmark = self.identity.get("benchmark")
        if benchmark is None:
            raise ValueError(f"a {self.kind} stage's identity names its benchmark")
        return {"version": self.code_version, "prompts": agent_prompt_fingerprint(benchmark)}

    def status(self, ledger: Ledger, needs: set[str]) -> StageStatus:
        done = len(needs & set(ledger.episodes(self.key)))
        to_run = len(needs) - done
        state = (
            f"cached ({len(needs)} episodes)"
            if to_run == 0
            else f"run {to_run} of {len(needs)} episodes ({done} cached)"
        )
        return StageStatus(to_run == 0, state, len(needs), done)

    def episode_demand(self, ledger: Ledger, needs: set[str]) -> int:
        """Its missing episodes (all may be in flight at once)."""
        return len(needs - set(ledger.episodes(self.key)))

    def cost_rows(self, ledger: Ledger, needs: set[str]) -> list[CostRow]:
        if self.model is None:  # the oracle calls no LLM
            return [CostRow(self.role, "oracle")]
        tokens_in = tokens_out = calls = 0
        for task_id, s in ledger.all_records(self.key).items():
            # The episodes this sweep needs: a record of another task (an earlier
            # sweep's larger split, or a file planted in the folder) is not its cost.
            if task_id not in needs:
                log.warning(
                    "ledger record %s is for task %r, which this sweep does not need: "
                    "not counted in the cost of %s",
                    ledger.record_path(self.key, task_id),
                    task_id,
                    self.key,
                )
                continue
            tokens_in += s.tokens_in
            tokens_out += s.tokens_out
            calls += s.n_llm_calls
        return [CostRow(self.role, self.model.name, tokens_in, tokens_out, calls)]


@dataclass(frozen=True, kw_only=True)
class BankStage(Stage):
    """A stage that writes a bank: its code is its memory method's builders."""

    writes_bank: ClassVar[bool] = True
    role: ClassVar[str] = "builder"

    def builders(self) -> str:
        """Its memory method's `build_fingerprint` (part of its key)."""
        raise NotImplementedError(f"{type(self).__name__} names no builders")

    def code(self) -> dict[str, str]:
        return {"version": self.code_version, "builders": self.builders()}

    def status(self, ledger: Ledger, needs: set[str]) -> StageStatus:
        output = ledger.output(self.key)
        if output is None:
            return StageStatus(False, "build")
        return StageStatus(True, f"cached (bank {output.bank_id[:16]})")

    def cost_rows(self, ledger: Ledger, needs: set[str]) -> list[CostRow]:
        output = ledger.output(self.key)
        stats = output.stats if output else {}
        counts = output.counts if output else {}
        return [
            CostRow(
                self.role,
                self.model.name if self.model is not None else "none",
                int(sum(v for k, v in stats.items() if k.endswith(".tokens_in"))),
                int(sum(v for k, v in stats.items() if k.endswith(".tokens_out"))),
                int(sum(v for k, v in stats.items() if k.endswith(".requests"))),
                int(counts.get("embedded_chars", 0) // 4),
            )
        ]


@dataclass(frozen=True)
class BankSource:
    """What a build stage reads: the successful episodes of `source` on `task_ids`."""

    source: StageKey
    task_ids: tuple[str, ...]
    split: str  # the memory split label stored with every entry
    cfg: DistilleryConfig  # builder, builder model and embedder come from here
    kind: str  # the memory method that builds it
    origin: str = "teacher"  # whose episodes: the source stage's role (teacher | student)

    @property
    def builder_model(self) -> ModelConfig | None:
        return self.cfg.builder_model(self.origin == "student")


@dataclass(frozen=True)
class MemoryRead:
    """What a memory method's evaluate stage reads: which method, which bank (None: a
    method whose memory needs none), how."""

    kind: str  # the memory method (registry kind)
    bank_stage: StageKey | None
    isolation: Isolation
    settings: BaseModel  # the method's validated read settings (its `settings_model`)


@dataclass(frozen=True, kw_only=True)
class CollectStage(EpisodeStage):
    """The teacher plays the memory and evaluated tasks."""

    kind: ClassVar[StageKind] = "collect"
    code_version: ClassVar[str] = "2"  # 2: BFCL's decoding, step limit and result format
    role: ClassVar[str] = "teacher"

    def run(self, sweep: Sweep, prefix: str) -> bool:
        return sweep.play(self, prefix)


@dataclass(frozen=True, kw_only=True)
class EvaluateStage(EpisodeStage):
    """The student plays the evaluated tasks, reading `memory` (None: zero-shot)."""

    kind: ClassVar[StageKind] = "evaluate"
    code_version: ClassVar[str] = "2"  # 2: BFCL's decoding, step limit and result format
    role: ClassVar[str] = "student"

    memory: MemoryRead | None = None

    def code(self) -> dict[str, str]:
        out = super().code()
        framing = self._framing_texts()
        if framing:  # only where a port frames the benchmark's prompt: other keys stay
            out["framing"] = digest_of(list(framing))[:16]
        return out

    def _framing_texts(self) -> tuple[str, ...]:
        """What the memory method's framing of the benchmark's prompt makes its
        episodes read (e.g. an AMD authors' port on AppWorld); () for none."""
        if self.memory is None:
            return ()
        from distillery.workers.envs.registry import framing_texts
        from distillery.workers.memory.registry import memory_method

        framing = memory_method(self.memory.kind).prompt_framing(self.memory.settings)
        return framing_texts(self.identity["benchmark"], framing) if framing else ()

    def run(self, sweep: Sweep, prefix: str) -> bool:
        return sweep.play(self, prefix, self.memory)


@dataclass(frozen=True, kw_only=True)
class BuildStage(BankStage):
    """A bank built by `source.kind` from the successful episodes `source` names."""

    kind: ClassVar[StageKind] = "build"
    code_version: ClassVar[str] = "1"

    source: BankSource

    def builders(self) -> str:
        from distillery.workers.memory.registry import memory_method

        return memory_method(self.source.kind).build_fingerprint()

    def run(self, sweep: Sweep, prefix: str) -> bool:
        return sweep.memory.ensure(self, prefix, lambda: sweep.memory.build(self))


@dataclass(frozen=True, kw_only=True)
class RenderStage(BankStage):
    """A bank derived from the `base` build's bank (AMD: text renderings)."""

    kind: ClassVar[StageKind] = "render"
    code_version: ClassVar[str] = "1"

    base: StageKey  # the build stage whose bank is rendered
    source: BankSource  # the base build's source: its method, builder and config

    def builders(self) -> str:
        from distillery.workers.memory.registry import memory_method

        return memory_method(self.source.kind).build_fingerprint()

    def run(self, sweep: Sweep, prefix: str) -> bool:
        return sweep.memory.ensure(self, prefix, lambda: sweep.memory.render(self))
