"""One typed, validated config object per run, built from the composed Hydra config.

Validation happens before Ray or any server starts: a bad value fails with one message
that names the key (e.g. ``student.base_url``).
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any, get_args

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    field_validator,
    model_validator,
)

from distillery.orchestrator.core.protocols import ProtocolConfig
from distillery.workers.envs.registry import (
    BenchmarkLoadError,
    benchmark_deviations,
    benchmark_options,
    context_trims,
    identity_options,
    known_benchmarks,
)
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.config import MemoryConfig
from distillery.workers.memory.port_context import context_choice
from distillery.workers.memory.registry import is_memory_method, known_methods, memory_method


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchmarkConfig(_Frozen):
    name: str
    limit: int | None = Field(default=None, gt=0, description="First N tasks in benchmark order.")
    task_ids: tuple[str, ...] | None = None
    # Ours (no harness samples): a seeded sample of N of the selected tasks, kept in the
    # benchmark's order, for a fixed evaluation subset (the AgentBrew paper's 2,000 of
    # MATH's test problems, its Figure 4). None: every selected task.
    sample: int | None = Field(default=None, gt=0)
    sample_seed: int = 0
    # A turn's step limit, counted as the benchmark counts it (its conventions' step_limit).
    max_steps_per_turn: int | None = Field(default=None, gt=0, description="None: official limit.")
    # The benchmark's own options, validated by its `options_model` (DistilleryConfig).
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        known = known_benchmarks()
        if name not in known:
            raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(known)}")
        return name

    def identity_options(self) -> dict[str, Any]:
        """The options that differ from the benchmark's defaults (episode identity)."""
        return identity_options(self.name, self.options)

    def deviations(self) -> tuple[str, ...]:
        """The options on that deviate from the benchmark's own pipeline (by name)."""
        return benchmark_deviations(self.name, self.options)


class AgentConfig(_Frozen):
    episode_timeout_s: float = Field(default=1800.0, gt=0)
    episode_retries: int = Field(
        default=2, ge=0, description="Retries of an infrastructure failure."
    )
    retry_backoff_s: float = Field(default=2.0, ge=0)


# Agent keys until a benchmark's deviations from its own pipeline became its options
# (`benchmark.options`, e.g. BFCL's): conf/agent keeps them unset so that an old command
# that sets one is told where it went.
MOVED_AGENT_KEYS = (
    "native_system_prompt",
    "positional_args",
    "report_invalid_calls",
    "json_schema_tools",
)


