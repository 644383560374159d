"""Checks of what a run will touch, before Ray, servers or MLflow start.

Config validation (`config.py`) checks values one key at a time; this checks what
they mean together and the world they point at. Each failure is one `PreflightError`
naming the key. Only what the planned stages use is checked: an unused teacher's unset
key is fine.

Two halves:

* `check_config` reads the config only (no disk, network or environment): the tracking
  URI names a store MLflow knows, every endpoint the run will call is an http(s) URL,
  a Qdrant store is given one way, no key is given twice. It is part of the one
  validation `--cfg job`, `--plan` and a run share (`cli.validate_sweep`), so all three
  refuse these configs with the same message.
* `check_run` adds what needs I/O, and so runs only before a real run (`run_sweep`):
  the output root, the tracking store's folder and the embedded store's folder can be
  written, an object store's bucket exists, every `api_key_env` the run reads is set,
  and so is every variable a cluster launcher asked for (DISTILLERY_REQUIRED_ENV).
  `--plan` and `--cfg job` do not write or read these, so they do not check them.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from distillery.orchestrator.core.config import DistilleryConfig
from distillery.orchestrator.core.errors import UserError
from distillery.orchestrator.planning.plan import StageGraph, server_key
from distillery.redaction import redact, url_secrets
from distillery.workers.envs.registry import action_format_deviation, benchmark_options
from distillery.workers.llm.config import ModelConfig
from distillery.workers.storage import Location, s3_options

T = TypeVar("T")

# Set in the pods of k8s/ (the distillery-env ConfigMap): the Secret keys come from.
KEYS_SECRET_ENV = "DISTILLERY_KEYS_FROM"
REQUIRED_ENV = "DISTILLERY_REQUIRED_ENV"  # k8s.REQUIRED_ENV
# MLflow's tracking store schemes (database dialects may add a driver: postgresql+psycopg2).
TRACKING_SCHEMES = frozenset(
    {"file", "sqlite", "postgresql", "mysql", "mssql", "http", "https", "databricks", "uc"}
)


class PreflightError(UserError):
    """A value the run cannot use; the message starts with its key."""


@dataclass(frozen=True)
class Endpoint:
    """A URL and the key variable of something the run will call."""

    key: str  # where it is configured, e.g. "student" or "memory.embedder"
    url: str | None
    url_key: str  # the config key of the URL: base_url or url
    api_key_env: str | None
    needs_url: bool


def check_config(graph: StageGraph) -> None:
    """The config-only checks (no I/O) for the configs of a planned sweep; raises
    PreflightError. `--cfg job`, `--plan` and a run all run these (`cli.validate_sweep`)."""
    cfg = graph.configs[0]  # output root, tracking and store are shared by all points
    check_output_dir_value(cfg.output_dir)
    check_tracking_uri_value(cfg.tracking_uri)
    uses_memory = _uses_memory(graph)
    if uses_memory:
        check_store_value(cfg)
    for endpoint in _unique_endpoints(graph, uses_memory):
        check_endpoint_value(endpoint)


def check_run(graph: StageGraph) -> None:
    """`check_config`, then what needs I/O (folders written, a bucket looked up,
    environment variables read): before a real run only; raises PreflightError."""
    check_config(graph)
    cfg = graph.configs[0]
    check_cluster(cfg)
    check_output_dir(cfg.output_dir)
    check_tracking_uri(cfg.tracking_uri)
    uses_memory = _uses_memory(graph)
    if uses_memory:
        check_store(cfg)
    for endpoint in _unique_endpoints(graph, uses_memory):
        check_endpoint(endpoint)
    check_benchmark_environment(graph.configs)
    check_required_env()


def check_benchmark_environment(configs: list[DistilleryConfig]) -> None:
    """Every variable the benchmark's options say a run reads is set (e.g. ToolSandbox's
    RAPID_API_KEY with network=true). Run-only, like the endpoints' keys."""
    for cfg in configs:
        needed = benchmark_options(cfg.benchmark.name, cfg.benchmark.options)
        for name, why in needed.required_environment().items():
            if not os.environ.get(name):
                raise PreflightError(
                    f"benchmark.options: environment variable {name} is not set; {why}"
                )


