#!/usr/bin/env python3
"""Rewrite imports and mentions of moved orchestrator modules (issue 32).

    python issue32-rewrite.py MOVES.tsv [FILE ...]     # default: every tracked text file

MOVES.tsv: one `old.dotted.path<TAB>new.dotted.path` a line (# comments allowed). A row
whose old path's parent is itself a moved module is a NAME that moved out of that module
(e.g. distillery.orchestrator.cli.compose -> distillery.orchestrator.core.compose.compose).

What is rewritten, in each file:
  * Python `from X import a, b` statements (re-grouped per new module; a statement
    whose names went to two modules becomes two statements), including
    `from distillery.orchestrator import mod [as m]`;
  * any other dotted mention (strings for monkeypatch/mock.patch, `import X`, comments,
    docs, entry points): `distillery.orchestrator.old[.rest]`;
  * file paths `orchestrator/old.py` in prose.
`python -m distillery.orchestrator.cli` is kept (the cli package has a __main__).
Run `ruff check --fix --select I` and `ruff format` on the changed Python files after.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = "distillery.orchestrator"
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yaml", ".yml", ".sh", ".cfg", ".txt", ".ini"}


def load(tsv: str) -> tuple[dict[str, str], dict[str, str]]:
    rows = {}
    for line in Path(tsv).read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        old, new = line.split("\t")[:2]
        rows[old.strip()] = new.strip()
    modules = {o: n for o, n in rows.items() if o.rsplit(".", 1)[0] not in rows}
    names = {o: n for o, n in rows.items() if o not in modules}
    return modules, names


def dotted_rewriter(modules: dict[str, str], names: dict[str, str]):
    keys = sorted({*modules, *names}, key=len, reverse=True)
    pattern = re.compile(
        r"(?<![\w.])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w])"
    )

    def sub(text: str) -> str:
        def one(m: re.Match[str]) -> str:
            key = m.group(1)
            before = text[max(0, m.start() - 3) : m.start()]
            new = names.get(key) or modules[key]
            if re.match(re.escape(new) + r"(?![\w])", text[m.start() :]):
                return key  # already the new path (a package named as the old module)
            if before == "-m " and key == f"{ROOT}.cli" and new.startswith(f"{ROOT}.cli."):
                return key  # python -m distillery.orchestrator.cli: the package's __main__
            return new

        return pattern.sub(one, text)

    return sub


def path_rewriter(modules: dict[str, str]):
    files = {}
    for old, new in modules.items():
        if not old.startswith(ROOT + "."):
            continue
        o = old[len(ROOT) + 1 :].replace(".", "/")
        n = new[len(ROOT) + 1 :].replace(".", "/")
        files[o] = n
    if not files:
        return lambda text: text
    pattern = re.compile(
        r"(?<![\w.])orchestrator/("
        + "|".join(re.escape(k) for k in sorted(files, key=len, reverse=True))
        + r")\.py\b"
    )
    return lambda text: pattern.sub(lambda m: f"orchestrator/{files[m.group(1)]}.py", text)


def _alias(a: ast.alias) -> str:
    return a.name + (f" as {a.asname}" if a.asname else "")


def import_edits(
    source: str, modules: dict[str, str], names: dict[str, str]
) -> list[tuple[int, int, list[str]]]:
    """(first line, last line (1-based, inclusive), replacement lines) per import
    statement that changes."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    edits = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
            continue
        groups: dict[str, list[str]] = {}
        changed = False
        if node.module == ROOT:
            for a in node.names:
                new = modules.get(f"{ROOT}.{a.name}")
                if new:
                    parent, leaf = new.rsplit(".", 1)
                    asname = a.asname or (a.name if leaf != a.name else None)
                    groups.setdefault(parent, []).append(leaf + (f" as {asname}" if asname else ""))
                    changed = True
                else:
                    groups.setdefault(ROOT, []).append(_alias(a))
        elif node.module in modules or any(
            f"{node.module}.{a.name}" in names for a in node.names
        ):
            for a in node.names:
                full = f"{node.module}.{a.name}"
                if full in names:
                    target, leaf = names[full].rsplit(".", 1)
                    asname = a.asname or (a.name if leaf != a.name else None)
                    groups.setdefault(target, []).append(leaf + (f" as {asname}" if asname else ""))
                else:
                    groups.setdefault(modules.get(node.module, node.module), []).append(_alias(a))
            changed = True
        if not changed:
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        original = lines[first - 1 : last]
        indent = re.match(r"\s*", original[0]).group(0)  # type: ignore[union-attr]
        comments = [c for line in original for c in re.findall(r"#.*$", line)]
        noqa = next((c for c in comments if c.startswith("# noqa")), "")
        other = next((c for c in comments if not c.startswith("# noqa")), "")
        out = []
        for i, (module, aliases) in enumerate(groups.items()):
            comment = noqa or (other if i == 0 else "")
            text = f"{indent}from {module} import {', '.join(aliases)}"
            if len(text) + len(comment) + 2 > 100:
                body = "".join(f"{indent}    {a},\n" for a in aliases)
                text = f"{indent}from {module} import ({'  ' + comment if comment else ''}\n{body}{indent})"
                out.append(text)
                continue
            out.append(text + (f"  {comment}" if comment else ""))
        edits.append((first, last, out))
    return sorted(edits)


def rewrite(source: str, suffix: str, modules, names) -> str:
    sub = dotted_rewriter(modules, names)
    paths = path_rewriter(modules)
    edits = import_edits(source, modules, names) if suffix == ".py" else []
    lines = source.splitlines(keepends=True)
    out: list[str] = []
    at = 1
    for first, last, new in edits:
        out.append(paths(sub("".join(lines[at - 1 : first - 1]))))
        out.append("\n".join(new) + "\n")
        at = last + 1
    out.append(paths(sub("".join(lines[at - 1 :]))))
    return "".join(out)


def main(argv: list[str]) -> int:
    modules, names = load(argv[1])
    files = argv[2:] or subprocess.run(
        ["git", "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    changed = []
    for name in files:
        path = Path(name)
        if path.suffix not in TEXT_SUFFIXES or not path.is_file() or path.is_symlink():
            continue
        try:
            source = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite(source, path.suffix, modules, names)
        if new != source:
            path.write_text(new)
            changed.append(name)
    print("\n".join(changed))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
