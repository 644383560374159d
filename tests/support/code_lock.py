"""The code that produces each stage's output, pinned beside the version its keys carry.

A stage's key holds hand-set versions for its code (a stage kind's and a memory
method's `code_version`, AMD's builder version, a benchmark's fingerprint), never the
code itself: a refactor must not re-run a paper's sweep. The risk is the other way: a
change of behaviour that leaves every version as it was reuses stale results. This lock
closes it. For every unit of the project whose code produces stage outputs (each stage
kind, memory method and benchmark the project registers), `code_lock.json` holds:

- `version`: what its keys carry for its code (as above);
- `modules`: the modules its code is: the unit's own module, the modules an
  episode-playing kind runs episodes with (`workers.episodes`) or an outcome-driven
  kind runs its program with (`ordered_stage`, `ordered_run`), and every module of
  `distillery.workers` (what runs episodes and builds banks) they import, directly or
  not, at module level or inside a function;
- per module, a digest of its code with docstrings, comments and formatting left out
  (the AST, positions dropped).

`tests/orchestrator/test_code_lock.py` fails when a unit's code or version differs from
the lock. Renewing it is a decision, made per unit:

    python -m tests.support.code_lock --renew [--keep UNIT ...]

- the version was raised with the change (keys move, results are recomputed): renewed;
- the version was kept: the unit must be named with `--keep` (a name or a pattern,
  `'method:*'`; its outputs are declared the same: say why in the commit), else
  renewal refuses and names it.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import importlib.util
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCK = Path(__file__).resolve().parents[1] / "orchestrator" / "code_lock.json"
PROJECT = "distillery."
FOLLOWED = "distillery.workers"  # imports followed: what runs episodes and builds banks
EPISODES = "distillery.workers.episodes"
ORDERED = (
    "distillery.orchestrator.execution.ordered_stage",
    "distillery.orchestrator.execution.ordered_run",
)


def code_digest(source: str) -> str:
    """A digest of `source`'s code: docstrings, comments and formatting do not count."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            node.body = body[1:] or [ast.Pass()]  # type: ignore[attr-defined]
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()[:16]