class ClusterConfig(_Frozen):
    name: str = "local"
    # True (cluster=ray): join an existing Ray cluster at `ray_address`, else at
    # $RAY_ADDRESS; with neither the run refuses (it never guesses which Ray to join).
    # False: start a private local Ray on loopback, unless `ray_address` names one.
    join: bool = False
    # The Ray cluster to join (ray://head:10001, head:6379, http://head:8265).
    ray_address: str | None = None
    num_cpus: int | None = Field(default=None, gt=0, description="Local Ray only.")
    num_workers: int = Field(
        default=2,
        ge=1,
        description="Episode worker actors of the sweep, shared by the stages running at once.",
    )
    episodes_per_worker: int = Field(
        default=16, ge=1, description="Concurrent episodes per worker."
    )
    # Stages run at once at most (0: as many as the episode workers, the models' request
    # slots and the stage graph allow; 1: one stage at a time, as before). Ours.
    max_stages_in_flight: int = Field(default=0, ge=0)
    worker_num_cpus: float = Field(default=0.5, gt=0)
    # A cluster whose GPU worker groups each advertise a Ray resource per pod named
    # `<gpu_node_resource>_<N>` (N: the pod's GPUs; k8s/overlays/gpu): a vLLM replica
    # of gpus_per_server N reserves one of `<gpu_node_resource>_N`, so it is placed on
    # (and the autoscaler starts) a pod of the group with exactly N GPUs on one node.
    # None: any node with N free GPUs.
    gpu_node_resource: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # A custom Ray resource only the nodes meant for episode workers advertise (k8s/: the
    # cpu group's distillery_cpu, one per CPU): each worker reserves worker_num_cpus of it
    # besides its CPUs, so no worker lands on (or waits for) a GPU pod or the head. None:
    # any node with free CPUs. Workers are spread over the nodes with room (SPREAD).
    worker_resource: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    # Benchmarks whose episodes run model-written code or worlds in the namespace sandbox
    # (workers/sandbox): their workers reserve `sandbox_resource` instead, advertised only
    # by the grading group (k8s/: pods whose seccomp/AppArmor profiles allow the jail's
    # namespaces; docs/cluster.md "Sandboxes on the nodes").
    sandbox_resource: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    sandboxed_benchmarks: tuple[str, ...] = ()
    # Deadline for episode workers and server replicas to be placed. Ours: on Kubernetes
    # it covers the autoscaler starting a pod and a cold pull of the image (the GPU image
    # is ~10 GB); after it the stage fails with what it asked and what each node has free.
    placement_timeout_s: float = Field(default=900.0, gt=0)

    def replica_resources(self, gpus: int) -> dict[str, float]:
        """The custom Ray resource a replica of `gpus` GPUs reserves on this cluster."""
        if self.gpu_node_resource is None or gpus < 1:
            return {}
        return {f"{self.gpu_node_resource}_{gpus}": 1.0}

    def worker_resources(self, benchmark: str) -> dict[str, float]:
        """The custom resource an episode worker of `benchmark` reserves on this cluster."""
        if self.sandbox_resource is not None and benchmark in self.sandboxed_benchmarks:
            return {self.sandbox_resource: self.worker_num_cpus}
        if self.worker_resource is not None:
            return {self.worker_resource: self.worker_num_cpus}
        return {}

    def service_resources(self, num_cpus: float) -> dict[str, float]:
        """The custom resource a sweep's own actor or task that is not an episode worker
        (the memory service, a bank build) reserves besides its `num_cpus` CPUs: the
        worker group's, so it runs on the cpu group (k8s/: the pods with the embedder's
        CPUs, the Qdrant key and no GPU), never on a GPU pod, whose CPU belongs to its
        vLLM replica, nor on the grading pods."""
        if self.worker_resource is None:
            return {}
        return {self.worker_resource: num_cpus}

    @property
    def joins(self) -> bool:
        """Whether the run joins an existing Ray cluster (rather than starting one)."""
        return self.join or self.ray_address is not None

    def address(self) -> str | None:
        """The address a run joins: `ray_address`, else $RAY_ADDRESS (read when the run
        starts: a job submitted to a cluster gets the cluster's own); None when the run
        starts a private Ray, or when a joining run was given no address (refused
        before anything starts: `preflight.check_cluster`)."""
        if not self.joins:
            return None
        return self.ray_address or os.environ.get("RAY_ADDRESS") or None


class TrackingConfig(_Frozen):
    uri: str | None = None  # None: sqlite file mlflow.db in the working directory
    experiment: str = "distillery"
    log_trajectories: bool = True
    # Episodes per evaluation child run logged as MLflow traces with the benchmark's
    # verdict as feedback (the run's Traces tab and the Evaluations view, which compares
    # two runs task by task). None: every evaluated task; N: a deterministic sample
    # mixing successes and failures; 0: no traces.
    trace_sample: int | None = Field(default=None, ge=0)
    # A running evaluation point's child run gets its running metrics (`progress.*`:
    # episodes done, success so far, infrastructure errors, tokens) at most this often.
    # Ours: one MLflow write per point per interval stays cheap for a tracking server
    # while the UI is never more than this far behind.
    progress_interval_s: float = Field(default=15.0, gt=0)


class ModelPrice(_Frozen):
    input_per_mtok: float = Field(default=0.0, ge=0)
    output_per_mtok: float = Field(default=0.0, ge=0)


