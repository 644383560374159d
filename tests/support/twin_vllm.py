"""The cluster twin's `vllm` (tests/support/cluster_twin.py puts a `vllm` script running
this module first on every twin node's PATH): the model pool launches it exactly as it
launches vLLM (`vllm serve MODEL --host H --port P ...`, servers.vllm_command, from the
replica's actor in its placement group), and it serves the twin's scripted replies.

What vLLM itself would refuse, it refuses, with one line and exit status 2 (the pool's
start-up error then names the model and the log): a launch line the pinned vLLM does not
accept (tests/support/fake_vllm.py's flags), a model that is not in the offline model
cache (HF_HUB_CACHE, HF_HUB_OFFLINE=1: vLLM loads it from there), or fewer visible GPUs
(CUDA_VISIBLE_DEVICES) than its tensor-parallel size. What it saw is written to
`<pid>.launch.json` in the twin's calls folder (cluster_twin.CALLS_DIR_ENV) for the
tests to assert: the flags, the GPUs, its parent (the replica's actor).

The replies: the scripted server (distillery.testing.scripted_server, with vLLM's
/health) running the script and delay named in the JSON file at TWIN_REPLIES_ENV (the
twin writes it per sweep: cluster_twin.stand_in_vllm).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.support import fake_vllm

# The JSON file naming the replies every stand-in of the twin serves:
# {"script": "module:function", "delay_s": seconds, "gates": {model: {"gate": file,
# "arrived": file}}} (gates optional: see main).
TWIN_REPLIES_ENV = "DISTILLERY_TWIN_VLLM_REPLIES"
CALLS_DIR_ENV = "DISTILLERY_TWIN_CALLS_DIR"  # cluster_twin's (imported from here there)


def refusal(argv: list[str]) -> str | None:
    """What vLLM would refuse in this launch (one line), or None."""
    from distillery.workers.llm.weights import cache_dir, cached_snapshot, offline

    args = fake_vllm.parse(argv)  # an unknown flag or value exits as vLLM's parser does
    if offline() and not Path(args.model).is_dir() and cached_snapshot(args.model) is None:
        return f"model {args.model} is not in the model cache {cache_dir()} (offline)"
    visible = [g for g in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if g]
    if len(set(visible)) < args.tensor_parallel_size:
        return (
            f"tensor parallel size {args.tensor_parallel_size} needs as many GPUs; "
            f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r}"
        )
    if args.tensor_parallel_size > 1 and args.distributed_executor_backend != "mp":
        return "a tensor-parallel replica needs --distributed-executor-backend mp on one node"
    return None


def launch_record(argv: list[str]) -> dict[str, object]:
    args = fake_vllm.parse(argv)
    return {
        "argv": ["vllm", *argv],
        "model": args.model,
        "served_model_name": args.served_model_name,
        "host": args.host,
        "port": args.port,
        "tensor_parallel_size": args.tensor_parallel_size,
        "distributed_executor_backend": args.distributed_executor_backend,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
        "ppid": os.getppid(),  # the replica's actor (LlmServerImpl) that started it
    }


def main(argv: list[str]) -> int:
    problem = refusal(argv)
    record = launch_record(argv)
    folder = os.environ.get(CALLS_DIR_ENV)
    if folder:
        record["refused"] = problem
        (Path(folder) / f"{os.getpid()}.launch.json").write_text(json.dumps(record))
    if problem:
        print(f"stand-in vllm: {problem}", file=sys.stderr, flush=True)
        return 2
    replies_file = os.environ.get(TWIN_REPLIES_ENV)
    if not replies_file or not Path(replies_file).is_file():
        print(f"stand-in vllm: no replies file ({TWIN_REPLIES_ENV})", file=sys.stderr, flush=True)
        return 2
    replies = json.loads(Path(replies_file).read_text())
    print(f"INFO: stand-in vLLM serving {record['model']} with {replies['script']}", flush=True)
    server = [
        sys.executable,
        "-m",
        "distillery.testing.scripted_server",
        "--script",
        str(replies["script"]),
        "--delay",
        str(replies.get("delay_s", 0.0)),
        "--host",
        str(record["host"] or "0.0.0.0"),
        "--port",
        str(record["port"]),
    ]
    # Per served model, an optional rendezvous (scripted_server's gate and arrived files):
    # its replies wait until another replica has been asked (a test of stages that must
    # run at the same time).
    meeting = (replies.get("gates") or {}).get(str(record["model"])) or {}
    if meeting.get("gate"):
        server += ["--gate", str(meeting["gate"])]
    if meeting.get("arrived"):
        server += ["--arrived", str(meeting["arrived"])]
    os.execv(sys.executable, server)  # the pool's process is the server: stop() ends it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
