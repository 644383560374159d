#!/usr/bin/env bash
# The image's Python layer without Docker (the lead runs it once per dependency
# change; it is not part of CI: minutes of installs). It runs k8s/Dockerfile's own
# install steps — the RUN lines that install from the lock and the package, read from
# the Dockerfile itself — in a fresh Python 3.11 venv, then `distillery --plan` in it.
# Differences from the image, all of this machine: pip's cache is used, Python is the machine's 3.11, not
# the Ray image's (same minor version), and torch's CPU build comes from this
# machine's wheels instead of PyTorch's index (the lock's --extra-index-url is dropped).
#   bash scripts/image-dry-build.sh            # the CPU image's lock (cluster)
set -euo pipefail
cd "$(dirname "$0")/.."
LOCK=${LOCK:-cluster}
PYTHON=${PYTHON:-python3.11}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$PYTHON" -m venv "$work/venv"
. "$work/venv/bin/activate"
python -m pip install -q --upgrade pip
grep -v -- '--extra-index-url' "k8s/requirements/$LOCK.txt" > "$work/lock.txt"
# The Dockerfile's RUN lines that install, with its paths and ARG filled in.
steps=$(python - "$LOCK" "$work/lock.txt" <<'PY'
import re, sys
lock, local = sys.argv[1], sys.argv[2]
text = open("k8s/Dockerfile").read().replace("\\\n", " ")
for line in text.splitlines():
    if line.startswith("RUN ") and "pip install" in line:
        cmd = line[4:].replace('"k8s/requirements/${LOCK}.txt"', local)
        # --no-cache-dir keeps the image small; here pip's cache only saves time.
        cmd = cmd.replace(" --no-cache-dir", "")
        print(re.sub(r"\bpip install", "python -m pip install -q", cmd))
PY
)
echo "$steps" | sed 's/^/dry build: /'
# The image copies the sources; here they are this checkout (the same files).
eval "$steps"
# Consistent, but for bfcl-eval, installed without its ~6 GB of dependencies on purpose.
if python -m pip check | grep -v '^bfcl-eval '; then
  echo "dry build: inconsistent dependencies (above)" >&2
  exit 1
fi
cd "$work"
HF_HUB_OFFLINE=1 MLFLOW_DISABLE_TELEMETRY=true RAY_ENABLE_UV_RUN_RUNTIME_ENV=0 \
  distillery benchmark.limit=3 --plan | tee "$work/plan.txt"
grep -q "collect" "$work/plan.txt"
echo "dry build: the $LOCK lock installs and plans a sweep"