def _source_file(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


def _module_of(name: str) -> str | None:
    """The project module `name` (a module, or a name inside one) is in."""
    while name.startswith(PROJECT):
        try:
            if _source_file(name) is not None:
                return name
        except (ImportError, ValueError):
            pass
        name = name.rsplit(".", 1)[0]
    return None


def imported(module: str, source: str, is_package: bool) -> set[str]:
    """The project modules `module`'s code imports, anywhere in it."""
    package = module if is_package else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            names = [base, *(f"{base}.{a.name}" for a in node.names)]
        for name in names:
            owner = _module_of(name)
            if owner is not None:
                found.add(owner)
    return found


@dataclass(frozen=True)
class Unit:
    """One thing whose code produces stage outputs: `roots` are its own modules."""

    name: str  # stage:<kind> | method:<kind> | benchmark:<name>
    roots: tuple[str, ...]
    version: str


def modules_of(roots: Iterable[str], digests: dict[str, str]) -> list[str]:
    """The roots and every `distillery.workers` module they import (transitively);
    `digests` is filled with each one's code digest."""
    seen: list[str] = []
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        path = _source_file(module)
        if path is None:
            continue
        seen.append(module)
        source = path.read_text(encoding="utf-8")
        digests.setdefault(module, code_digest(source))
        todo += [
            m
            for m in imported(module, source, path.name == "__init__.py")
            if m.startswith(FOLLOWED) and m not in seen
        ]
    return sorted(seen)


def _module_named(path: Path) -> str:
    """The project module of a file of distillery.workers (a world module's)."""
    import distillery.workers

    package = Path(distillery.workers.__file__).resolve().parent
    relative = path.resolve().relative_to(package).with_suffix("")
    return ".".join(["distillery.workers", *relative.parts])


def _version(*parts: Any) -> str:
    text = json.dumps(parts, sort_keys=True, default=str)
    return parts[0] if len(parts) == 1 and isinstance(parts[0], str) else _short(text)


def _short(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def project_units() -> list[Unit]:
    """Every stage kind, memory method and benchmark the project registers itself
    (another package's plugins pin their own code)."""
    from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage
    from distillery.orchestrator.stages.kinds import STAGE_KINDS, stage_type
    from distillery.workers.envs.registry import BENCHMARKS, benchmark_class
    from distillery.workers.memory.registry import MEMORY_METHODS, memory_method

    units = []
    for kind in sorted(STAGE_KINDS):
        cls = stage_type(kind)
        roots = [cls.__module__]
        if cls.plays_episodes:
            roots.append(EPISODES)
        if issubclass(cls, OrderedEpisodeStage):
            roots += ORDERED
        units.append(Unit(f"stage:{kind}", tuple(roots), cls.code_version))
    for kind in sorted(MEMORY_METHODS):
        method = memory_method(kind)
        build = method.build_fingerprint() if hasattr(method, "build_fingerprint") else None
        version = method.code_version if build is None else _version(method.code_version, build)
        units.append(Unit(f"method:{kind}", (type(method).__module__,), version))
    for name in sorted(BENCHMARKS):
        cls = benchmark_class(name)
        roots = [cls.__module__]
        world = getattr(cls, "world", None)  # run by its venv, never imported: a root
        if world is not None:
            roots.append(_module_named(Path(world)))
        version = _short("\n".join(cls.fingerprint()))
        units.append(Unit(f"benchmark:{name}", tuple(roots), version))
    return units


def current() -> dict[str, Any]:
    """The lock as the code stands: units (version, modules) and module digests."""
    digests: dict[str, str] = {}
    units = {
        u.name: {"version": u.version, "modules": modules_of(u.roots, digests)}
        for u in project_units()
    }
    return {"units": units, "modules": dict(sorted(digests.items()))}


def differences(locked: Mapping[str, Any], now: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per unit whose code or version differs from the lock: which modules changed
    (added, removed or edited), and the version then and now."""
    out: dict[str, dict[str, Any]] = {}
    old_units, new_units = locked.get("units", {}), now["units"]
    for name in sorted(set(old_units) | set(new_units)):
        old, new = old_units.get(name), new_units.get(name)
        if old is None or new is None:
            out[name] = {"unit": "added" if old is None else "removed"}
            continue
        changed = sorted(
            m
            for m in set(old["modules"]) | set(new["modules"])
            if locked["modules"].get(m) != now["modules"].get(m)
            or (m in old["modules"]) != (m in new["modules"])
        )
        if changed or old["version"] != new["version"]:
            out[name] = {"modules": changed, "version": [old["version"], new["version"]]}
    return out


class UndecidedChange(ValueError):
    """A unit's code changed with its version kept, and it was not declared the same."""


def renewed(locked: Mapping[str, Any], now: Mapping[str, Any], keep: Iterable[str]) -> list[str]:
    """What renewing the lock decides, one line per changed unit; raises
    `UndecidedChange` naming each unit whose code changed, version kept, not in `keep`."""
    patterns = list(keep)
    lines, undecided = [], []
    for name, change in differences(locked, now).items():
        if "unit" in change:
            lines.append(f"{name}: {change['unit']}")
            continue
        old, new = change["version"]
        modules = ", ".join(change["modules"]) or "none"
        if old != new:
            lines.append(f"{name}: version {old} -> {new} (its stages recomputed); code: {modules}")
        elif any(fnmatch.fnmatchcase(name, p) for p in patterns):
            lines.append(f"{name}: version {old} kept, outputs declared the same; code: {modules}")
        else:
            undecided.append(f"{name} (code: {modules})")
    if undecided:
        raise UndecidedChange(
            "code changed with its version kept: "
            + "; ".join(undecided)
            + ". Raise the unit's version if what its stages produce changed (a stage "
            "kind's or method's code_version, AMD's BUILDER_VERSION, a benchmark's "
            "fingerprint), or declare it unchanged with --keep UNIT (and say why in the "
            "commit)"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--renew", action="store_true", help="rewrite the lock")
    parser.add_argument(
        "--keep",
        nargs="*",
        default=[],
        help="units (or patterns: 'method:*') whose outputs are unchanged",
    )
    args = parser.parse_args(argv)
    locked = json.loads(LOCK.read_text()) if LOCK.exists() else {"units": {}, "modules": {}}
    now = current()
    try:
        lines = renewed(locked, now, args.keep)
    except UndecidedChange as exc:
        print(f"not renewed: {exc}", file=sys.stderr)
        return 1
    print("\n".join(lines) or "the lock holds the code as it is")
    if args.renew and lines:
        LOCK.write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        print(f"renewed {LOCK}")
    elif lines:
        print("(dry run: --renew writes it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
