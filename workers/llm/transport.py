"""HTTP transport with a size cap on every response body.

A server can send an endless or enormous body (a bug, a proxy, a degenerate model
ignoring max_tokens); read whole, it grows the worker by tens of MB per second. The cap
is enforced on the bytes as they arrive, on success and error replies alike. We ask
for `identity` encoding; a gzip or deflate body sent anyway is inflated here, a piece
at a time, and the cap applies to the inflated bytes (a small gzip body can expand a
thousandfold).
"""

from __future__ import annotations

import importlib
import zlib
from collections.abc import AsyncIterator
from typing import Any

import openai

# The HTTP package openai's client is built on (`httpx`, or `httpx2` from openai 3 on).
httpx: Any = importlib.import_module(
    type(openai.DEFAULT_CONNECTION_LIMITS).__module__.split(".")[0]
)


class ResponseTooLarge(Exception):
    """A response body went over the cap (raised while it is read)."""


_INFLATED = ("gzip", "x-gzip", "deflate")


class _CappedStream(httpx.AsyncByteStream):
    def __init__(self, inner: Any, cap: int, url: str, encoding: str) -> None:
        self._inner = inner
        self._cap = cap
        self._url = url
        # wbits 32 + 15: a gzip or zlib header, detected from the data.
        self._inflate = zlib.decompressobj(47) if encoding in _INFLATED else None

    async def __aiter__(self) -> AsyncIterator[bytes]:
        received = 0
        async for chunk in self._inner:
            if self._inflate is not None:
                try:
                    # Never more than the cap allows, whatever the ratio.
                    chunk = self._inflate.decompress(chunk, self._cap - received + 1)
                except zlib.error as exc:
                    raise httpx.DecodingError(f"bad compressed body: {exc}") from None
                if self._inflate.unconsumed_tail:
                    received = self._cap + 1  # more output waiting than the cap allows
            received += len(chunk)
            if received > self._cap:
                raise ResponseTooLarge(_message(self._url, self._cap, f"over {received} bytes"))
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class CappedTransport(httpx.AsyncBaseTransport):
    """Wraps a transport so that no response body can exceed `max_bytes`."""

    def __init__(self, inner: Any, max_bytes: int) -> None:
        self._inner = inner
        self.max_bytes = max_bytes

    async def handle_async_request(self, request: Any) -> Any:
        request.headers["Accept-Encoding"] = "identity"
        response = await self._inner.handle_async_request(request)
        url = str(request.url)
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await response.aclose()
            raise ResponseTooLarge(_message(url, self.max_bytes, f"{declared} bytes declared"))
        encoding = response.headers.get("Content-Encoding", "").strip().lower()
        if encoding not in ("", "identity", *_INFLATED):
            await response.aclose()
            raise httpx.DecodingError(f"{url} sent a {encoding!r} body (asked for identity)")
        if encoding in _INFLATED:  # inflated here, under the cap: httpx must not again
            headers = [
                (key, value)
                for key, value in response.headers.raw
                if key.lower() not in (b"content-encoding", b"content-length")
            ]
        else:
            headers = response.headers.raw
        return httpx.Response(
            status_code=response.status_code,
            headers=headers,
            stream=_CappedStream(response.stream, self.max_bytes, url, encoding),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def _message(url: str, cap: int, size: str) -> str:
    return f"reply from {url} too large: {size} (limit max_response_bytes={cap})"


def capped_http_client(max_response_bytes: int) -> Any:
    """openai's default async HTTP client, with every response body capped."""
    inner = httpx.AsyncHTTPTransport(limits=openai.DEFAULT_CONNECTION_LIMITS)
    return openai.DefaultAsyncHttpxClient(transport=CappedTransport(inner, max_response_bytes))


def timeout_request(url: str) -> Any:
    """A request object for openai's timeout error (it wants the request that failed)."""
    return httpx.Request("POST", url)