def run_notices(configs: list[DistilleryConfig]) -> list[str]:
    """What a user must know before the run starts, each once: the benchmark's notices
    for its options, and a model playing the benchmark in an action format its own
    harness does not (a recorded deviation)."""
    from distillery.orchestrator.planning.requirements_check import models_in_use

    found: dict[str, None] = {}
    for cfg in configs:
        name = cfg.benchmark.name
        for notice in benchmark_options(name, cfg.benchmark.options).notices():
            found[notice] = None
        for role, model in models_in_use(cfg):
            if not role.startswith(("teacher", "student")) or model.backend == "oracle":
                continue
            deviation = action_format_deviation(name, model.action_format)
            if deviation:
                found[
                    f"{role}={model.name} plays {name} with action_format={model.action_format}, "
                    f"not as the benchmark's own harness does (recorded as {deviation}); "
                    f"{role}.action_format=prompt plays it as theirs"
                ] = None
    return list(found)


def check_required_env() -> None:
    """The variables a cluster's launcher wired into this process and asked to be set
    (`distillery submit --k8s --env NAME`: DISTILLERY_REQUIRED_ENV), checked here so a
    missing key stops the sweep before the cluster does any work."""
    names = [n for n in os.environ.get(REQUIRED_ENV, "").split(",") if n.strip()]
    for name in names:
        if not os.environ.get(name.strip()):
            raise PreflightError(
                f"--env {name.strip()}: the variable is not set in this pod{_secret_hint(name)}"
            )


def _secret_hint(name: str) -> str:
    """Where a key comes from on Kubernetes (the pods' DISTILLERY_KEYS_FROM)."""
    secret = os.environ.get(KEYS_SECRET_ENV)
    if not secret:
        return ""
    return (
        f"; on Kubernetes every key of the Secret {secret} is a variable of every Ray pod: "
        f"kubectl -n NAMESPACE create secret generic {secret} --from-literal={name}=... "
        "(add it to the existing Secret with kubectl edit), then submit the sweep again"
    )


def check_cluster(cfg: DistilleryConfig) -> None:
    """A run that joins a Ray cluster (cluster=ray) has an address to join, given by
    the user: `cluster.ray_address` or $RAY_ADDRESS. Never Ray's `auto`, which joins
    whatever Ray happens to run on this host (a test suite's private cluster, once)."""
    cluster = cfg.cluster
    if not cluster.joins:
        return
    address = cluster.address()
    if not address:
        raise PreflightError(
            f"cluster.ray_address: cluster={cluster.name} joins an existing Ray cluster, "
            "but neither cluster.ray_address nor RAY_ADDRESS is set; give its address "
            "(cluster.ray_address=ray://HEAD:10001 or export RAY_ADDRESS=HEAD:6379), or "
            "use cluster=local for a private Ray on this machine"
        )
    if address.strip().lower() == "auto":
        where = "cluster.ray_address" if cluster.ray_address else "RAY_ADDRESS"
        raise PreflightError(
            f"cluster.ray_address: {where}=auto would join whatever Ray runs on this host; "
            "give the cluster's address (ray://HEAD:10001 or HEAD:6379), or use "
            "cluster=local for a private Ray on this machine"
        )


def _uses_memory(graph: StageGraph) -> bool:
    return any(not s.plays_episodes for s in graph.stages.values())


def _unique_endpoints(graph: StageGraph, uses_memory: bool) -> list[Endpoint]:
    seen: set[tuple[str, str | None, str | None]] = set()
    out = []
    for endpoint in endpoints_in_use(graph, uses_memory):
        ident = (endpoint.key, endpoint.url, endpoint.api_key_env)
        if ident not in seen:
            seen.add(ident)
            out.append(endpoint)
    return out


def check_output_dir_value(output_dir: str) -> Location:
    """Config only: the output root is given, parses, and an object store names a bucket."""
    if not output_dir or not output_dir.strip():
        raise PreflightError(
            "output_dir: is empty; give a folder (e.g. output_dir=distillery_runs) or a "
            "filesystem URI (s3://bucket/prefix)"
        )
    try:
        root = Location.of(output_dir)
    except (OSError, ValueError) as exc:
        raise PreflightError(f"output_dir: {output_dir!r} is not a usable path: {exc}") from None
    if not root.is_local and not root.fs_path.lstrip("/").split("/", 1)[0]:
        raise PreflightError(
            f"output_dir: {redact(root.uri)} names no bucket (scheme://bucket/prefix)"
        )
    return root


