"""A scripted OpenAI-compatible chat server for tests and benchmarks (real HTTP).

Replies come from a *script*, a function ``script(request: dict) -> dict`` named by
import path ("module:function"), which returns ``{"content": str}`` or
``{"tool_calls": [{"name": ..., "arguments": {...}}]}`` (a call may name its ``id``; with ``reasoning_content`` and
``reasoning_tokens`` for a thinking model's reply), optionally with
``{"status": 503}`` to answer with an HTTP error (``"body"``: the exact error body to
send, e.g. OpenAI's own). The client's preflight request (one user message,
`PREFLIGHT_PROMPT`) is counted apart (``preflight``, not ``requests``); a script that
cannot read it (it is no benchmark task) answers it "OK" as any server would.
Hostile replies (see tests/support/hostile.py) use the raw keys: ``message`` (the
assistant message, sent as is), ``usage`` and ``finish_reason`` (as is), ``body`` (with
status 200: the whole body, verbatim, with optional ``headers``) or ``stream``
(``{"chunk": str, "interval_s": float, "total_bytes": int | None}``: a body that
trickles or never ends). JSON is written ASCII-only, so any string (lone surrogates
included) goes over the wire as the JSON escape a real server would send.
`POST /tokenize` counts a conversation's tokens as vLLM's endpoint of that name
answers (``{"count": n}``), by the same rule as the usage (4 characters = 1 token) over
the messages' contents. With ``record=True`` it keeps every chat request body (not the
preflight) for `recorded_requests` (tests that compare what two pipelines sent).
The server runs in its own process
(so it never competes with the code under test for the GIL), adds a fixed delay per
call, counts usage (4 characters = 1 token) and exposes request counts at /stats
and a health check at /health (vLLM's, which the model pool polls for a vLLM replica).

    with run_stub_server(script="distillery.testing.scripts:always_text", delay_s=0.2) as url:
        ...  # url ends in /v1

or from a shell:  python -m distillery.testing.scripted_server --script MOD:FN --port 8001
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from distillery.workers.llm.servers import free_port


def load_script(path: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """A conversation's tokens by the server's rule (its usage and `/tokenize`)."""
    return max(1, sum(len(json.dumps(m.get("content") or "")) for m in messages) // 4)


def word_vector(text: str, dim: int = 32) -> list[float]:
    """A deterministic embedding: hashed bag of words (shared words -> similar)."""
    import hashlib

    vector = [0.0] * dim
    for word in text.lower().split():
        vector[int(hashlib.md5(word.encode()).hexdigest(), 16) % dim] += 1.0
    return vector


def completion(request: dict[str, Any], reply: dict[str, Any]) -> dict[str, Any]:
    prompt_chars = 4 * prompt_tokens(request["messages"])
    if "message" in reply:  # a hostile reply: every field exactly as the script wrote it
        usage = {"prompt_tokens": max(1, prompt_chars // 4), "completion_tokens": 1}
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", "stub"),
            "choices": [
                {
                    "index": 0,
                    "message": reply["message"],
                    "finish_reason": reply.get("finish_reason", "stop"),
                }
            ],
            "usage": reply.get("usage", usage),
        }
    message: dict[str, Any] = {"role": "assistant", "content": reply.get("content")}
    finish = "stop"
    out_text = reply.get("content") or ""
    if reply.get("tool_calls"):
        message["tool_calls"] = [
            {
                "id": c.get("id") or f"call_{uuid.uuid4().hex[:12]}",
                "type": "function",
                "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
            }
            for c in reply["tool_calls"]
        ]
        message["content"] = reply.get("content")
        finish = "tool_calls"
        out_text += json.dumps(reply["tool_calls"])
    usage: dict[str, Any] = {
        "prompt_tokens": max(1, prompt_chars // 4),
        "completion_tokens": _tokens(out_text),
        "total_tokens": max(1, prompt_chars // 4) + _tokens(out_text),
    }
    if reply.get("reasoning_content") is not None:  # vLLM with a reasoning parser
        message["reasoning_content"] = reply["reasoning_content"]
    if reply.get("reasoning_tokens"):  # as OpenAI reports them
        usage["completion_tokens"] += reply["reasoning_tokens"]
        usage["total_tokens"] += reply["reasoning_tokens"]
        usage["completion_tokens_details"] = {"reasoning_tokens": reply["reasoning_tokens"]}
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.get("model", "stub"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


def _is_preflight(body: dict[str, Any]) -> bool:
    from distillery.workers.llm.compat import PREFLIGHT_PROMPT

    messages = body.get("messages") or []
    return len(messages) == 1 and messages[0].get("content") == PREFLIGHT_PROMPT


def make_app(
    script: str,
    delay_s: float,
    record: bool = False,
    gate: str | None = None,
    arrived: str | None = None,
):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    play = load_script(script)
    stats: Counter[str] = Counter()
    recorded: list[dict[str, Any]] = []

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "stub", "object": "model"}]})

    async def chat(request: Request) -> Response:
        body = await request.json()
        preflight = _is_preflight(body)
        stats["preflight" if preflight else "requests"] += 1
        if record and not preflight:
            recorded.append(body)
        stats[f"model:{body.get('model')}"] += 1
        if arrived and not preflight:  # a request came: another server's gate may open
            Path(arrived).touch()
        # Requests being answered at once, and the most there were (`in_flight_max`):
        # what the clients' concurrency caps let through.
        stats["in_flight"] += 0 if preflight else 1
        stats["in_flight_max"] = max(stats["in_flight_max"], stats["in_flight"])
        try:
            if delay_s:
                await asyncio.sleep(delay_s)
        finally:
            stats["in_flight"] -= 0 if preflight else 1
        # A held server: every request but a preflight waits (without blocking the
        # others) until the gate file exists, so a test can look at a run mid-stage.
        while gate and not preflight and not Path(gate).exists():
            await asyncio.sleep(0.2)
        reply: dict[str, Any]
        try:
            reply = play(body)
        except Exception:
            if not preflight:
                raise
            reply = {"content": "OK"}
        status = int(reply.get("status", 200))
        if status != 200:
            stats["errors"] += 1
            error = reply.get("body") or {
                "error": {"message": reply.get("content", "error"), "code": status}
            }
            return JSONResponse(error, status_code=status)
        if "body" in reply:
            raw = reply["body"]
            content = raw.encode() if isinstance(raw, str) else raw
            return Response(content, 200, reply.get("headers"), media_type=_JSON)
        if "stream" in reply:
            return StreamingResponse(_stream(**reply["stream"]), 200, media_type=_JSON)
        return Response(json.dumps(completion(body, reply)).encode(), 200, media_type=_JSON)

    async def embeddings(request: Request) -> JSONResponse:
        body = await request.json()
        stats["embedding_requests"] += 1
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        stats["embedded_texts"] += len(texts)
        return JSONResponse(
            {
                "object": "list",
                "model": body.get("model", "stub"),
                "data": [
                    {"object": "embedding", "index": i, "embedding": word_vector(t)}
                    for i, t in enumerate(texts)
                ],
                "usage": {"prompt_tokens": sum(_tokens(t) for t in texts), "total_tokens": 0},
            }
        )

    async def get_stats(_: Request) -> JSONResponse:
        return JSONResponse(dict(stats))

    async def health(_: Request) -> Response:
        # vLLM's engine check (the pool polls it for a vLLM replica): up while it runs.
        return Response(status_code=200)

    async def tokenize(request: Request) -> JSONResponse:
        body = await request.json()
        stats["tokenize_requests"] += 1
        return JSONResponse({"count": prompt_tokens(body.get("messages") or [])})

    async def requests(request: Request) -> JSONResponse:
        """The recorded chat requests, oldest first; `?clear=1` forgets them after."""
        out = list(recorded)
        if request.query_params.get("clear"):
            recorded.clear()
        return JSONResponse(out)

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/stats", get_stats),
            Route("/health", health),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/requests", requests),
        ]
    )


_JSON = "application/json"


async def _stream(chunk: str, interval_s: float = 0.0, total_bytes: int | None = None):
    """`chunk` again and again (forever when `total_bytes` is None)."""
    data = chunk.encode()
    sent = 0
    while total_bytes is None or sent < total_bytes:
        yield data
        sent += len(data)
        await asyncio.sleep(interval_s)


def wait_healthy(url: str, process: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"stub server exited with {process.returncode}")
        try:
            if httpx.get(f"{url}/models", timeout=1.0).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"stub server at {url} not healthy after {timeout_s} s")


def _server_env() -> dict[str, str]:
    """The server imports its script by name, so it gets the caller's import path: a
    script the caller can import (a test's own module included) is found there too."""
    paths = [str(Path(p).resolve()) for p in sys.path if p and Path(p).is_dir()]
    existing = os.environ.get("PYTHONPATH")
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([*paths, *([existing] if existing else [])]),
    }