class CostConfig(_Frozen):
    """Prices for the report's cost tables (USD). Models are keyed by config name;
    launched models usually cost GPU time instead (gpu_hour)."""

    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    embedding_per_mtok: float = Field(default=0.0, ge=0)
    gpu_hour: float = Field(default=0.0, ge=0)
    # Tokens (prompt + completion) one server replica of a launched model processes per
    # second, by model name: `--plan` turns its estimated tokens into GPU-hours. Yours to
    # measure (e.g. bench/serving.py): it depends on the GPU, the model and the load.
    throughput_tokens_per_s: dict[str, PositiveFloat] = Field(default_factory=dict)
    # Seconds one call of a model takes (its API's or its server's latency at the load it
    # will see), by model name: `--plan`'s wall-clock counts a stage that plays a few
    # tasks at a time (an ordered stage's wave) as at least its calls in sequence.
    latency_s: dict[str, PositiveFloat] = Field(default_factory=dict)
    # Seconds the tracking store takes to write one episode's trace (its spans), one
    # after another: `--plan`'s wall-clock counts each point's traces written from the
    # end of its stage (`tracking.trace_sample` of them). Default: 0.075 s, measured for
    # a BFCL episode of ~21 spans, in points of 200, written by the sweep's trace writer
    # to MLflow's SQLite store on a 2-core machine (`bench/trace_write.py`,
    # docs/performance.md); measure yours (a tracking server's database differs).
    trace_write_s: float = Field(default=0.075, ge=0)

    def prices_dict(self) -> dict[str, Any]:
        return {
            "models": {k: v.model_dump() for k, v in self.prices.items()},
            "embedding_per_mtok": self.embedding_per_mtok,
            "gpu_hour": self.gpu_hour,
        }


class ExperimentConfig(_Frozen):
    name: str
    description: str = ""


# Kinds the orchestrator runs itself; every other kind is a registered memory method
# (`distillery.workers.memory.registry`, e.g. amd and student_memory).
BUILTIN_KINDS = ("zero_shot", "teacher")


class MethodConfig(_Frozen):
    """One evaluated method = one MLflow child run.

    zero_shot: the student alone. teacher: the teacher's own score on the evaluated
    split. Any other kind is a memory method: the student reading a bank the method
    builds (its `retrieval` overrides and `types` are the method's to validate).
    """

    kind: str
    # The memory collections read (None: the method's default, e.g. all of AMD's).
    types: tuple[str, ...] | None = None
    retrieval: dict[str, Any] = Field(default_factory=dict)  # overrides of memory.retrieval

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, kind: str) -> str:
        if kind not in BUILTIN_KINDS and not is_memory_method(kind):
            known = ", ".join([*BUILTIN_KINDS, *known_methods()])
            raise ValueError(f"unknown method kind {kind!r}; known: {known}")
        return kind

    @property
    def uses_memory(self) -> bool:
        return self.kind not in BUILTIN_KINDS


class ReportConfig(_Frozen):
    """What `distillery report` reads from the sweep (recorded in sweep.json)."""

    # Methods (catalog names or kinds) every student method is paired with in McNemar
    # tests and table 1; the project's list is conf/config.yaml's.
    references: tuple[str, ...] = ("zero_shot",)
    # Also lay table 1 out in groups by what acts at test time, with the teacher and
    # test-time columns (the AgentBrew paper's Table 1; orchestrator/report/groups.py).
    groups: bool = False


