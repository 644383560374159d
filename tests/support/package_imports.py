"""The imports between the orchestrator's packages, read from the source with `ast`.

Every import statement of every module counts, wherever it stands: at the top, inside a
function (a lazy import runs as surely as a top one, only later), or under
`if TYPE_CHECKING:` (never run, so it cannot make an import cycle, but it is still a
dependency of the code's meaning; such an import is marked `type_only`). Used by
tests/orchestrator/test_layering.py (imports go downward) and test_development_map.py
(the manual's picture of the packages).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

PREFIX = "distillery.orchestrator"


@dataclass(frozen=True)
class PackageImport:
    """One import statement of module `module` (path under the orchestrator root) that
    reaches package `target` from package `source`."""

    source: str
    target: str
    module: str
    line: int
    statement: str  # the imported module, as written (resolved if relative)
    lazy: bool  # inside a function or method
    type_only: bool  # under `if TYPE_CHECKING:`

    def __str__(self) -> str:
        how = "type-only " if self.type_only else "lazy " if self.lazy else ""
        return f"{self.module}:{self.line}: {how}import of {self.statement} ({self.source} -> {self.target})"


def packages(root: Path) -> list[str]:
    """The orchestrator's packages: the folders of `root` with an `__init__.py`."""
    return sorted(p.parent.name for p in root.glob("*/__init__.py"))


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


class _Imports(ast.NodeVisitor):
    def __init__(self, dotted: str, is_package: bool) -> None:
        self.dotted = dotted  # the module's own dotted name
        self.is_package = is_package
        self.found: list[tuple[str, int, bool, bool]] = []
        self._functions = 0
        self._type_checking = 0

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = _function  # noqa: N815

    def visit_If(self, node: ast.If) -> None:
        if _is_type_checking(node.test):
            self._type_checking += 1
            for child in node.body:
                self.visit(child)
            self._type_checking -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def _add(self, module: str, line: int) -> None:
        self.found.append((module, line, self._functions > 0, self._type_checking > 0))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:  # relative: resolved against this module's package
            base = self.dotted.split(".")
            drop = node.level - 1 if self.is_package else node.level
            base = base[: len(base) - drop]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        if module == PREFIX:  # `from distillery.orchestrator import planning`
            for alias in node.names:
                self._add(f"{PREFIX}.{alias.name}", node.lineno)
        else:
            self._add(module, node.lineno)


def module_imports(root: Path) -> Iterator[PackageImport]:
    """Every import, in the modules of the packages under `root`, of another package."""
    names = set(packages(root))
    for package in sorted(names):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            is_package = path.name == "__init__.py"
            parts = rel.with_suffix("").parts
            dotted = ".".join([PREFIX, *(parts[:-1] if is_package else parts)])
            visitor = _Imports(dotted, is_package)
            visitor.visit(ast.parse(path.read_text(), filename=str(path)))
            for statement, line, lazy, type_only in visitor.found:
                if not statement.startswith(PREFIX + "."):
                    continue
                target = statement.split(".")[2]
                if target != package and target in names:
                    yield PackageImport(package, target, str(rel), line, statement, lazy, type_only)


def package_graph(imports: Iterable[PackageImport]) -> dict[str, set[str]]:
    """Which packages each package imports."""
    graph: dict[str, set[str]] = {}
    for i in imports:
        graph.setdefault(i.source, set()).add(i.target)
    return graph


def find_cycle(graph: Mapping[str, Iterable[str]]) -> list[str] | None:
    """A cycle of `graph` (its nodes in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def transitive_reduction(graph: Mapping[str, Iterable[str]]) -> set[tuple[str, str]]:
    """The edges of an acyclic `graph` that no longer path implies: the arrows a picture
    of it needs (every other import follows them)."""

    def reachable(start: str, skip: tuple[str, str]) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            node = todo.pop()
            for nxt in graph.get(node, ()):
                if (node, nxt) != skip and nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        return seen

    return {
        (a, b) for a, targets in graph.items() for b in targets if b not in reachable(a, (a, b))
    }
