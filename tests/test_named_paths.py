"""Every repository path a manifest (k8s/) or a documentation page (docs/, README,
CONTRIBUTING) names exists: a comment that cites a missing file sends an operator
looking for nothing."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
TOP = ("k8s", "docs", "orchestrator", "workers", "conf", "bench", "scripts", "tests", "distillery")
PATH = re.compile(r"(?<![\w./-])((?:" + "|".join(TOP) + r")/[\w./-]*[\w/])")
# Names that are no file of this repository by design (a path inside a container or on
# a node, a generated output): the text around them says so.
NOT_FILES = ("docs/_build", "k8s/overlays/my-", "tests/fixtures/generated")
# (page, name) pairs that name another repository's file, with why.
OTHERS = {
    ("docs/benchmarks/math.md", "scripts/compile.sh"): "latex2sympy2_extended's script",
}
PLACEHOLDER = re.compile(r"(^|/)[A-Z][A-Z_]*(\.|/|$)")  # conf/model/NAME.yaml


def exists(name: str) -> bool:
    """A file or folder, or a Python name written as its module's path
    (`workers/envs/registry.benchmark_splits`)."""
    if (REPO_ROOT / name).exists():
        return True
    module = name.split(".", 1)[0]
    return "." in name and (REPO_ROOT / f"{module}.py").exists()


def named_paths(text: str) -> set[str]:
    return {m.group(1) for m in PATH.finditer(text)}


def pages() -> list[Path]:
    found = [*(REPO_ROOT / "k8s").rglob("*.yaml"), *(REPO_ROOT / "docs").rglob("*.md")]
    found += [REPO_ROOT / "README.md", REPO_ROOT / "CONTRIBUTING.md"]
    return [p for p in found if "schemas" not in p.parts]


def test_every_path_a_manifest_or_page_names_exists():
    missing = []
    for page in pages():
        for name in sorted(named_paths(page.read_text())):
            where = str(page.relative_to(REPO_ROOT))
            if name.startswith(NOT_FILES) or any(c in name for c in "<>*{}"):
                continue
            if PLACEHOLDER.search(name) or (where, name) in OTHERS:
                continue
            if not exists(name):
                missing.append(f"{where}: {name}")
    assert missing == []


def test_the_scan_sees_a_missing_path():
    names = named_paths("see k8s/security/seccomp-profile.yaml, and docs/cluster.md.")
    assert names == {"k8s/security/seccomp-profile.yaml", "docs/cluster.md"}
    assert not (REPO_ROOT / "k8s/security/seccomp-profile.yaml").exists()