@contextmanager
def run_stub_server(
    script: str,
    delay_s: float = 0.0,
    record: bool = False,
    gate: str | os.PathLike[str] | None = None,
    arrived: str | os.PathLike[str] | None = None,
) -> Iterator[str]:
    """The scripted server on a free loopback port (yields its /v1 URL). `gate`: a file
    path; requests wait until it exists (preflight requests do not). `arrived`: a file
    it creates when its first request (not a preflight) comes: two servers, each gated
    on the other's, answer only while both are asked at the same time."""
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "distillery.testing.scripted_server",
        "--script",
        script,
        "--delay",
        str(delay_s),
        "--port",
        str(port),
        *(["--record"] if record else []),
        *(["--gate", str(gate)] if gate else []),
        *(["--arrived", str(arrived)] if arrived else []),
    ]
    process = subprocess.Popen(command, env=_server_env())
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_healthy(url, process)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def stub_stats(url: str) -> dict[str, int]:
    return httpx.get(url.removesuffix("/v1") + "/stats", timeout=5).json()


def recorded_requests(url: str, clear: bool = False) -> list[dict[str, Any]]:
    """The chat requests a server started with `record=True` has received, oldest first
    (`clear`: forget them after)."""
    params = {"clear": "1"} if clear else {}
    return httpx.get(url.removesuffix("/v1") + "/requests", params=params, timeout=30).json()


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--script", required=True)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--record", action="store_true")
    parser.add_argument("--gate", default=None, help="hold requests until this file exists")
    parser.add_argument("--arrived", default=None, help="create this file at the first request")
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.script, args.delay, args.record, args.gate, args.arrived),
        host=args.host,
        port=args.port,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=60,
    )


if __name__ == "__main__":
    main()
