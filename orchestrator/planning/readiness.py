"""`--plan` as a pre-flight: every check a run makes before work starts, run without
starting anything, and every problem reported at once (a run stops at the first).

What a run checks, and where (each check is the run's own function, called here):

* the config: every key typed and validated (`config.to_config`, all sweep points),
  the sweep planned (task ids, splits; a benchmark's venv and data folder, which
  listing its tasks needs) and the config-only checks (`preflight.check_config`);
* the world (`preflight.check_run`'s checks, without writing anything): a Ray cluster
  address to join, the output root, the tracking store's and the embedded store's
  folders writable, an object store's bucket, every `api_key_env` set;
* installs and services (`requirements_check`): the benchmark's package, llama.cpp,
  vLLM and model files of launched models, external endpoints, the tracking server and
  a Qdrant server answering;
* each external model's endpoint answering a request shaped exactly as its episodes'
  (the run's own first request: `EpisodeRunner.preflight`), which a server that
  refuses how requests are built refuses here;
* GPUs for the vLLM servers of a local run (`nvidia-smi`, else torch).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distillery.orchestrator.core.config import DistilleryConfig
from distillery.orchestrator.core.errors import UserError
from distillery.orchestrator.planning.plan import StageGraph
from distillery.orchestrator.planning.preflight import (
    PreflightError,
    _check_remote_root,
    check_cluster,
    check_config,
    check_endpoint,
    check_output_dir_value,
    check_store_value,
    check_tracking_uri_value,
    endpoints_in_use,
)
from distillery.orchestrator.planning.requirements_check import (
    missing_requirements,
    models_in_use,
)
from distillery.redaction import redact
from distillery.workers.llm.config import ModelConfig

# What the endpoint probe may take: the run's own request, without the model's long
# retry budget (a plan should answer in seconds, not minutes).
_PROBE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Problem:
    """One thing a run would refuse or fail on, in one line (its key first)."""

    text: str

    def __str__(self) -> str:
        return self.text


def world_problems(
    configs: list[DistilleryConfig],
    graph: StageGraph | None,
    *,
    probe_endpoints: bool = True,
    gpu_count: Callable[[], int | None] | None = None,
    output_root_checked: bool = False,
) -> list[Problem]:
    """Every problem of the world the sweep points at (see the module docstring), each
    named once. `graph`: the planned sweep, when planning succeeded (it narrows the
    checks to what the planned stages use); `probe_endpoints`: send each external
    model its first request; `output_root_checked`: an object-store output root was
    checked already (its check may take the pre-flight's whole bound)."""
    found: dict[str, Problem] = {}

    def add(text: str) -> None:
        found.setdefault(text, Problem(text))

    def check(fn: Callable[..., Any], *args: Any) -> bool:
        try:
            fn(*args)
        except (PreflightError, UserError, ValueError) as exc:
            add(str(exc))
            return False
        return True

    cfg = configs[0]  # output root, tracking, cluster and store are shared by all points
    if graph is not None:
        check(check_config, graph)
    check(check_cluster, cfg)
    remote_root = "://" in cfg.output_dir and not cfg.output_dir.startswith("file://")
    if not (output_root_checked and remote_root):
        check(_output_dir_writable, cfg.output_dir)
    check(_tracking_writable, cfg.tracking_uri)
    uses_memory = any(c.method(n).uses_memory for c in configs for n in c.methods)
    if uses_memory:
        check(_store_writable, cfg)
    for endpoint in _endpoints(configs, graph, uses_memory):
        check(check_endpoint, endpoint)
    for missing in missing_requirements(configs, models=True, services=True):
        add(str(missing))
    for text in _gpu_problems(configs, gpu_count or local_gpus):
        add(text)
    if probe_endpoints and graph is not None:
        for role, model in _probe_targets(configs, graph):
            where = f"{role}.base_url={redact(model.base_url or '')}: "
            if any(p.text.startswith(where) for p in found.values()):
                continue  # said already: nothing answers there
            if model.api_key_env and not os.environ.get(model.api_key_env):
                continue  # said already: its key is not set
            text = probe_endpoint(role, model, graph)
            if text:
                add(text)
    return list(found.values())


def _endpoints(configs: list[DistilleryConfig], graph: StageGraph | None, uses_memory: bool):
    if graph is not None:
        yield from endpoints_in_use(graph, uses_memory)
        return
    from distillery.orchestrator.planning.preflight import _model_endpoint

    for cfg in configs:  # no plan (the benchmark cannot list its tasks): the configs
        for role, model in models_in_use(cfg):
            if model.backend != "oracle":
                yield _model_endpoint(role, model)


# -- the world, read but never written ------------------------------------------------


def _output_dir_writable(output_dir: str) -> None:
    root = check_output_dir_value(output_dir)
    if root.is_local:
        _writable(root.local_path, "output_dir")
    else:
        _check_remote_root(root)


def _tracking_writable(uri: str) -> None:
    base = check_tracking_uri_value(uri)
    if base is None:
        _writable(Path(uri).expanduser().resolve(), "tracking.uri")
    elif base == "sqlite":
        db = uri.split("://", 1)[1].split("?", 1)[0][1:]
        if db and db != ":memory:":
            path = Path(db).expanduser().resolve()
            if path.exists() and not path.is_file():
                raise PreflightError(f"tracking.uri: {path} is a folder, not a SQLite file")
            _writable(path.parent, "tracking.uri")


def _store_writable(cfg: DistilleryConfig) -> None:
    check_store_value(cfg)
    if cfg.memory.store.path:
        _writable(Path(cfg.memory.store.path).expanduser().resolve(), "memory.store.path")


def _writable(path: Path, key: str) -> None:
    """The folder exists and can be written, or can be made: its nearest existing
    ancestor is a writable folder (nothing is created: a plan writes nothing)."""
    for parent in (path, *path.parents):
        if parent.exists():
            if not parent.is_dir():
                what = "is" if parent == path else f"is inside {parent}, which is"
                raise PreflightError(f"{key}: {path} {what} a file, not a folder")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise PreflightError(
                    f"{key}: cannot write to {path} ({parent} is not writable); choose a "
                    "folder you can write to"
                )
            return


# -- GPUs ------------------------------------------------------------------------------


def gpus_needed(model: ModelConfig) -> int:
    """GPUs a launched vLLM model holds at once (all its replicas)."""
    return model.replicas * max(model.gpus_per_server, 1) if model.backend == "vllm" else 0


def _gpu_problems(
    configs: Iterable[DistilleryConfig], gpu_count: Callable[[], int | None]
) -> list[str]:
    """A local run's vLLM models need their GPUs on this machine (one model's servers at a
    time: a model's servers stop after its last stage). On a joined cluster the run
    places them on the cluster's GPU nodes, which this machine cannot see."""
    out = []
    needed: dict[str, tuple[str, int]] = {}
    for cfg in configs:
        if cfg.cluster.joins:
            continue
        for role, model in models_in_use(cfg):
            n = gpus_needed(model)
            if n:
                needed.setdefault(model.name, (role, n))
    if not needed:
        return out
    have = gpu_count()
    for name, (role, n) in needed.items():
        if have is None:
            out.append(
                f"{role}={name} (backend vllm): needs {n} GPU(s); no NVIDIA GPU is visible "
                "here (nvidia-smi not found): run on a GPU machine, join a cluster "
                f"(cluster=ray), or serve the model elsewhere ({role}=external)"
            )
        elif have < n:
            out.append(
                f"{role}={name} (backend vllm): needs {n} GPU(s) ({role}.replicas x "
                f"{role}.gpus_per_server), this machine has {have}: lower them, or join a "
                "cluster (cluster=ray)"
            )
    return out


def local_gpus() -> int | None:
    """NVIDIA GPUs on this machine (None: no NVIDIA driver tools)."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.SubprocessError):
            return None
        if listed.returncode == 0:
            return sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))
        return 0
    return None


# -- endpoints, with the exact request shape --------------------------------------------


def _probe_targets(
    configs: Iterable[DistilleryConfig], graph: StageGraph | None = None
) -> list[tuple[str, ModelConfig]]:
    """Every external model the sweep calls, by role: teachers, students and builders of
    the configs, and every further model a planned stage calls (a brew's curator)."""
    seen: set[str] = set()
    out = []
    used = [pair for cfg in configs for pair in models_in_use(cfg)]
    if graph is not None:
        used += [pair for stage in graph.stages.values() for pair in stage.models.items()]
    for role, model in used:
        if model.backend != "external" or not model.base_url:
            continue
        ident = model.model_dump_json(exclude={"name"})
        if ident not in seen:
            seen.add(ident)
            out.append((role, model))
    return out


def probe_endpoint(role: str, model: ModelConfig, graph: StageGraph) -> str | None:
    """Send `model`'s endpoint the run's own first request (shaped exactly as its
    episodes': sampling, token cap, reasoning and thinking fields); a refusal is the
    run's refusal, named with the server's words. Returns the problem, or None."""
    from distillery.workers.episodes import AgentJob, EpisodeRunner
    from distillery.workers.llm.types import RequestConfigError

    # The point whose benchmark the model serves: any model of a config or of its
    # stages (teacher, student, builder, curator, ...); all share the benchmark's shape.
    cfg = next(
        (c for c in graph.configs if any(model == m for _, m in models_in_use(c))),
        graph.configs[0],
    )
    quick = model.model_copy(
        update={
            "max_retries": 0,
            "request_timeout_s": min(model.request_timeout_s, _PROBE_TIMEOUT_S),
        }
    )
    job = AgentJob(
        run_id="plan",
        stage="plan",
        role=role,
        model=quick,
        benchmark=cfg.benchmark.name,
        episodes_dir=os.devnull,
        benchmark_options=dict(cfg.benchmark.options),
    )
    try:
        runner = EpisodeRunner(job, [model.base_url or ""])
        unreachable = asyncio.run(runner.preflight())
    except RequestConfigError as exc:
        return f"{role}={model.name}: its endpoint refuses the run's requests: {redact(str(exc))}"
    except Exception as exc:  # noqa: BLE001 - a plan reports, it does not crash
        return f"{role}={model.name}: probing {redact(model.base_url or '')} failed: {exc}"
    if unreachable:
        return (
            f"{role}.base_url={redact(model.base_url or '')}: the request a run sends first "
            f"failed: {redact(unreachable)[:300]}"
        )
    return None
