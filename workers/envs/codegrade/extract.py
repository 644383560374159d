"""The program a reply holds, as EvalPlus's sanitizer reads it (evalplus/sanitize.py,
`sanitize`), rebuilt on Python's own `ast` instead of tree-sitter:

1. `code_extract`: the longest run of consecutive lines (by non-empty lines) that
   parses as Python: the code block of a chat reply, without its prose and fences;
2. from it, the import statements, then the first definition of each name — a class,
   a function that returns something, or an assignment — that the entry point
   reaches through the names it uses (all of them without an entry point): test
   code, prints and examples the model added are dropped;
3. if nothing is left, the longest parsing run itself.

Nothing here runs the code: `ast.parse` only (the sandbox runs it). The search of step
1 is quadratic in the number of lines; it stops after `MAX_PARSES` parses and keeps
the best run found so far (ours: a reply of a few hundred lines of prose and broken
code would otherwise cost minutes; a reply whose code parses takes one parse).
Known difference from tree-sitter's reading: decorated definitions are dropped, as
EvalPlus drops them (tree-sitter files them under another node type).
"""

from __future__ import annotations

import ast
import warnings

# Parsing a program warns about its own oddities (invalid escapes in non-raw strings):
# the program's business, not the grader's log.
warnings.filterwarnings("ignore", category=SyntaxWarning, module="<unknown>")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="<unknown>")

MAX_PARSES = 2000
MAX_REPLY_CHARS = 200_000  # longer replies are cut to this before the search (ours)


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return False
    return True


def code_extract(text: str) -> str:
    """The longest run of lines of `text` that parses (most non-empty lines)."""
    lines = text[:MAX_REPLY_CHARS].split("\n")
    filled = [1 if line.strip() else 0 for line in lines]
    suffix = [0] * (len(lines) + 1)  # non-empty lines from i to the end
    for i in range(len(lines) - 1, -1, -1):
        suffix[i] = suffix[i + 1] + filled[i]
    best, span, parses = 0, (0, -1), 0
    for i in range(len(lines)):
        if suffix[i] <= best or parses >= MAX_PARSES:
            break
        for j in range(len(lines) - 1, i, -1):
            count = suffix[i] - suffix[j + 1]
            if count <= best or parses >= MAX_PARSES:
                break
            parses += 1
            if _parses("\n".join(lines[i : j + 1])):
                best, span = count, (i, j)
                break
    return "\n".join(lines[span[0] : span[1] + 1])


def _identifiers(node: ast.AST) -> set[str]:
    names: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            names.add(sub.attr)
        elif isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(sub.name)
        elif isinstance(sub, (ast.arg, ast.keyword)) and sub.arg:  # None: a **mapping
            names.add(sub.arg)
    return names


def _returns(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Return) for sub in ast.walk(node))


def _assigned_name(node: ast.Assign | ast.AnnAssign) -> str | None:
    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
    return target.id if isinstance(target, ast.Name) else None


def _target_code(code: str, entry_point: str | None) -> str:
    code = code_extract(code)
    try:
        module = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ""
    imports: list[ast.stmt] = []
    definitions: list[tuple[str | None, ast.stmt]] = []
    seen: set[str | None] = set()
    for node in module.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imports.append(node)
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.decorator_list:
                continue  # tree-sitter's decorated_definition: not kept by EvalPlus
            if isinstance(node, ast.ClassDef) or _returns(node):
                name: str | None = node.name
            else:
                continue
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            name = _assigned_name(node)
        else:
            continue
        if name in seen:
            continue  # the first definition of a name is kept, as EvalPlus keeps it
        seen.add(name)
        definitions.append((name, node))
    if entry_point:
        uses = {name: _identifiers(node) for name, node in definitions if name}
        reachable, queue = {entry_point}, [entry_point]
        while queue:
            for used in uses.get(queue.pop(0), ()):
                if used not in reachable:
                    reachable.add(used)
                    queue.append(used)
        definitions = [(n, d) for n, d in definitions if n in reachable]
    pieces = [ast.get_source_segment(code, node) or "" for node in imports]
    pieces += [ast.get_source_segment(code, node) or "" for _, node in definitions]
    return "\n".join(pieces)


def sanitize(reply: str, entry_point: str | None = None) -> str:
    """The program of `reply` (see the module docstring); "" when none parses."""
    found = _target_code(reply, entry_point).strip()
    return found or code_extract(reply)


def tested_function(reference_code: str, tests: list[str]) -> str | None:
    """MBPP's entry point (its data names none): the first function the tests call
    that the reference solution defines."""
    try:
        defined = [
            n.name
            for n in ast.parse(reference_code).body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        ]
    except SyntaxError:
        return None
    for test in tests:
        try:
            tree = ast.parse(test)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            called = (
                node.func.id
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                else None
            )
            if called in defined:
                return called
    return defined[0] if defined else None
