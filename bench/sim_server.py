"""A simulated GPU model server for the serving benchmarks (OpenAI-compatible HTTP).

It answers every chat request with a short text after a latency that models a GPU
server closely enough to measure routing and scaling:

- at most `--max-seqs` requests are served at once (a server's batch); the rest queue
  inside the server, as they would in vLLM;
- a request costs `--base-ms` plus `--ms-per-token` for every prompt token not in
  this replica's prefix cache (prefill), the cache being an LRU of 16-token blocks
  keyed by the hash of the whole prefix up to the block (how vLLM's automatic prefix
  caching keys blocks), `--cache-tokens` large;
- /stats reports requests, cached and uncached prompt tokens, and the server's own
  CPU seconds (`cpu_ms`), so a benchmark can show that the servers are not what limits it.

Tokens are 4 characters. Run: python bench/sim_server.py --port 8001 --max-seqs 4
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import time
import uuid
from collections import Counter, OrderedDict
from typing import Any

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


def make_app(max_seqs: int, base_ms: float, ms_per_token: float, cache_tokens: int):
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    batch = asyncio.Semaphore(max_seqs)
    cache = PrefixCache(cache_tokens)
    stats: Counter[str] = Counter()

    async def models(_: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "sim", "object": "model"}]})

    async def chat(request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        prompt = prompt_text(body["messages"])
        async with batch:
            cached, uncached = cache.lookup_and_fill(prompt)
            stats["requests"] += 1
            stats["cached_tokens"] += cached
            stats["uncached_tokens"] += uncached
            await asyncio.sleep((base_ms + ms_per_token * uncached) / 1000)
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

    async def get_stats(_: Request) -> JSONResponse:
        return JSONResponse({**stats, "cpu_ms": int(1000 * time.process_time())})

    return Starlette(
        routes=[
            Route("/v1/models", models),
            Route("/v1/chat/completions", chat, methods=["POST"]),
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
    args = parser.parse_args()
    uvicorn.run(
        make_app(args.max_seqs, args.base_ms, args.ms_per_token, args.cache_tokens),
        host=args.host,
        port=args.port,
        log_level="warning",
        backlog=4096,
        timeout_keep_alive=60,
    )


if __name__ == "__main__":
    main()
