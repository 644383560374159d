"""The orchestrator's packages import only downward: a package may import from the
packages of lower layers, never from its own layer's others or from above, so there is
no import cycle between packages and each one can be read knowing only those below it.

Every import counts (tests/support/package_imports.py): top-level, lazy (inside a
function: it runs as surely as a top one, only later, and hiding an upward dependency in
a function does not make it go away) and type-only (`if TYPE_CHECKING:`). A type-only
import never runs, so it cannot make a cycle; the only upward ones allowed are the named
exceptions below, each with its reason, and an exception no import needs any more fails
too (it would silently allow a new one).

The order, lowest first (LAYERS), is what the real imports say, each layer argued
beside it; docs/development.md draws it (test_development_map.py keeps the picture true).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support import REPO_ROOT
from tests.support.package_imports import (
    PackageImport,
    find_cycle,
    module_imports,
    package_graph,
    packages,
)

ORCHESTRATOR = REPO_ROOT / "orchestrator"

LAYERS: tuple[tuple[str, ...], ...] = (
    # The typed run config, evaluation protocols, UserError, statistics: imports no other
    # package (every package reads the config, so it is the floor).
    ("core",),
    # What a stage is (identity, key, the Stage contract): at runtime it imports nothing
    # of the orchestrator (its bank source names core's config, type-only), so state,
    # planning and the plugins' stage kinds can all build on it.
    ("stages",),
    # The files under the output root: the ledger records stages' outputs by StageKey
    # (stages); locks raise core's UserError.
    ("state",),
    # The stage graph and the --plan checks: builds stage nodes (stages) and reads the
    # ledger (state) to say what is cached.
    ("planning",),
    # Runs the planned graph (planning's StageGraph, server keys) and writes the ledger.
    ("execution",),
    # MLflow and the sweep's tables: logs what execution produced (it reads the Sweep,
    # its infrastructure counts and GPUs), so it sits above execution.
    ("tracking",),
    # Three users of everything below, independent of each other: the report reads the
    # sweep's tables (state) and links runs (tracking); the driver plans, locks, executes
    # and tracks a sweep; the cluster path plans a sweep to submit it.
    ("report", "driver", "cluster"),
    # The command line routes to all of them.
    ("cli",),
)

# Type-only imports that point upward, by (importer, imported): each is a name in a
# signature, never run, and moving it down would cost more than it explains.
TYPE_ONLY_UPWARD: dict[tuple[str, str], str] = {
    ("stages", "execution"): (
        "Stage.run(sweep: Sweep, prefix) is the stage contract's double dispatch: a kind "
        "is handed the running sweep (play, memory, ledger, servers) it runs in; stages "
        "below execution keeps plugins' kinds importable without the executor"
    ),
    ("stages", "state"): (
        "Stage.status / cost_rows / report(ledger: Ledger, ...): a kind reads its own "
        "outputs from the ledger, which itself stores records keyed by StageKey (state "
        "imports stages at runtime)"
    ),
}


def rank_of(layers: tuple[tuple[str, ...], ...]) -> dict[str, int]:
    return {package: i for i, layer in enumerate(layers) for package in layer}


def violations(
    imports: list[PackageImport],
    layers: tuple[tuple[str, ...], ...],
    exceptions: dict[tuple[str, str], str],
) -> list[str]:
    """Every import that does not go to a lower layer (and is not a named type-only
    exception), then every exception no import needs."""
    rank = rank_of(layers)
    bad = []
    used: set[tuple[str, str]] = set()
    for i in imports:
        if rank[i.target] < rank[i.source]:
            continue
        if i.type_only and (i.source, i.target) in exceptions:
            used.add((i.source, i.target))
            continue
        where = "in its own layer" if rank[i.target] == rank[i.source] else "above it"
        bad.append(f"{i}: {i.target} is {where}")
    bad += [
        f"exception {pair} names no upward type-only import any more: remove it"
        for pair in exceptions
        if pair not in used
    ]
    return bad


def runtime_cycle(imports: list[PackageImport]) -> list[str] | None:
    return find_cycle(package_graph(i for i in imports if not i.type_only))


def test_layers_name_every_package_once() -> None:
    declared = [p for layer in LAYERS for p in layer]
    assert len(declared) == len(set(declared))
    assert sorted(declared) == packages(ORCHESTRATOR), (
        "tests/orchestrator/test_layering.py's LAYERS must place every orchestrator "
        "package (and docs/development.md draw it)"
    )


def test_imports_go_only_downward() -> None:
    imports = list(module_imports(ORCHESTRATOR))
    assert imports  # the scan reads the packages' modules
    assert any(i.lazy for i in imports)  # function-level imports are read too
    assert violations(imports, LAYERS, TYPE_ONLY_UPWARD) == []


def test_no_import_cycle_between_packages() -> None:
    assert runtime_cycle(list(module_imports(ORCHESTRATOR))) is None


# -- the check can fail ----------------------------------------------------------------


@pytest.fixture
def orchestrator_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "orchestrator"
    shutil.copytree(ORCHESTRATOR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def plant(path: Path, code: str) -> int:
    """Appends `code` to `path`; the line number of its first line."""
    text = path.read_text()
    path.write_text(text + "\n" + code)
    return text.count("\n") + 2


def test_a_planted_lazy_upward_import_fails(orchestrator_copy: Path) -> None:
    line = plant(
        orchestrator_copy / "state" / "locks.py",
        "def _upward():\n    from distillery.orchestrator.tracking.tracker import Tracker\n"
        "    return Tracker\n",
    )
    found = violations(list(module_imports(orchestrator_copy)), LAYERS, TYPE_ONLY_UPWARD)
    assert found == [
        f"state/locks.py:{line + 1}: lazy import of distillery.orchestrator.tracking.tracker "
        "(state -> tracking): tracking is above it"
    ]


def test_a_planted_sibling_import_fails(orchestrator_copy: Path) -> None:
    plant(orchestrator_copy / "report" / "cli.py", "import distillery.orchestrator.driver.run\n")
    found = violations(list(module_imports(orchestrator_copy)), LAYERS, TYPE_ONLY_UPWARD)
    assert len(found) == 1 and "(report -> driver): driver is in its own layer" in found[0]


def test_an_unlisted_type_only_upward_import_fails(orchestrator_copy: Path) -> None:
    plant(
        orchestrator_copy / "core" / "errors.py",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from distillery.orchestrator import planning\n",
    )
    found = violations(list(module_imports(orchestrator_copy)), LAYERS, TYPE_ONLY_UPWARD)
    assert len(found) == 1 and "type-only import of distillery.orchestrator.planning" in found[0]


def test_a_stale_exception_fails(orchestrator_copy: Path) -> None:
    imports = list(module_imports(orchestrator_copy))
    stale = {**TYPE_ONLY_UPWARD, ("core", "cli"): "no longer needed"}
    assert violations(imports, LAYERS, stale) == [
        "exception ('core', 'cli') names no upward type-only import any more: remove it"
    ]


def test_a_planted_cycle_is_found(orchestrator_copy: Path) -> None:
    plant(
        orchestrator_copy / "stages" / "kinds.py",
        "def _cycle():\n    from distillery.orchestrator.state.ledger import Ledger\n"
        "    return Ledger\n",
    )
    cycle = runtime_cycle(list(module_imports(orchestrator_copy)))
    assert cycle is not None and cycle[0] == cycle[-1]
    assert set(cycle) == {"stages", "state"}


def test_find_cycle_on_synthetic_graphs() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"a"}}) == ["a", "a"]


def test_relative_and_package_imports_are_read(tmp_path: Path) -> None:
    for package in ("low", "high"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "low" / "a.py").write_text(
        "from ..high import b\nfrom distillery.orchestrator import high\n"
    )
    found = {(i.source, i.target, i.statement) for i in module_imports(tmp_path)}
    assert found == {
        ("low", "high", "distillery.orchestrator.high"),
    }
