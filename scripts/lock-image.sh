#!/usr/bin/env bash
# Re-pins both images' Python layers as ONE resolution (run after changing a dependency
# in pyproject.toml; tests/k8s/test_image.py fails until the locks agree with it):
#   k8s/requirements/gpu.txt      the vLLM image: extras cluster + cpu + gpu;
#   k8s/requirements/cluster.txt  the CPU image: extras cluster + cpu, resolved with
#                                 gpu.txt as constraints, so every package both images
#                                 hold has the same version (torch: the same release,
#                                 PyTorch's CPU build of it, from its CPU index).
# Both for Linux x86_64, Python 3.11, with uv (no install, no CUDA needed). Neither lock
# pins llama-cpp-python: k8s/Dockerfile builds it from source with the portable flags
# (docs/backends/llama_cpp.md, "The Kubernetes images"); its server extra's
# dependencies are in both locks.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3.11}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
uv="${UV:-$(command -v uv || true)}"
if [ -z "$uv" ]; then
  "$PYTHON" -m venv "$work/venv"
  "$work/venv/bin/python" -m pip install -q uv
  uv="$work/venv/bin/uv"
fi
# No pre-release where a release exists: sympy 1.14.0 caps mpmath<1.4, and without this
# constraint the resolver keeps mpmath 1.4 by falling back to sympy 1.14.0rc1.
# OpenTelemetry's 0.x packages (ray's pins) publish betas only: --prerelease=if-necessary.
printf 'sympy>=1.14.0\n' > "$work/constraints.txt"
common=(--python-version 3.11 --python-platform x86_64-manylinux_2_28 --no-header --quiet
        --prerelease=if-necessary --constraint "$work/constraints.txt"
        --no-emit-package llama-cpp-python)
"$uv" pip compile pyproject.toml --extra cluster --extra cpu --extra gpu "${common[@]}" \
  --no-annotate -o "$work/gpu.txt"
"$uv" pip compile pyproject.toml --extra cluster --extra cpu "${common[@]}" \
  --constraint "$work/gpu.txt" -o "$work/cluster-annotated.txt"
{
  echo "# The vLLM image's Python layer (k8s/Dockerfile --build-arg LOCK=gpu), pinned:"
  echo "# scripts/lock-image.sh (resolved for Linux x86_64, Python 3.11)."
  LC_ALL=C sort -f "$work/gpu.txt"
} > k8s/requirements/gpu.txt
# PyPI's torch for Linux x86_64 is the CUDA build; the CPU image takes the same release's
# CPU build, whose only requirements are these (torch-*+cpu's METADATA): what PyPI's
# build adds (cuda-*, nvidia-*, triton) is dropped with whatever only they need.
python3 - "$work/cluster-annotated.txt" "$work/cluster.txt" <<'PY'
import re, sys
CPU_TORCH_NEEDS = {"filelock", "typing-extensions", "setuptools", "sympy", "networkx", "jinja2", "fsspec"}
pins, via, name = {}, {}, None
for line in open(sys.argv[1]).read().splitlines():
    if m := re.match(r"^([A-Za-z0-9_.\-]+)==(\S+)", line):
        name = m.group(1).lower()
        pins[name], via[name] = m.group(2), set()
    elif name and (m := re.match(r"^\s+#\s+(?:via\s+)?([A-Za-z0-9_.\-]+)\s*$", line)):
        if m.group(1) != "via":
            via[name].add(m.group(1).lower())
dropped: set[str] = set()
while True:
    more = {
        n for n, parents in via.items()
        if n not in dropped and parents and all(
            p in dropped or (p == "torch" and n not in CPU_TORCH_NEEDS) for p in parents)
    }
    if not more:
        break
    dropped |= more
with open(sys.argv[2], "w") as out:
    for n in sorted(pins):
        if n not in dropped:
            version = pins[n] + "+cpu" if n == "torch" else pins[n]
            out.write(f"{n}=={version}\n")
print("CPU image: dropped torch's CUDA requirements:", " ".join(sorted(dropped)), file=sys.stderr)
PY
{
  echo "# The CPU image's Python layer (k8s/Dockerfile), pinned: scripts/lock-image.sh."
  echo "# torch is PyTorch's CPU build of the release gpu.txt pins, from its CPU index:"
  echo "--extra-index-url https://download.pytorch.org/whl/cpu"
  LC_ALL=C sort -f "$work/cluster.txt"
} > k8s/requirements/cluster.txt
echo "locked: k8s/requirements/cluster.txt ($(grep -c '==' k8s/requirements/cluster.txt) pins), gpu.txt ($(grep -c '==' k8s/requirements/gpu.txt) pins)"
