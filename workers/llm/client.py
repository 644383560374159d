"""One client for every OpenAI-compatible chat endpoint (vLLM, llama.cpp, OpenAI, ...).

Requests are built as the model's server wants them (`compat.RequestShape`, from the
model config). Retries are ours, not the openai package's, so attempts can be counted:
transport errors, timeouts, 429 and 5xx are retried with exponential backoff and
jitter. Refusals are classified by `compat.classify_refusal`: how distillery built the
request (an unsupported parameter, 401/403, 404 unknown model) is a
`RequestConfigError` that stops the run; a context overflow (`ContextOverflow`) or
another refusal of the conversation (`RequestRejected`) is the model's failure.

Per request CPU matters (one worker drives dozens of episodes): the body is encoded
here once (big strings such as a ~40 KB system prompt, and tool schemas, are encoded
once and reused) and sent as bytes through the openai client's generic POST, and the
reply is read with `json.loads`; the typed `create()` path and pydantic parsing cost
more than the rest of an episode step.

A request body over the model's `max_request_bytes` is never sent (`RequestTooLarge`,
a context overflow: the model's failure). A reply is data: its body is capped as it arrives (`transport.py`), `timeout_s` bounds
the whole request, and the body is normalised into a clean `ChatResult` or refused
with a reason (`replies.py`; `InvalidReply` is the model's failure, never retried).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import openai
import pydantic

from distillery.workers.llm.compat import RequestShape, build_request, classify_refusal
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.replies import parse_completion
from distillery.workers.llm.transport import (
    ResponseTooLarge,
    capped_http_client,
    timeout_request,
)
from distillery.workers.llm.types import (
    ChatResult,
    InfraError,
    InvalidReply,
    RequestConfigError,
    RequestTooLarge,
)


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 300.0,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_response_bytes: int = 2 * 1024 * 1024,
        shape: RequestShape | None = None,
        max_request_bytes: int = 8 * 1024 * 1024,
    ) -> None:
        self.base_url = base_url
        self.model = model
        self.shape = shape or RequestShape(model_name=model)
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.timeout_s = timeout_s
        self.max_request_bytes = max_request_bytes
        self._client = openai.AsyncOpenAI(
            base_url=base_url,
            api_key=api_key or "EMPTY",
            timeout=timeout_s,
            max_retries=0,
            http_client=capped_http_client(max_response_bytes),
        )
        self._tokenize_unsupported = False  # the server said it cannot count tokens

    @classmethod
    def from_config(cls, cfg: ModelConfig, base_url: str) -> ChatClient:
        return cls(
            base_url=base_url,
            model=cfg.model or cfg.name,
            api_key=api_key_from_env(cfg.api_key_env),
            timeout_s=cfg.request_timeout_s,
            max_retries=cfg.max_retries,
            backoff_s=cfg.retry_backoff_s,
            max_response_bytes=cfg.max_response_bytes,
            shape=RequestShape.of(cfg),
            max_request_bytes=cfg.max_request_bytes,
        )

    def __repr__(self) -> str:  # never shows the key
        return f"ChatClient(base_url={self.base_url!r}, model={self.model!r})"

    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        temperature: float | None = 0.0,
        max_tokens: int | None = 512,
        seed: int | None = None,
        response_format: dict[str, Any] | None = None,
        extra_body: dict[str, Any] | None = None,
        top_p: float | None = None,
    ) -> ChatResult:
        request = build_request(
            self.shape,
            self.model,
            messages,
            tools=tools,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            top_p=top_p,
            response_format=response_format,
            extra_body=extra_body,
        )
        body = _encode_request(request)
        if len(body) > self.max_request_bytes:
            raise RequestTooLarge(
                f"request body of {len(body)} bytes exceeds the ceiling of "
                f"{self.max_request_bytes} (max_request_bytes): not sent"
            )
        last: Exception | None = None
        for attempt in range(1, self.max_retries + 2):
            started = time.perf_counter()
            try:
                response = await self._post(body)
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status == 429 and _quota_exhausted(exc):
                    raise RequestConfigError(
                        f"{self.shape.model_name or self.model} at {self.base_url}: HTTP 429: "
                        f"{_error_text(exc)} (not transient). Change: the account behind "
                        "api_key_env"
                    ) from None
                if status < 500 and status not in (408, 409, 429):
                    raise classify_refusal(
                        status, _error_text(exc), self.shape, request, self.base_url
                    ) from None
                last = exc  # 408, 409, 429, 5xx: retry
            except (openai.APIConnectionError, openai.APITimeoutError) as exc:
                last = exc
            else:
                latency = time.perf_counter() - started
                return parse_completion(response, latency, attempt, self.base_url)
            if attempt <= self.max_retries:
                delay = self.backoff_s * 2 ** (attempt - 1)
                await asyncio.sleep(delay * (0.5 + random.random()))
        raise InfraError(
            f"{self.base_url} failed {self.max_retries + 1} times; last: "
            f"{type(last).__name__}: {_short(last)}"
        )

    async def count_tokens(self, messages: list[dict[str, Any]]) -> int | None:
        """The conversation's tokens as the server's tokenizer and chat template count
        them without a generation prompt (vLLM's ``POST /tokenize``, at the server's
        root); None where the server has no such endpoint or cannot say (asked once:
        a server that cannot is not asked again). Transport failures are retried as
        chat requests are; an unusable answer is None, never an episode's failure."""
        if self._tokenize_unsupported:
            return None
        request: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": False,
        }
        if self.shape.enable_thinking is not None:  # the template the chat request uses
            request["chat_template_kwargs"] = {"enable_thinking": self.shape.enable_thinking}
        url = self.base_url.rstrip("/").removesuffix("/v1") + "/tokenize"
        for attempt in range(1, self.max_retries + 2):
            try:
                async with asyncio.timeout(self.timeout_s):
                    response = await self._client.post(
                        url, content=_encode_request(request), cast_to=bytes
                    )
            except openai.APIStatusError as exc:
                if exc.status_code < 500 and exc.status_code != 429:
                    self._tokenize_unsupported = True
                    return None
            except (openai.APIConnectionError, openai.APITimeoutError, TimeoutError):
                pass
            else:
                try:
                    count = json.loads(response).get("count")
                except (ValueError, AttributeError):
                    count = None
                if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                    self._tokenize_unsupported = True
                    return None
                return count
            if attempt <= self.max_retries:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1) * (0.5 + random.random()))
        raise InfraError(f"{url} failed {self.max_retries + 1} times")

    async def _post(self, body: bytes) -> bytes:
        """The raw reply body. `timeout_s` bounds the whole request (httpx's timeouts
        bound each read, so a trickling body would never time out); a body over the
        size cap is an unusable reply (`InvalidReply`), not a transport failure."""
        try:
            async with asyncio.timeout(self.timeout_s):
                # The client's generic POST sends our bytes as is (`create()` first walks
                # every message through typed transforms) and hands back the raw reply.
                return await self._client.post("/chat/completions", content=body, cast_to=bytes)
        except openai.APIConnectionError as exc:
            if isinstance(exc.__cause__, ResponseTooLarge):
                raise InvalidReply(str(exc.__cause__)) from None
            raise
        except ResponseTooLarge as exc:
            raise InvalidReply(str(exc)) from None
        except TimeoutError:
            request = timeout_request(f"{self.base_url}/chat/completions")
            raise openai.APITimeoutError(request=request) from None

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