def check_output_dir(output_dir: str) -> None:
    """The value (above), then I/O: a local folder can be written, a bucket exists."""
    root = check_output_dir_value(output_dir)
    if root.is_local:
        _check_local_folder(root.local_path, "output_dir")
    else:
        _check_remote_root(root)


def _check_local_folder(path: Path, key: str) -> None:
    for parent in (path, *path.parents):  # the nearest existing ancestor must be a folder
        if parent.exists():
            if not parent.is_dir():
                what = "is" if parent == path else f"is inside {parent}, which is"
                raise PreflightError(f"{key}: {path} {what} a file, not a folder")
            break
    probe = path / f".distillery-write-check-{uuid.uuid4().hex}"
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise PreflightError(
            f"{key}: cannot write to {path} ({exc.strerror or exc}); choose a folder you "
            "can write to"
        ) from None


# Ours: how long the output root's bucket check may take, whatever the scheme. An
# object store's client retries for minutes by default (GCS 15, with a metadata server
# to find offline first), silently and deaf to Ctrl-C; a store that does not answer in
# this time would not take the run's writes either.
REMOTE_CHECK_S = 20.0
_CHECK_RETRY_S = 5.0  # the clients' own retry budget within it, where they take one


def _probe_filesystem(root: Location) -> Any:
    """The root's filesystem with a short retry limit where pyarrow takes one (S3: two
    attempts and socket timeouts; GCS: a retry time limit); others as the run opens them."""
    import pyarrow.fs as pafs

    scheme = root.uri.split("://", 1)[0].lower()
    if scheme == "s3":
        return pafs.S3FileSystem(
            **s3_options(),
            connect_timeout=_CHECK_RETRY_S,
            request_timeout=_CHECK_RETRY_S,
            retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=2),
        )
    if scheme in ("gs", "gcs"):
        return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=_CHECK_RETRY_S))
    return root.fs


def within_deadline(fn: Callable[[], T], seconds: float, what: str) -> T:
    """`fn()` in a thread this one waits for in short slices: the caller gets its result,
    its exception, or a PreflightError once `seconds` pass, and Ctrl-C at any time
    (a blocking client call in this thread would hold both off until it returned)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting caller
            box["error"] = exc

    worker = threading.Thread(target=run, name="distillery-preflight", daemon=True)
    worker.start()
    deadline = time.monotonic() + seconds
    while worker.is_alive():
        left = deadline - time.monotonic()
        if left <= 0:  # the thread is left behind (daemon): the run stops here anyway
            raise PreflightError(f"{what}: no answer within {seconds:g} s")
        worker.join(min(0.1, left))
    if "error" in box:
        raise box["error"]
    return box["value"]


def _check_remote_root(root: Location) -> None:
    uri = redact(root.uri)
    bucket = root.fs_path.lstrip("/").split("/", 1)[0]  # named: check_output_dir_value
    import pyarrow.fs as pafs

    prefix = "/" if root.fs_path.startswith("/") else ""

    def probe() -> Any:
        return _probe_filesystem(root).get_file_info(prefix + bucket)

    try:
        info = within_deadline(probe, REMOTE_CHECK_S, f"output_dir: {uri}")
    except PreflightError as exc:
        raise PreflightError(
            f"{exc} (the bucket's store did not answer: check the network, the "
            "credentials and the endpoint, or use a local output_dir)"
        ) from None
    except (ValueError, ImportError) as exc:  # no filesystem for the scheme
        raise PreflightError(f"output_dir: {uri}: {redact(str(exc))}") from None
    except Exception as exc:  # network, credentials: the run could not write either
        raise PreflightError(f"output_dir: cannot reach {uri}: {redact(str(exc))}") from None
    if info.type == pafs.FileType.NotFound:
        raise PreflightError(
            f"output_dir: the bucket {bucket!r} of {uri} does not exist; create it or fix the name"
        )


def check_tracking_uri_value(uri: str) -> str | None:
    """Config only: a scheme MLflow knows, and a valid URL for a tracking server. The
    scheme's base (sqlite, http, ...), or None for a plain path (a file store)."""
    shown = redact(uri)
    if "://" not in uri:
        if ":" in uri.split("/", 1)[0] and not os.path.isabs(uri):
            scheme = uri.split(":", 1)[0]
            raise PreflightError(
                f"tracking.uri: unknown scheme {scheme!r} in {shown!r}; use one of "
                f"{', '.join(sorted(TRACKING_SCHEMES))} (e.g. sqlite:///$PWD/mlflow.db)"
            )
        return None
    scheme = uri.split("://", 1)[0].lower()
    base = scheme.split("+", 1)[0]
    if base not in TRACKING_SCHEMES:
        raise PreflightError(
            f"tracking.uri: unknown scheme {scheme!r} in {shown!r}; use one of "
            f"{', '.join(sorted(TRACKING_SCHEMES))} (e.g. sqlite:///$PWD/mlflow.db)"
        )
    if base in ("http", "https"):
        _check_http(uri, "tracking.uri")
    return base


