"""Plain ``assert f(args) == expected`` tests, evaluated inside the sandbox and compared
outside it (as MBPP+ compares), so that the program decides neither the comparison
nor the verdict.

MBPP's tests and most of HumanEval's ``check`` are lists of such asserts. Run as the
official harnesses run them — the asserts in the program's own process — two cheats
pass: a returned object whose ``__eq__`` is always true, and a program that walks the
stack to the runner's frame and sends a "passed" verdict itself (docs/sandbox.md).
When every statement of a task's tests is such an assert (with literal arguments and
a literal expected value), `plain_asserts` turns them into a `CallTests`: the calls
are made in the sandbox (an ``outputs`` check: the program's entry point on each
argument list), the outputs come back as plain data (`values.py`) and are compared
here with Python's ``==`` on builtin values — what the assert computes for an honest
program (a numpy scalar crosses as its plain value, as it compares under ``==``).

Anything else (a loop, a helper, ``math.isclose``, a non-literal argument, keywords)
is not transformed: `plain_asserts` returns None and the task is checked in-process,
as the official harnesses do (the caller counts it).
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CallTests:
    """The calls of a task's asserts: `inputs[i]` is the i-th assert's argument
    list, `expected[i]` the value it must equal."""

    entry_point: str
    inputs: list[list[Any]]
    expected: list[Any]


class _NotPlain(Exception):  # noqa: N818 - control flow of the parser below
    pass


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _NotPlain from None


def _call_and_value(test: ast.expr, callee: str | None) -> tuple[str, list[Any], Any]:
    """(called name, arguments, expected) of ``callee(args) == expected`` (either side)."""
    if not (
        isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Eq)
    ):
        raise _NotPlain
    left, right = test.left, test.comparators[0]
    if not isinstance(left, ast.Call):
        left, right = right, left
    if not (isinstance(left, ast.Call) and isinstance(left.func, ast.Name)) or left.keywords:
        raise _NotPlain
    name = left.func.id
    if (callee is not None and name != callee) or (callee is None and hasattr(builtins, name)):
        raise _NotPlain
    if any(isinstance(a, ast.Starred) for a in left.args):
        raise _NotPlain
    return name, [_literal(a) for a in left.args], _literal(right)


def _asserts(body: list[ast.stmt], callee: str | None) -> tuple[str | None, list, list]:
    names, inputs, expected = set(), [], []
    for statement in body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring or a bare constant
        if not isinstance(statement, ast.Assert):
            raise _NotPlain
        if isinstance(statement.test, ast.Constant) and statement.test.value is True:
            continue  # HumanEval's `assert True, "..."`
        name, args, value = _call_and_value(statement.test, callee)
        names.add(name)
        inputs.append(args)
        expected.append(value)
    if len(names) > 1 or not inputs:
        raise _NotPlain
    return (names.pop() if names else None), inputs, expected


def plain_asserts(tests: str) -> CallTests | None:
    """MBPP's test lines (``assert f(...) == ...``, one function throughout), as
    calls; None when any statement is something else."""
    try:
        tree = ast.parse(tests)
        name, inputs, expected = _asserts(tree.body, None)
    except (SyntaxError, _NotPlain, RecursionError, MemoryError, ValueError):
        return None
    assert name is not None  # _asserts refuses a test without a call
    return CallTests(name, inputs, expected)


def plain_check(test: str, entry_point: str) -> CallTests | None:
    """HumanEval's test code (``METADATA`` and ``def check(candidate):`` holding only
    ``assert candidate(...) == ...`` lines), as calls of `entry_point`; None when it
    is anything else."""
    try:
        tree = ast.parse(test)
        checks = []
        for statement in tree.body:
            if isinstance(statement, ast.FunctionDef) and statement.name == "check":
                checks.append(statement)
            elif not _is_metadata(statement) and not _is_constant(statement):
                return None
        if len(checks) != 1 or checks[0].decorator_list:
            return None
        arguments = checks[0].args
        if len(arguments.args) != 1 or arguments.vararg or arguments.kwonlyargs or arguments.kwarg:
            return None
        _, inputs, expected = _asserts(checks[0].body, arguments.args[0].arg)
    except (SyntaxError, _NotPlain, RecursionError, MemoryError, ValueError):
        return None
    return CallTests(entry_point, inputs, expected)


def _is_constant(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _is_metadata(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.Assign):
        return False
    targets = statement.targets
    return len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id == "METADATA"


def same(output: Any, expected: Any) -> bool:
    """The assert's ``==`` on builtin values (never a program's object: `output` was
    rebuilt from plain data); an error in the comparison is a mismatch."""
    try:
        return bool(output == expected)
    except Exception:  # noqa: BLE001 - e.g. comparing an array-like placeholder
        return False
