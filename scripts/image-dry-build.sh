#!/usr/bin/env bash
# The image's Python layer without Docker (the lead runs it once per dependency
# change; it is not part of CI: minutes of installs). It runs k8s/Dockerfile's own
# install steps — the RUN lines that install from the lock and the package, read from
# the Dockerfile itself — in a fresh Python 3.11 venv, then `distillery --plan` in it.
# Differences from the image, all of this machine: the build stage's compiler is this
# machine's, pip's cache is used, Python is the machine's 3.11, not
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
# The Dockerfile's RUN lines that build or install with pip (the llama.cpp wheel's
# portable build included: minutes of compiling), with its paths and ARGs filled in.
steps=$(python - "$LOCK" "$work/lock.txt" "$work" <<'PY'
import re, sys
lock, local, work = sys.argv[1:4]
text = open("k8s/Dockerfile").read().replace("\\\n", " ")
args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
for line in text.splitlines():
    if line.startswith("RUN ") and re.search(r"pip (install|wheel)", line):
        cmd = re.sub(r"--mount=\S+\s+", "", line[4:])
        cmd = cmd.replace('"k8s/requirements/${LOCK}.txt"', local)
        cmd = cmd.replace("/tmp/llama_build.py", "workers/llm/llama_build.py")
        cmd = cmd.replace("/wheels", f"{work}/wheels")
        cmd = cmd.replace("${LLAMA_CPP_PYTHON}", args["LLAMA_CPP_PYTHON"])
        # --no-cache-dir keeps the image small; here pip's cache only saves time.
        cmd = cmd.replace(" --no-cache-dir", "")
        print(re.sub(r"\bpip (install|wheel)", r"python -m pip \1 -q", cmd))
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