def check_tracking_uri(uri: str) -> None:
    """The value (above), then I/O: a local store's folder can be written. Whether a
    tracking server answers is checked with the other services before Ray starts
    (`requirements_check`)."""
    base = check_tracking_uri_value(uri)
    if base is None:
        _check_local_folder(Path(uri).expanduser().resolve(), "tracking.uri")  # a file store
    elif base == "sqlite":
        # SQLAlchemy: sqlite:///relative.db, sqlite:////absolute.db, sqlite:// (memory).
        db = uri.split("://", 1)[1].split("?", 1)[0][1:]
        if db and db != ":memory:":
            path = Path(db).expanduser().resolve()
            if path.exists() and not path.is_file():
                raise PreflightError(f"tracking.uri: {path} is a folder, not a SQLite file")
            _check_local_folder(path.parent, "tracking.uri")
    elif base == "file":
        _check_local_folder(Path(urlsplit(uri).path), "tracking.uri")


def check_store_value(cfg: DistilleryConfig) -> None:
    """Config only: the Qdrant store is given one way, and somewhere a run can reach."""
    store = cfg.memory.store
    if store.path and store.url:
        raise PreflightError(
            "memory.store: give path (an embedded Qdrant folder) or url (a Qdrant server), not both"
        )
    root = Location.of(cfg.output_dir)
    if not store.path and not store.url and not root.is_local:
        raise PreflightError(
            "memory.store: the output root is remote; give memory.store.url (a Qdrant "
            "server) or memory.store.path (a local folder)"
        )


def check_store(cfg: DistilleryConfig) -> None:
    """The value (above), then I/O: the embedded store's folder can be written."""
    check_store_value(cfg)
    store = cfg.memory.store
    if store.path:
        _check_local_folder(Path(store.path).expanduser().resolve(), "memory.store.path")


def endpoints_in_use(graph: StageGraph, uses_memory: bool) -> Iterator[Endpoint]:
    """What the planned stages will call: each point's teacher and student where a
    stage plays them, builder models of the banks, the embedder and the Qdrant server."""
    used = {server_key(m) for s in graph.stages.values() for m in s.models.values()}
    for cfg in graph.configs:
        for role, model in (("teacher", cfg.teacher), ("student", cfg.student)):
            if model.backend != "oracle" and server_key(model) in used:
                yield _model_endpoint(role, model)
    for source in graph.bank_sources.values():
        cfg = source.cfg
        model = cfg.builder_model()
        choice = cfg.memory.builder.model
        if model is not None and choice not in ("teacher", "none"):
            yield _model_endpoint(f"builder_models.{choice}", model)
    for stage in graph.stages.values():  # further models a stage calls (a brew's curator)
        cfg = graph.configs[0]
        keys = {"teacher": cfg.teacher, "student": cfg.student}
        keys.update({f"builder_models.{k}": m for k, m in cfg.builder_models.items()})
        for role, model in stage.other_models.items():
            if model.backend == "oracle" or server_key(model) not in used:
                continue
            key = next((k for k, m in keys.items() if m == model), role)  # the config's key
            yield _model_endpoint(key, model)
    if uses_memory:
        cfg = graph.configs[0]
        embedder = cfg.memory.embedder
        yield Endpoint(
            "memory.embedder",
            embedder.base_url,
            "base_url",
            embedder.api_key_env,
            embedder.kind == "openai",
        )
        # A method's own embedder (ExpeL's `retrieval.embedder`), where a stage uses one.
        from distillery.workers.memory.method import own_embedder
        from distillery.workers.memory.registry import memory_method

        for stage in graph.stages.values():
            kind, settings = getattr(stage, "memory_kind", None), getattr(stage, "settings", None)
            own = own_embedder(memory_method(kind), settings) if kind and settings else None
            if own is not None:
                yield Endpoint(
                    f"{kind}.retrieval.embedder", own.base_url, "base_url", own.api_key_env,
                    own.kind == "openai",
                )  # fmt: skip
        store = cfg.memory.store
        yield Endpoint("memory.store", store.url, "url", store.api_key_env, False)


