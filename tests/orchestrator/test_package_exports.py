"""Each orchestrator package's `__init__` says in two lines what it owns and exports its
public names with `__all__`: every name that code outside the package (another package,
workers/, bench/, scripts/, the tests, the plugins, CONTRIBUTING.md and the manual)
imports from one of its modules. Exports are lazy (core/exports.py), so importing a
package or one of its modules does not import its other modules; what pyright reads (the
`TYPE_CHECKING` imports), `__all__` and the lazy map must name the same things.
"""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import warnings
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.package_imports import PREFIX, packages

ORCHESTRATOR = REPO_ROOT / "orchestrator"
PACKAGES = packages(ORCHESTRATOR)
# stages re-exports eagerly: its two modules import nothing heavy of the orchestrator.
EAGER = {"stages"}
# Names imported from a module that the package exports from another module under the
# same name: reached through their module.
SHADOWED = {
    ("cli", "compare", "main"): "`distillery compare`; the package's main is the command line",
    ("cli", "memory_cli", "main"): "`distillery memory`; the package's main is the command line",
}


def init_tree(package: str) -> ast.Module:
    return ast.parse((ORCHESTRATOR / package / "__init__.py").read_text())


def type_checking_imports(tree: ast.Module) -> dict[str, set[str]]:
    """{module: names} of the `if TYPE_CHECKING:` block."""
    out: dict[str, set[str]] = {}
    for node in tree.body:
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            assert isinstance(node, ast.If)
            for stmt in node.body:
                assert isinstance(stmt, ast.ImportFrom) and stmt.module
                module = stmt.module.rsplit(".", 1)[1]
                out.setdefault(module, set()).update(a.name for a in stmt.names)
    return out


def lazy_map(tree: ast.Module) -> dict[str, set[str]]:
    """{module: names} given to lazy_exports."""
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "lazy_exports"
        ):
            return {m: set(names) for m, names in ast.literal_eval(node.args[1]).items()}
    raise AssertionError("no lazy_exports(...) call")


@pytest.mark.parametrize("package", PACKAGES)
def test_init_says_in_two_lines_what_the_package_owns(package: str) -> None:
    doc = ast.get_docstring(init_tree(package), clean=True)
    assert doc, f"{package}/__init__.py has no docstring"
    assert len(doc.splitlines()) == 2, f"{package}/__init__.py: two lines, not:\n{doc}"


@pytest.mark.parametrize("package", PACKAGES)
def test_all_names_resolve(package: str) -> None:
    module = importlib.import_module(f"{PREFIX}.{package}")
    names = module.__all__
    assert names == sorted(names) and len(set(names)) == len(names)
    # A name of one of its modules would be shadowed by the module once imported
    # (core.compose.compose): such a function is imported from its module.
    assert not {n for n in names if (ORCHESTRATOR / package / f"{n}.py").exists()}
    for name in names:
        assert getattr(module, name) is not None
    assert set(names) <= set(dir(module))


@pytest.mark.parametrize("package", sorted(set(PACKAGES) - EAGER))
def test_lazy_map_type_checking_imports_and_all_agree(package: str) -> None:
    tree = init_tree(package)
    lazy, typed = lazy_map(tree), type_checking_imports(tree)
    assert lazy == typed, f"{package}/__init__.py: lazy_exports and TYPE_CHECKING differ"
    module = importlib.import_module(f"{PREFIX}.{package}")
    assert sorted(n for names in lazy.values() for n in names) == module.__all__
    for source, names in lazy.items():
        defining = importlib.import_module(f"{PREFIX}.{package}.{source}")
        for name in names:
            assert getattr(module, name) is getattr(defining, name), (package, source, name)


@cache
def outside_imports() -> list[tuple[str, str, str, str]]:
    return list(_outside_imports())


