"""Every third-party module the package imports (orchestrator/, workers/, distillery/)
belongs to a distribution pyproject.toml declares (a dependency, or an extra for the
code that only runs where that extra is installed), or to a benchmark's own venv behind
the process boundary. A module installed here only because something else pulled it in
(jinja2 came with mlflow) is not declared: a fresh install of another version of that
something breaks the import."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = ["orchestrator", "workers", "distillery/redaction.py", "distillery/testing"]
# Imported only inside a venv of its own (workers/envs/<benchmark>/, behind the process
# boundary) or on a machine with an extra: module -> where it comes from.
ELSEWHERE = {
    "appworld": "AppWorld's venv (workers/envs/appworld)",
    "tool_sandbox": "ToolSandbox's venv (workers/envs/toolsandbox)",
    "bfcl_eval": "installed with --no-deps by scripts/setup.sh (pyproject says why)",
    "vllm": "the gpu extra",
    "llama_cpp": "the cpu extra (scripts/setup.sh builds it for the machine's CPU)",
    "torch": "sentence-transformers' dependency, installed as the CPU wheel by scripts/setup.sh",
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def declared() -> set[str]:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    names = {_name(r) for r in project["dependencies"]}
    for extra in project.get("optional-dependencies", {}).values():
        names |= {_name(r) for r in extra}
    return names


def imported_modules() -> dict[str, str]:
    """Top-level module -> the first file importing it (absolute imports only)."""
    found: dict[str, str] = {}
    files: list[Path] = []
    for source in SOURCES:
        path = REPO_ROOT / source
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for path in files:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], str(path.relative_to(REPO_ROOT)))
    return found


def test_every_imported_third_party_module_is_declared():
    distributions = packages_distributions()
    wanted = declared()
    missing = []
    for module, where in sorted(imported_modules().items()):
        if module in sys.stdlib_module_names or module in ("distillery", "__future__"):
            continue
        if module in ELSEWHERE:
            continue
        owners = {d.lower().replace("_", "-") for d in distributions.get(module, [])}
        if not owners:
            missing.append(f"{module} ({where}): installed by no distribution here")
        elif not owners & wanted:
            missing.append(f"{module} ({where}): from {sorted(owners)}, not in pyproject.toml")
    assert missing == []