def _model_endpoint(key: str, model: ModelConfig) -> Endpoint:
    return Endpoint(key, model.base_url, "base_url", model.api_key_env, model.backend == "external")


def check_endpoint_value(endpoint: Endpoint) -> None:
    """Config only: an http(s) URL where one is needed, and the key given one way."""
    url_key = f"{endpoint.key}.{endpoint.url_key}"
    if endpoint.url:
        _check_http(endpoint.url, url_key)
    elif endpoint.needs_url:
        raise PreflightError(f"{url_key}: is required (e.g. http://host:8000/v1)")
    name = endpoint.api_key_env
    env_key = f"{endpoint.key}.api_key_env"
    if name and endpoint.url and url_secrets(endpoint.url):
        raise PreflightError(
            f"{url_key} carries a key in its userinfo and {env_key} names another "
            f"({name}); give the key one way only (keep {env_key} and drop it from the URL)"
        )


def check_endpoint(endpoint: Endpoint) -> None:
    """The value (above), then the environment: the key variable is set. Run-only: the
    variable is read by the run, and a plan may be made on a machine without the key.
    Whether the URL answers is checked before Ray starts (`requirements_check`)."""
    check_endpoint_value(endpoint)
    name = endpoint.api_key_env
    if not name:
        return
    env_key = f"{endpoint.key}.api_key_env"
    if not os.environ.get(name):
        raise PreflightError(
            f"{env_key}: environment variable {name} is not set; export it with the "
            f"endpoint's API key before running{_secret_hint(name)}"
        )


def _check_http(url: str, key: str) -> None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a malformed port
    except ValueError as exc:
        raise PreflightError(f"{key}: {redact(url)!r} is not a valid URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PreflightError(
            f"{key}: {redact(url)!r} is not an http(s) URL (e.g. http://host:8000/v1)"
        )


def variables_read_on_nodes(graph: StageGraph) -> dict[str, str]:
    """Every environment variable the run's workers read where they run (variable ->
    the key that names it): each model's `api_key_env`, whatever role it plays in a
    stage (teacher, student, builder, curator, ...), the embedder's and the store's, and
    the benchmark's own (a simulated user's key)."""
    names: dict[str, str] = {}
    for stage in graph.stages.values():
        for role, model in stage.models.items():
            if model.api_key_env:
                names.setdefault(model.api_key_env, f"{role}={model.name}: api_key_env")
    for endpoint in _unique_endpoints(graph, _uses_memory(graph)):
        if endpoint.api_key_env:
            names.setdefault(endpoint.api_key_env, f"{endpoint.key}.api_key_env")
    for cfg in graph.configs:
        needed = benchmark_options(cfg.benchmark.name, cfg.benchmark.options)
        for name in needed.required_environment():
            names.setdefault(name, "benchmark.options")
    return names


def check_node_variables(names: dict[str, str]) -> None:
    """On a joined Ray cluster (Ray initialised): every variable in `names` is set on
    every live node, where episode workers and the memory service read them (the
    driver's environment does not travel to a node's workers). One line naming each
    missing variable and its nodes; raises PreflightError."""
    if not names:
        return
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0, max_retries=0)
    def unset(variables: list[str]) -> list[str]:
        return [v for v in variables if not os.environ.get(v)]

    nodes = [n for n in ray.nodes() if n.get("Alive")]
    refs = [
        unset.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(sorted(names))
        for n in nodes
    ]
    missing: dict[str, list[str]] = {}
    for node, found in zip(nodes, ray.get(refs, timeout=300), strict=True):
        where = node.get("NodeManagerHostname") or node.get("NodeManagerAddress") or "?"
        address = node.get("NodeManagerAddress")
        label = f"{where} ({address})" if address and address != where else where
        for name in found:
            missing.setdefault(name, []).append(label)
    if missing:
        raise PreflightError(
            "; ".join(
                f"{names[name]}: environment variable {name} is not set on node(s) "
                f"{', '.join(nodes_)} of the joined Ray cluster, where the run's workers "
                "read it (the driver's environment does not reach them): set it in those "
                "nodes' environment before `ray start`, or submit the run with "
                f"`distillery submit --env {name} ...`"
                for name, nodes_ in sorted(missing.items())
            )
        )
