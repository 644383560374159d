#!/usr/bin/env bash
# Fresh machine -> a real small experiment: oracle teacher and SmolLM2-135M student on
# BFCL multi-turn tasks, local Ray, Parquet episodes and MLflow runs in this folder.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. "${VENV:-.venv}/bin/activate"
exec distillery "$@"
