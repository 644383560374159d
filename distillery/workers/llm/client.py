"""One client for every OpenAI-compatible chat endpoint (vLLM, llama.cpp, OpenAI, ...).

Retries are ours, not the openai package's, so attempts can be counted: transport
errors, timeouts, 429 and 5xx are retried with exponential backoff and jitter; 400/422
mean this request is impossible (`RequestRejected`); 401/403/404 are configuration
problems (`InfraError` at once, with what to check).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from typing import Any

import openai
from openai.types.chat import ChatCompletion

from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.types import ChatResult, InfraError, RequestRejected, Usage

_CONFIG_HINTS = {
    401: "the API key was refused: check the variable named by api_key_env",
    403: "access denied: check the API key's permissions",
    404: "not found: check base_url (it must end in /v1) and the model name",
}


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout_s,
            max_retries=0,
        )

    @classmethod
    def from_config(cls, cfg: ModelConfig, base_url: str) -> ChatClient:
        return cls(
            base_url=base_url,
            model=cfg.model or cfg.name,
            api_key=api_key_from_env(cfg.api_key_env),
            timeout_s=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.retry_backoff_s,
        )

    def __repr__(self) -> str:  # never shows the key
        return f"ChatClient(base_url={self.base_url!r}, model={self.model!r})"

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
    ) -> ChatResult:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": temperature,
            "max_tokens": max_tokens,
        }
        if tools:
            request["tools"] = tools
        if seed is not None:
            request["seed"] = seed
        if response_format is not None:
            request["response_format"] = response_format
        if extra_body:
            request.update(extra_body)

        last: Exception | None = None
        for attempt in range(1, self.max_retries + 2):
            started = time.perf_counter()
            try:
                # The client's generic POST sends our JSON body as is: `create()` first
                # walks every message through its typed transforms, which cost more CPU
                # than the whole rest of an episode step (measured: ~40 %).
                response = await self._client.post(
                    "/chat/completions", body=request, cast_to=ChatCompletion
                )
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status in (400, 422):
                    raise RequestRejected(f"HTTP {status}: {_short(exc)}") from None
                if status in _CONFIG_HINTS:
                    raise InfraError(
                        f"HTTP {status} from {self.base_url}: {_CONFIG_HINTS[status]}"
                    ) from None
                last = exc  # 429, 5xx: retry
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                last = exc
            else:
                return _to_result(response, time.perf_counter() - started, attempt, self.base_url)
            if attempt <= self.max_retries:
                delay = self.backoff_s * 2 ** (attempt - 1)
                await asyncio.sleep(delay * (0.5 + random.random()))
        raise InfraError(
            f"{self.base_url} failed {self.max_retries + 1} times; last: "
            f"{type(last).__name__}: {_short(last)}"
        )

    async def aclose(self) -> None:
        await self._client.close()


def api_key_from_env(name: str | None) -> str | None:
    """The key held by the environment variable `name` (never the key in config)."""
    if not name:
        return None
    value = os.environ.get(name)
    if not value:
        raise InfraError(
            f"environment variable {name} (api_key_env) is not set: export it with the "
            "endpoint's API key before running"
        )
    return value


def _short(exc: Exception | None, limit: int = 300) -> str:
    return str(exc)[:limit] if exc else ""


def _to_result(response: Any, latency_s: float, attempts: int, endpoint: str) -> ChatResult:
    choice = response.choices[0]
    message = choice.message
    tool_calls = []
    for call in message.tool_calls or []:
        function = getattr(call, "function", None)
        if function is None:
            continue
        tool_calls.append(
            {"id": call.id, "name": function.name, "arguments": function.arguments or "{}"}
        )
    usage = response.usage
    return ChatResult(
        text=message.content or "",
        tool_calls=tool_calls,
        usage=Usage(
            prompt_tokens=getattr(usage, "prompt_tokens", 0) or 0,
            completion_tokens=getattr(usage, "completion_tokens", 0) or 0,
        ),
        latency_s=latency_s,
        finish_reason=choice.finish_reason,
        attempts=attempts,
        endpoint=endpoint,
    )
