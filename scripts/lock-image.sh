#!/usr/bin/env bash
# Re-pins the image's Python layer: k8s/requirements/cluster.txt (the CPU image) is
# what `pip install ".[cluster]"` installs into a fresh Python 3.11 venv on Linux
# x86_64 (torch: its CPU build, from PyTorch's CPU index in the image); gpu.txt (the
# vLLM image) is resolved with uv for the same platform without installing (vLLM needs
# CUDA). Run after changing a dependency in pyproject.toml; tests/k8s/test_image.py
# fails until the locks agree with it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --upgrade pip
"$work/venv/bin/python" -m pip install -q "torch==2.13.0"   # the CPU build (see scripts/setup.sh)
"$work/venv/bin/python" -m pip install -q ".[cluster]"
{
  echo "# The CPU image's Python layer (k8s/Dockerfile), pinned: scripts/lock-image.sh."
  echo "# torch is PyTorch's CPU build, from its CPU index:"
  echo "--extra-index-url https://download.pytorch.org/whl/cpu"
  "$work/venv/bin/python" -m pip freeze --exclude distillery --exclude pip --exclude setuptools --exclude wheel | LC_ALL=C sort -f
} > k8s/requirements/cluster.txt
uv="${UV:-$(command -v uv || echo "$work/venv/bin/uv")}"
[ -x "$uv" ] || { "$work/venv/bin/python" -m pip install -q uv; uv="$work/venv/bin/uv"; }
"$uv" pip compile pyproject.toml --extra cluster --extra gpu --python-version 3.11 \
  --python-platform x86_64-manylinux_2_28 --no-header --no-annotate --quiet \
  -o "$work/gpu.txt"
{
  echo "# The vLLM image's Python layer (k8s/Dockerfile --build-arg LOCK=gpu), pinned:"
  echo "# scripts/lock-image.sh (resolved for Linux x86_64, Python 3.11)."
  LC_ALL=C sort -f "$work/gpu.txt"
} > k8s/requirements/gpu.txt
echo "locked: k8s/requirements/cluster.txt ($(grep -c '==' k8s/requirements/cluster.txt) pins), gpu.txt ($(grep -c '==' k8s/requirements/gpu.txt) pins)"
