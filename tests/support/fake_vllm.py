"""A stand-in for `vllm serve` (vLLM cannot run without GPUs): the same command line,
checked against the flags of the vLLM version the `gpu` extra pins, and the endpoints
distillery uses, with an engine that can be made to hang.

The accepted flags and values are vLLM 0.33.0's, read from its wheel (0.34.0 has the
same ones but cannot be installed from PyPI: it pins flashinfer-python==0.7.3, which
PyPI does not have):
- `--host`, `--port`, `--enable-auto-tool-choice`, `--tool-call-parser`:
  `vllm/entrypoints/common/cli_args.py` (`FrontendArgs`; auto tool choice without a
  parser is refused there, as here);
- `--served-model-name`, `--tensor-parallel-size`, `--gpu-memory-utilization`,
  `--enable-prefix-caching`/`--no-enable-prefix-caching` (a BooleanOptionalAction),
  `--max-num-seqs`, `--seed`, `--max-model-len`, `--reasoning-parser`,
  `--distributed-executor-backend` (`ray|mp|uni|external_launcher`,
  `vllm/config/parallel.py`), `--dtype`: `vllm/engine/arg_utils.py` (`EngineArgs`);
- tool parsers `hermes`, `llama3_json`, `gemma4`: `vllm/tool_parsers/__init__.py`;
  reasoning parsers `qwen3`, `gemma4`: `vllm/reasoning/__init__.py`;
- `/health` answers 200 while the engine lives and never while it hangs
  (`vllm/entrypoints/serve/instrumentator/health.py` awaits `check_health()`), while
  `/v1/models` is answered by the API process alone.

    tests put a `vllm` script running this module first on PATH.
POST /fake/hang makes the engine hang: /health and chat requests never answer.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

VLLM_VERSION = "0.33.0"
TOOL_PARSERS = ("hermes", "llama3_json", "gemma4")
REASONING_PARSERS = ("qwen3", "gemma4")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vllm", exit_on_error=True)
    sub = p.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("model")
    serve.add_argument("--host", default=None)
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", nargs="+")
    serve.add_argument("--tensor-parallel-size", type=int, default=1)
    serve.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    serve.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction)
    serve.add_argument("--max-num-seqs", type=int)
    serve.add_argument("--seed", type=int)
    serve.add_argument("--max-model-len", type=int)
    serve.add_argument("--enable-auto-tool-choice", action="store_true")
    serve.add_argument("--tool-call-parser", choices=TOOL_PARSERS)
    serve.add_argument("--reasoning-parser", choices=REASONING_PARSERS)
    serve.add_argument(
        "--distributed-executor-backend", choices=("ray", "mp", "uni", "external_launcher")
    )
    serve.add_argument("--dtype", default="auto")
    return p


def parse(argv: list[str]) -> argparse.Namespace:
    args = parser().parse_args(argv)
    if args.enable_auto_tool_choice and not args.tool_call_parser:
        raise SystemExit("--enable-auto-tool-choice requires --tool-call-parser")
    return args


HUNG = threading.Event()


class Handler(BaseHTTPRequestHandler):
    model = "model"

    def log_message(self, fmt: str, *args: object) -> None:  # vLLM logs each request
        print(f"INFO: {self.command} {self.path}", flush=True)

    def _json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _hang_if_hung(self) -> None:
        while HUNG.is_set():
            time.sleep(0.5)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._hang_if_hung()
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/fake/hang":
            HUNG.set()
            self._json(200, {"hung": True})
        elif self.path == "/v1/chat/completions":
            self._hang_if_hung()
            self._json(
                200,
                {
                    "id": "chatcmpl-fake",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", self.model),
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "fake vllm reply"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
                },
            )
        else:
            self._json(404, {"error": "not found"})


def main(argv: list[str]) -> int:
    args = parse(argv)
    print(f"INFO: vLLM API server version {VLLM_VERSION} (fake)", flush=True)
    print(f"INFO: non-default args: {vars(args)}", flush=True)
    Handler.model = (args.served_model_name or [args.model])[0]
    server = ThreadingHTTPServer((args.host or "0.0.0.0", args.port), Handler)
    server.daemon_threads = True
    print(f"INFO: Started server process on http://{args.host}:{args.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
