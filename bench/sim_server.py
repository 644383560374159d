"""A simulated GPU model server for the serving benchmarks (OpenAI-compatible HTTP).

It answers every chat request with a short text after a latency that models a GPU
server closely enough to measure routing and scaling:

- at most `--max-seqs` requests are served at once (a server's batch); the rest queue
  inside the server, as they would in vLLM;
- a request costs `--base-ms` plus `--ms-per-token` for every prompt token not in
  this replica's prefix cache (prefill), the cache being an LRU of 16-token blocks
  keyed by the hash of the whole prefix up to the block (how vLLM's automatic prefix
  caching keys blocks), `--cache-tokens` large;
- and `--ms-per-output-token` for every token of its reply (decoding; a request's
  batch slot is held for its whole prefill and decode, as in vLLM's continuous batching,
  where a sequence's decode steps run beside the others' up to the batch limit);
- `--script MOD:FN` (distillery/testing/scripted_server.py's scripts) writes the reply,
  so a sweep's stages get answers they can play or parse; without one it is "ok";
- `--scale F` divides every latency by F (a rehearsal in compressed time);
- `/v1/embeddings` answers hashed-word vectors after `--base-ms` (an embedding API) and
  `/tokenize` counts a conversation's tokens as vLLM's endpoint does;
- /stats reports requests, cached and uncached prompt tokens, output tokens, the
  seconds with at least one request in the batch (`busy_ms`), and the server's own CPU
  seconds (`cpu_ms`), so a benchmark can show that the servers are not what limits it.

Tokens are 4 characters. Run: python bench/sim_server.py --port 8001 --max-seqs 4
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
import time
import uuid
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

# The scripts and the completion format are the package's (distillery/testing).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BLOCK_TOKENS = 16
CHARS_PER_TOKEN = 4


class PrefixCache:
    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_blocks = max(0, capacity_tokens // BLOCK_TOKENS)
        self._blocks: OrderedDict[bytes, None] = OrderedDict()

    def lookup_and_fill(self, prompt: str) -> tuple[int, int]:
        """(cached, uncached) prompt tokens; the prompt's blocks are cached after."""
        block_chars = BLOCK_TOKENS * CHARS_PER_TOKEN
        digest = hashlib.blake2b(digest_size=16)
        cached_blocks, total_blocks, hit = 0, 0, True
        for start in range(0, len(prompt) - block_chars + 1, block_chars):
            digest.update(prompt[start : start + block_chars].encode())
            key = digest.copy().digest()
            total_blocks += 1
            if hit and key in self._blocks:
                cached_blocks += 1
                self._blocks.move_to_end(key)
                continue
            hit = False  # a prefix cache: nothing after the first miss is reused
            if self.capacity_blocks:
                self._blocks[key] = None
                if len(self._blocks) > self.capacity_blocks:
                    self._blocks.popitem(last=False)
        tokens = max(1, len(prompt) // CHARS_PER_TOKEN)
        cached = cached_blocks * BLOCK_TOKENS
        return cached, max(0, tokens - cached)


def prompt_text(messages: list[dict[str, Any]]) -> str:
    return "".join(f"<{m.get('role')}>{m.get('content') or ''}" for m in messages)


class BusyClock:
    """Seconds with at least one request in the batch (the GPU computing)."""

    def __init__(self) -> None:
        self.in_batch = 0
        self.busy_s = 0.0
        self._since = time.monotonic()

    def change(self, delta: int) -> None:
        now = time.monotonic()
        if self.in_batch > 0:
            self.busy_s += now - self._since
        self._since = now
        self.in_batch += delta


def _reply_text(reply: dict[str, Any]) -> str:
    return (reply.get("content") or "") + (
        json.dumps(reply["tool_calls"]) if reply.get("tool_calls") else ""
    )


def make_app(
    max_seqs: int,
    base_ms: float,
    ms_per_token: float,
    cache_tokens: int,
    ms_per_output_token: float = 0.0,
    script: str | None = None,
    scale: float = 1.0,
):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    from distillery.testing.scripted_server import (
        completion,
        load_script,
        prompt_tokens,
        word_vector,
    )

    batch = asyncio.Semaphore(max_seqs)
    cache = PrefixCache(cache_tokens)
    stats: Counter[str] = Counter()
    busy = BusyClock()
    play = load_script(script) if script else None

    def answer(body: dict[str, Any]) -> dict[str, Any]:
        if play is None:
            return {"content": "ok"}
        try:
            return play(body)
        except Exception:  # the pool's preflight is no task a script can read
            return {"content": "OK"}

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "sim", "object": "model"}]})

    async def chat(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        prompt = prompt_text(body["messages"])
        if play is not None:
            # The script answers before the latency (its reply's length is the decode).
            reply = answer(body)
            out_tokens = max(1, len(_reply_text(reply)) // CHARS_PER_TOKEN)
            async with batch:
                cached, uncached = cache.lookup_and_fill(prompt)
                stats["requests"] += 1
                stats["cached_tokens"] += cached
                stats["uncached_tokens"] += uncached
                stats["output_tokens"] += out_tokens
                busy.change(+1)
                try:
                    ms = base_ms + ms_per_token * uncached + ms_per_output_token * out_tokens
                    await asyncio.sleep(ms / scale / 1000)
                finally:
                    busy.change(-1)
            return JSONResponse(completion(body, reply))
        async with batch:
            cached, uncached = cache.lookup_and_fill(prompt)
            stats["requests"] += 1
            stats["cached_tokens"] += cached
            stats["uncached_tokens"] += uncached
            busy.change(+1)
            try:
                await asyncio.sleep((base_ms + ms_per_token * uncached) / scale / 1000)
            finally:
                busy.change(-1)
        text = "ok"
        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", "sim"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": text},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {
                    "prompt_tokens": cached + uncached,
                    "completion_tokens": 1,
                    "total_tokens": cached + uncached + 1,
                },
            }
        )

    async def embeddings(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        stats["embedded_texts"] += len(texts)
        await asyncio.sleep(base_ms / scale / 1000)
        vectors = [word_vector(t) for t in texts]
        data = [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)]
        return JSONResponse({"object": "list", "model": body.get("model", "sim"), "data": data})

    async def tokenize(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        return JSONResponse({"count": prompt_tokens(body.get("messages") or [])})

    async def get_stats(_: Request) -> JSONResponse:
        busy.change(0)
        return JSONResponse(
            {
                **stats,
                "busy_ms": int(1000 * busy.busy_s),
                "cpu_ms": int(1000 * time.process_time()),
            }
        )

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/stats", get_stats),
        ]
    )


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--max-seqs", type=int, default=4)
    parser.add_argument("--base-ms", type=float, default=100.0)
    parser.add_argument("--ms-per-token", type=float, default=0.0)
    parser.add_argument("--cache-tokens", type=int, default=0)
    parser.add_argument("--ms-per-output-token", type=float, default=0.0)
    parser.add_argument("--script", default=None, help="MOD:FN writing each reply")
    parser.add_argument("--scale", type=float, default=1.0, help="every latency divided by")
    args = parser.parse_args()
    uvicorn.run(
        make_app(
            args.max_seqs,
            args.base_ms,
            args.ms_per_token,
            args.cache_tokens,
            args.ms_per_output_token,
            args.script,
            args.scale,
        ),
        host=args.host,
        port=args.port,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=60,
    )


if __name__ == "__main__":
    main()
