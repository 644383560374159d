#!/usr/bin/env bash
# Fresh machine -> the whole test suite (CPU only, no network but package registries).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
export HF_HUB_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true RAY_ENABLE_UV_RUN_RUNTIME_ENV=0
ruff check .
exec python -m pytest "$@"
