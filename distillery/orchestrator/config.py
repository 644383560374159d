"""One typed, validated config object per run, built from the composed Hydra config.

Validation happens before Ray or any server starts: a bad value fails with one message
that names the key (e.g. ``student.base_url``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from distillery.workers.envs.registry import BENCHMARKS
from distillery.workers.llm.config import ModelConfig

Role = Literal["teacher", "student"]


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BenchmarkConfig(_Frozen):
    name: str
    limit: int | None = Field(None, gt=0, description="First N tasks in benchmark order.")
    task_ids: tuple[str, ...] | None = None
    max_steps_per_turn: int | None = Field(None, gt=0, description="None: official limit.")

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in BENCHMARKS:
            raise ValueError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
        return name


class AgentConfig(_Frozen):
    episode_timeout_s: float = Field(1800.0, gt=0)
    episode_retries: int = Field(2, ge=0, description="Retries of an infrastructure failure.")
    retry_backoff_s: float = Field(2.0, ge=0)


class ClusterConfig(_Frozen):
    name: str = "local"
    # None: start a private local Ray on loopback; "auto" or ray://...: join a cluster.
    ray_address: str | None = None
    num_cpus: int | None = Field(None, gt=0, description="Local Ray only.")
    num_workers: int = Field(2, ge=1, description="Episode worker actors per agent.")
    episodes_per_worker: int = Field(16, ge=1, description="Concurrent episodes per worker.")
    worker_num_cpus: float = Field(0.5, gt=0)


class TrackingConfig(_Frozen):
    uri: str | None = None  # None: sqlite file mlflow.db in the working directory
    experiment: str = "distillery"
    log_trajectories: bool = True


class ExperimentConfig(_Frozen):
    name: str
    description: str = ""
    # Which agents are run and logged as child runs, in order: the teacher collects on
    # the split, the student is evaluated on it.
    agents: tuple[Role, ...] = ("teacher", "student")

    @field_validator("agents")
    @classmethod
    def _non_empty(cls, agents: tuple[str, ...]) -> tuple[str, ...]:
        if not agents:
            raise ValueError("at least one of teacher, student")
        return agents


class DistilleryConfig(_Frozen):
    experiment: ExperimentConfig
    benchmark: BenchmarkConfig
    teacher: ModelConfig
    student: ModelConfig
    agent: AgentConfig = AgentConfig()
    cluster: ClusterConfig = ClusterConfig()
    tracking: TrackingConfig = TrackingConfig()
    output_dir: str = "distillery_runs"
    run_name: str | None = None
    seed: int = 0

    def model_for(self, role: Role) -> ModelConfig:
        return self.teacher if role == "teacher" else self.student

    @property
    def tracking_uri(self) -> str:
        if self.tracking.uri:
            return self.tracking.uri
        return f"sqlite:///{Path.cwd() / 'mlflow.db'}"


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
    data = {k: v for k, v in dict(data).items() if k != "hydra"}
    try:
        return DistilleryConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "<root>"
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (typo?)"
        elif err["type"] == "missing":
            msg = "required key is missing"
        lines.append(f"{key}: {msg}")
    head = f"invalid config at {lines[0]}"
    rest = "".join(f"\n  also {line}" for line in lines[1:])
    return head + rest