def _outside_imports() -> Iterator[tuple[str, str, str, str]]:
    """(package, module, name, where) of each `from distillery.orchestrator.PKG.MOD import
    NAME` outside PKG: in Python (ast) and in the Markdown of the manual, README and
    CONTRIBUTING. A package's __init__ importing core's lazy_exports is machinery, not a use."""
    files = [
        p
        for folder in ("orchestrator", "workers", "tests", "bench", "distillery", "scripts")
        for p in (REPO_ROOT / folder).rglob("*.py")
        if not p.is_symlink() and "__pycache__" not in p.parts
    ]
    for path in files:
        rel = path.relative_to(REPO_ROOT)
        if rel.parts[0] == "orchestrator" and rel.name == "__init__.py":
            continue
        with warnings.catch_warnings():  # vendored reference code's escape sequences
            warnings.simplefilter("ignore", SyntaxWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PREFIX + "."):
                parts = node.module.split(".") if node.module else []
                if len(parts) < 4 or parts[2] not in PACKAGES:
                    continue
                if rel.parts[0] == "orchestrator" and rel.parts[1] == parts[2]:
                    continue  # inside the package
                for alias in node.names:
                    yield parts[2], parts[3], alias.name, f"{rel}:{node.lineno}"
    pattern = re.compile(r"from distillery\.orchestrator\.(\w+)\.(\w+)[.\w]* import ([\w, ()\n]+)")
    pages = [
        REPO_ROOT / "README.md",
        REPO_ROOT / "CONTRIBUTING.md",
        *(REPO_ROOT / "docs").rglob("*.md"),
    ]
    for page in pages:
        for m in pattern.finditer(page.read_text()):
            for name in re.split(r"[,\s()]+", m.group(3)):
                if name:
                    yield m.group(1), m.group(2), name, str(page.relative_to(REPO_ROOT))


def test_every_name_imported_from_outside_is_exported() -> None:
    missing = []
    seen = 0
    for package, module, name, where in outside_imports():
        seen += 1
        if name.startswith("_") or (package, module, name) in SHADOWED:
            continue  # a test's look inside a module; a same-named command
        if (ORCHESTRATOR / package / module / "__init__.py").exists():
            continue
        if (ORCHESTRATOR / package / f"{name}.py").exists():
            continue  # core.compose.compose: the package's attribute is the module
        exported = importlib.import_module(f"{PREFIX}.{package}")
        defining = importlib.import_module(f"{PREFIX}.{package}.{module}")
        if isinstance(getattr(defining, name, None), type(sys)):
            continue  # a module
        if name not in exported.__all__ or getattr(exported, name) is not getattr(defining, name):
            missing.append(f"{where}: {package}.{module}.{name} is not in {package}.__all__")
    assert seen > 100  # the scan reads the imports
    assert missing == []


def test_shadowed_names_are_still_imported() -> None:
    used = {(p, m, n) for p, m, n, _ in outside_imports()}
    assert set(SHADOWED) <= used


def test_importing_a_package_imports_none_of_its_modules() -> None:
    """Importing every package (the command line's `distillery.orchestrator.cli` first)
    imports no module of a lazy package but core's exports helper, and none of Hydra,
    MLflow, Ray, pandas or pyarrow."""
    code = (
        "import json, sys\n"
        f"for p in {PACKAGES!r}:\n"
        f"    __import__('{PREFIX}.' + p)\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    loaded = set(json.loads(out.stdout))
    lazy_modules = {
        m
        for m in loaded
        for p in set(PACKAGES) - EAGER
        if m.startswith(f"{PREFIX}.{p}.") and m != f"{PREFIX}.core.exports"
    }
    assert lazy_modules == set()
    assert not loaded & {"hydra", "mlflow", "ray", "pandas", "pyarrow"}


def test_a_name_read_once_is_kept(tmp_path: Path) -> None:
    state = importlib.import_module(f"{PREFIX}.state")
    ledger = state.Ledger
    assert vars(state)["Ledger"] is ledger  # the second read is a plain attribute
    with pytest.raises(AttributeError, match="has no attribute 'Ledgerr'"):
        _ = state.Ledgerr