def _error_text(exc: openai.APIStatusError) -> str:
    """The server's error body as sent (the openai client keeps only a part of it)."""
    try:
        return exc.response.text
    except Exception:  # a response whose body could not be read
        return json.dumps(exc.body, default=str) if exc.body is not None else str(exc)


def _quota_exhausted(exc: openai.APIStatusError) -> bool:
    body = exc.body if isinstance(exc.body, dict) else {}
    return body.get("code") == "insufficient_quota" or "insufficient_quota" in _error_text(exc)


# ------------------------------------------------------------------ request bodies


def _default(value: Any) -> Any:
    """What openai's own encoder adds to JSON: datetimes and pydantic models."""
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump(exclude_unset=True, mode="json", by_alias=True)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


# The same bytes openai's `openapi_dumps` produces (compact, UTF-8, no NaN).
_ENCODER = json.JSONEncoder(
    ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=_default
)
_dumps = _ENCODER.encode

_BIG_STRING = 1024  # strings at least this long are encoded once (a system prompt)


class _LruCache:
    """(kept object, encoding) by key, least recently used first out; thread-safe."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[Any, tuple[Any, str]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or(self, key: Any, make: Callable[[], tuple[Any, str]]) -> str:
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None:
                self._entries.move_to_end(key)
                return entry[1]
        entry = make()
        with self._lock:
            self._entries[key] = entry
            if len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return entry[1]


# Strings are immutable, so a string's encoding can be reused wherever it recurs (a
# system prompt is sent again at every step of an episode and shared across episodes).
_STRINGS = _LruCache(128)
# Tool schemas are the tasks' shared, read-only dicts (~20 per task, ~1 KB each): each
# is encoded once. An entry keeps its dict alive, so the id cannot be reused meanwhile.
_TOOLS = _LruCache(8192)


def _encode_string(text: str) -> str:
    if len(text) < _BIG_STRING:
        return _dumps(text)
    return _STRINGS.get_or(text, lambda: (None, _dumps(text)))


def _encode_message(message: Any) -> str:
    if type(message) is not dict:
        return _dumps(message)
    parts = []
    for key, value in message.items():
        if type(key) is not str:  # json's own key coercion and ordering rules apply
            return _dumps(message)
        encoded = _encode_string(value) if type(value) is str else _dumps(value)
        parts.append(f"{_dumps(key)}:{encoded}")
    return "{" + ",".join(parts) + "}"


def _encode_tool(tool: Any) -> str:
    if type(tool) is not dict:
        return _dumps(tool)
    return _TOOLS.get_or(id(tool), lambda: (tool, _dumps(tool)))


def _encode_request(request: dict[str, Any]) -> bytes:
    """`request` as openai would send it, byte for byte, without re-encoding the parts
    that repeat on every step of an episode."""
    parts = []
    for key, value in request.items():
        if key == "messages" and type(value) is list:
            encoded = "[" + ",".join(_encode_message(m) for m in value) + "]"
        elif key == "tools" and type(value) is list:
            encoded = "[" + ",".join(_encode_tool(t) for t in value) + "]"
        else:
            encoded = _dumps(value)
        parts.append(f"{_dumps(key)}:{encoded}")
    return ("{" + ",".join(parts) + "}").encode()
