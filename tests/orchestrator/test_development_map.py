"""docs/development.md opens with the map of the orchestrator: its mermaid picture shows
every package and the arrows the imports really have (the direct ones: the transitive
reduction of the package graph, the layering test's type-only exceptions left out), and
its walk through one sweep names functions that exist.
"""

from __future__ import annotations

import importlib
import re

import pytest

from tests.orchestrator.test_layering import TYPE_ONLY_UPWARD
from tests.support import REPO_ROOT
from tests.support.package_imports import (
    PREFIX,
    module_imports,
    package_graph,
    packages,
    transitive_reduction,
)

PAGE = REPO_ROOT / "docs" / "development.md"
PACKAGES = packages(REPO_ROOT / "orchestrator")


def section(title: str, text: str | None = None) -> str:
    text = PAGE.read_text() if text is None else text
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def diagram(text: str) -> tuple[set[str], set[tuple[str, str]]]:
    """The nodes and arrows of the map's mermaid picture in the page `text`."""
    found = re.search(r"```mermaid\n(.*?)```", section("The map", text), re.S)
    assert found, "docs/development.md's map has no mermaid picture"
    nodes: set[str] = set()
    arrows: set[tuple[str, str]] = set()
    for line in found.group(1).splitlines():
        line = line.strip()
        if arrow := re.fullmatch(r"(\w+)\s*-->\s*(\w+)", line):
            arrows.add((arrow.group(1), arrow.group(2)))
            nodes.update(arrow.groups())
        elif node := re.match(r"(\w+)\[", line):
            nodes.add(node.group(1))
    return nodes, arrows


def import_arrows() -> set[tuple[str, str]]:
    imports = [
        i
        for i in module_imports(REPO_ROOT / "orchestrator")
        if not (i.type_only and (i.source, i.target) in TYPE_ONLY_UPWARD)
    ]
    return transitive_reduction(package_graph(imports))


def map_problems(text: str, packages: list[str], real: set[tuple[str, str]]) -> list[str]:
    """What the page's picture gets wrong: packages it lacks or invents, arrows it
    lacks or invents."""
    nodes, arrows = diagram(text)
    return [
        *(f"the map lacks package {p}" for p in sorted(set(packages) - nodes)),
        *(f"the map shows {n}, which is no package" for n in sorted(nodes - set(packages))),
        *(f"the map lacks the arrow {a} --> {b}" for a, b in sorted(real - arrows)),
        *(f"the map draws {a} --> {b}, which no import has" for a, b in sorted(arrows - real)),
    ]


def test_the_map_shows_every_package_and_the_imports_the_code_has() -> None:
    assert map_problems(PAGE.read_text(), PACKAGES, import_arrows()) == []


def test_a_stale_map_fails() -> None:
    text = PAGE.read_text()
    assert "    stages --> core\n" in text
    stale = text.replace("    stages --> core\n", "    stages --> state\n")
    assert map_problems(stale, [*PACKAGES, "serving"], import_arrows()) == [
        "the map lacks package serving",
        "the map lacks the arrow stages --> core",
        "the map draws stages --> state, which no import has",
    ]


def test_the_real_arrows_are_the_direct_ones() -> None:
    assert transitive_reduction({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == {
        ("a", "b"),
        ("b", "c"),
    }


def test_the_map_names_the_layers_in_order() -> None:
    from tests.orchestrator.test_layering import LAYERS

    listed = [
        package
        for line in section("The map").splitlines()
        if line.startswith("- ")
        for package in re.findall(r"\*\*(\w+)\*\*", line)
    ]
    assert listed == [p for layer in LAYERS for p in layer]


def walkthrough_names() -> list[str]:
    names = re.findall(r"`((\w+)(?:\.\w+)+)`", section("One sweep, followed through the packages"))
    files = ("md", "py", "csv", "json", "parquet", "png")  # `report.md` names a file
    return [n for n, package in names if package in PACKAGES and n.rsplit(".", 1)[1] not in files]


def test_the_walkthrough_follows_the_packages() -> None:
    names = walkthrough_names()
    assert len(names) > 20
    assert {n.split(".")[0] for n in names} == set(PACKAGES) - {"cluster"}


@pytest.mark.parametrize("name", walkthrough_names())
def test_every_function_the_walkthrough_names_exists(name: str) -> None:
    parts = name.split(".")
    # the longest importable module prefix, then attributes
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join([PREFIX, *parts[:cut]]))
        except ModuleNotFoundError:
            continue
        break
    else:
        raise AssertionError(f"{name}: no such module")
    assert cut >= 2, f"{name}: name it as package.module.function"
    for attr in parts[cut:]:
        assert hasattr(obj, attr), f"docs/development.md names {name}: no {attr}"
        obj = getattr(obj, attr)