class DistilleryConfig(_Frozen):
    experiment: ExperimentConfig
    benchmark: BenchmarkConfig
    teacher: ModelConfig
    student: ModelConfig
    methods: tuple[str, ...]  # names in method_catalog, each one MLflow child run
    method_catalog: dict[str, MethodConfig]
    protocol: ProtocolConfig = ProtocolConfig()
    memory: MemoryConfig = MemoryConfig()
    builder_models: dict[str, ModelConfig] = Field(default_factory=dict)
    agent: AgentConfig = AgentConfig()
    cluster: ClusterConfig = ClusterConfig()
    tracking: TrackingConfig = TrackingConfig()
    cost: CostConfig = CostConfig()
    report: ReportConfig = ReportConfig()
    output_dir: str = "distillery_runs"  # a local folder or a pyarrow URI (s3://, gs://)
    run_name: str | None = None  # the sweep's name; default: experiment + content hash
    seed: int = 0  # added to the student's sampling seed; a report axis (mean ± std)
    # A sweep list: override key -> values; the grid of them is expanded into points
    # (with any -m grid on the command line), e.g. {student: [qwen3_4b, qwen3_8b]}.
    sweep: dict[str, list[Any]] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _moved_agent_keys(cls, data: Any) -> Any:
        agent = data.get("agent") if isinstance(data, dict) else None
        if not isinstance(agent, dict) or not any(k in agent for k in MOVED_AGENT_KEYS):
            return data
        for key in MOVED_AGENT_KEYS:
            if agent.get(key) is not None:
                raise ValueError(
                    f"agent.{key}: moved to benchmark.options.{key} (a deviation from the "
                    f"benchmark's own pipeline is the benchmark's option): set "
                    f"+benchmark.options.{key}={str(agent[key]).lower()}"
                )
        kept = {k: v for k, v in agent.items() if k not in MOVED_AGENT_KEYS}
        return {**data, "agent": kept}

    @model_validator(mode="after")
    def _methods_resolve(self) -> DistilleryConfig:
        if not self.methods:
            raise ValueError("methods: list at least one method, e.g. [teacher, zero_shot]")
        for name in self.methods:
            if name not in self.method_catalog:
                known = ", ".join(sorted(self.method_catalog))
                raise ValueError(f"methods: unknown method {name!r}; known: {known}")
        if len(set(self.methods)) != len(self.methods):
            raise ValueError("methods: a method is listed twice")
        for name in self.methods:
            if self.method_catalog[name].uses_memory:
                self._context_choice_valid(name, self.retrieval_for(name))
        self._shared_retrieval_valid()
        self._benchmark_options_valid()
        for key in ("model", "student_memory_model"):
            builder = getattr(self.memory.builder, key)
            if builder not in _BANK_WRITERS and builder not in self.builder_models:
                raise ValueError(
                    f"memory.builder.{key}: {builder!r} is neither teacher, student, none, "
                    "nor a key of builder_models"
                )
        return self

    def _context_choice_valid(self, name: str, settings: BaseModel) -> None:
        """A port's context trim (memory/port_context.py) is one the benchmark has: an
        unknown name, or any choice on a benchmark that does not trim, is refused now
        rather than in every episode."""
        choice = context_choice(settings)
        if choice is None:
            return
        where = f"method_catalog.{name}.retrieval"
        try:
            known = context_trims(self.benchmark.name)
        except (ImportError, BenchmarkLoadError) as exc:
            raise ValueError(f"{where}: cannot check its context trim: {exc}") from None
        if not known:
            raise ValueError(
                f"{where}: benchmark {self.benchmark.name!r} does not trim its conversation "
                f"to the context; leave context_trim and context_buffer unset"
            )
        if choice.trim is not None and choice.trim not in known:
            raise ValueError(
                f"{where}.context_trim: {choice.trim!r} is no context trim of "
                f"{self.benchmark.name!r} ({', '.join(known)})"
            )

    def _benchmark_options_valid(self) -> None:
        if not self.benchmark.options:  # the defaults: nothing to import or check
            return
        try:
            benchmark_options(self.benchmark.name, self.benchmark.options)
        except ValidationError as exc:
            inner = _describe(exc, "benchmark.options.").removeprefix("invalid config at ")
            raise ValueError(inner) from None
        except (ImportError, BenchmarkLoadError) as exc:  # BenchmarkUnavailable: what to install
            raise ValueError(f"benchmark.options: cannot check them: {exc}") from None

    def method(self, name: str) -> MethodConfig:
        return self.method_catalog[name]

    def retrieval_for(self, name: str) -> BaseModel:
        """The read settings of memory method `name`, validated by the method's own
        settings model: the shared `memory.retrieval` defaults (for a method that takes
        them), the entry's `retrieval` and `types`. An error names the key where the
        value was set: `method_catalog.<name>.retrieval.<key>` (or `.types`), else
        `memory.retrieval.<key>`."""
        method = self.method_catalog[name]
        memory = memory_method(method.kind)
        try:
            settings = memory.settings(dict(self.memory.retrieval), method.retrieval, method.types)
        except ValidationError as exc:
            raise ValueError(self._settings_error(exc, name)) from None
        # A method that reads differently by benchmark (AMD on AppWorld) resolves its
        # settings here, so stage identities, tags and reports hold what is read.
        return memory.for_benchmark(settings, self.benchmark.name)

    def _settings_error(self, exc: ValidationError, name: str) -> str:
        method = self.method_catalog[name]
        inner = _describe(exc).removeprefix("invalid config at ")
        key = inner.split(".", 1)[0].split(":", 1)[0]
        if key == "types" and method.types is not None:
            return f"method_catalog.{name}.{inner}"
        if key in self.memory.retrieval and key not in method.retrieval:
            return f"memory.retrieval.{inner}"
        return f"method_catalog.{name}.retrieval.{inner}"

    def _shared_retrieval_valid(self) -> None:
        """`memory.retrieval` is checked by every method of the catalog that reads it,
        selected or not: a typo there is an error even in a zero-shot run."""
        if not self.memory.retrieval:
            return
        for name, method in self.method_catalog.items():
            if not method.uses_memory:
                continue
            try:
                memory_method(method.kind).settings(
                    dict(self.memory.retrieval), method.retrieval, method.types
                )
            except ValidationError as exc:  # an entry's own errors: when it is selected
                message = self._settings_error(exc, name)
                if message.startswith("memory.retrieval."):
                    raise ValueError(message) from None

    def builder_model(self, from_student: bool = False) -> ModelConfig | None:
        """The model that writes a bank's entries (`from_student`: a bank of the
        student's own trajectories, `memory.builder.student_memory_model`); None:
        deterministic entries only (the oracle is no model, so a bank it would write is
        built deterministically too)."""
        builder = self.memory.builder
        choice = builder.student_memory_model if from_student else builder.model
        if choice == "none":
            return None
        if choice in ("teacher", "student"):
            model = self.teacher if choice == "teacher" else self.student
            return None if model.backend == "oracle" else model
        return self.builder_models[choice]

    def bank_writer(self, from_student: bool = False) -> str:
        """Who writes a bank, for tags: a model config name, or `deterministic`."""
        model = self.builder_model(from_student)
        return model.name if model is not None else "deterministic"

    @property
    def tracking_uri(self) -> str:
        if self.tracking.uri:
            return self.tracking.uri
        return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


