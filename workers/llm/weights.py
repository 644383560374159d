"""Model weights for vLLM replicas: a shared cache filled once, vLLM started offline.

On a cluster the GPU pods mount one model cache (Hugging Face's cache layout, at
`HF_HUB_CACHE`) and run with `HF_HUB_OFFLINE=1`: a replica never downloads, so a
gated model (Llama 3.1, Gemma) needs no token on the GPU pods and 8 replicas never
fetch the same 60 GB at once. The cache is filled by one command, a Kubernetes Job
that runs

    python -m distillery.workers.llm.weights download MODEL [MODEL ...]

with `HF_TOKEN` from a Secret (`distillery submit --k8s --weights ...` renders it for a
sweep's models; docs/cluster.md). Before a vLLM replica starts, `require_cached`
checks that its model is there and stops the replica at once, naming the model and
the command, instead of letting vLLM fail offline after its start-up timeout.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# What vLLM loads (its default load format prefers safetensors); consolidated
# originals (Llama's original/*.pth) would double the download for nothing.
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".gguf")
_SKIP_WITH_SAFETENSORS = ["original/*", "*.pth", "*.pt", "*.bin", "*.gguf", "*.onnx"]
FILL_COMMAND = "distillery submit --k8s --weights <the sweep's overrides> | kubectl create -f -"


class ModelNotCached(RuntimeError):
    """A vLLM replica's model is not in the (offline) model cache."""


def cache_dir() -> Path:
    """The Hugging Face hub cache this process reads (HF_HUB_CACHE, else HF_HOME/hub)."""
    chosen = os.environ.get("HF_HUB_CACHE")
    if chosen:
        return Path(chosen)
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    return Path(home) / "hub"


def offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def cached_snapshot(model: str, cache: Path | None = None) -> Path | None:
    """The cached snapshot folder of `model` (its `main` revision) holding a config and
    weights, or None."""
    cache = cache or cache_dir()
    folder = cache / ("models--" + model.replace("/", "--"))
    try:
        revision = (folder / "refs" / "main").read_text().strip()
    except OSError:
        return None
    snapshot = folder / "snapshots" / revision
    if not (snapshot / "config.json").is_file():
        return None
    if not any(p.name.endswith(WEIGHT_SUFFIXES) for p in snapshot.rglob("*")):
        return None
    return snapshot


def require_cached(model: str) -> None:
    """Offline (HF_HUB_OFFLINE), a model id that is not a local folder must be in the
    cache; raises ModelNotCached naming the model, the cache and the command."""
    if not offline() or Path(model).is_dir():
        return
    cache = cache_dir()
    if cached_snapshot(model, cache) is None:
        raise ModelNotCached(
            f"model {model} is not in the model cache {cache} (HF_HUB_CACHE; vLLM runs "
            f"offline, HF_HUB_OFFLINE=1): fill the cache with `{FILL_COMMAND}` "
            '(docs/cluster.md, "Model weights"), or run `python -m '
            f"distillery.workers.llm.weights download {model}` where the cache is mounted"
        )


def download(models: Sequence[str], cache: Path | None = None) -> list[Path]:
    """Each model's `main` snapshot into the cache (HF_TOKEN read from the environment
    by huggingface_hub: gated models need it). Already complete snapshots are kept."""
    from huggingface_hub import HfApi, snapshot_download

    cache = cache or cache_dir()
    token = os.environ.get("HF_TOKEN") or None
    done = []
    for model in models:
        files = HfApi(token=token).list_repo_files(model)
        safetensors = any(f.endswith(".safetensors") for f in files)
        path = snapshot_download(
            model,
            cache_dir=str(cache),
            token=token,
            ignore_patterns=_SKIP_WITH_SAFETENSORS if safetensors else ["original/*"],
        )
        done.append(Path(path))
        print(f"{model}: {path}", flush=True)
    return done


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m distillery.workers.llm.weights",
        description="Fill or check the model cache vLLM replicas read offline.",
    )
    parser.add_argument("action", choices=("download", "check"))
    parser.add_argument("models", nargs="+", metavar="MODEL", help="Hugging Face model ids")
    parser.add_argument("--cache", default=None, help="cache folder (default: HF_HUB_CACHE)")
    args = parser.parse_args(argv)
    cache = Path(args.cache) if args.cache else cache_dir()
    if args.action == "download":
        if offline():
            print(
                "weights: HF_HUB_OFFLINE is set; the download needs it unset (0)",
                file=sys.stderr,
            )
            return 2
        download(args.models, cache)
        return 0
    missing = [m for m in args.models if cached_snapshot(m, cache) is None]
    for model in args.models:
        print(f"{model}: {'missing' if model in missing else 'cached'} in {cache}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