_BANK_WRITERS = ("teacher", "student", "none")


class ConfigError(ValueError):
    """A config value is wrong; the message names the key."""


def to_config(cfg: DictConfig | dict[str, Any]) -> DistilleryConfig:
    """Resolve and validate; raise ConfigError naming the first bad key."""
    if isinstance(cfg, DictConfig):
        try:
            data = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
        except MissingMandatoryValue as exc:
            raise ConfigError(
                f"invalid config at {exc.full_key}: required value is missing (???)"
            ) from None
        except Exception as exc:  # interpolation errors carry the key already
            raise ConfigError(f"invalid config: {exc}") from None
    else:
        data = cfg
    if not isinstance(data, dict):
        raise ConfigError(f"invalid config: a mapping of keys, not {type(data).__name__}")
    data = {k: v for k, v in data.items() if k != "hydra"}
    try:
        return DistilleryConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError, prefix: str = "") -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        key = prefix + key if key else prefix.rstrip(".") or "<root>"
        msg = err["msg"].removeprefix("Value error, ")
        if not err["loc"] and re.match(r"^[\w.]+: ", msg):
            named, msg = msg.split(": ", 1)  # whole-config checks name their key first
            key = prefix + named
        if err["type"] == "extra_forbidden":
            close = None if prefix else model_field_suggestion(tuple(err["loc"]))
            if close:
                parent = ".".join(str(p) for p in err["loc"][:-1])
                msg = f"unknown key; did you mean {parent + '.' if parent else ''}{close}?"
            else:
                msg = "unknown key (typo?)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"{key}: {msg}")
    head = f"invalid config at {lines[0]}"
    rest = "".join(f"\n  also {line}" for line in lines[1:])
    return head + rest


def model_field_suggestion(loc: tuple[Any, ...]) -> str | None:
    """For a key the typed config refuses as unknown (at `loc`): the closest field the
    config model has there, e.g. `limit` for benchmark.limt."""
    model: Any = DistilleryConfig
    for part in loc[:-1]:
        fields = getattr(model, "model_fields", None)
        if not fields or part not in fields:
            return None
        model = _model_of(fields[part].annotation)
        if model is None or not (isinstance(model, type) and issubclass(model, BaseModel)):
            return None
    fields = getattr(model, "model_fields", {})
    close = difflib.get_close_matches(str(loc[-1]), list(fields), n=1, cutoff=0.6)
    return close[0] if close else None


def _model_of(annotation: Any) -> Any:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if isinstance(arg, type) and issubclass(arg, BaseModel):
            return arg
    return None
