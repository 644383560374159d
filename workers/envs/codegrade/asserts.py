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

Besides ``==``, ``math.isclose(f(args), value, rel_tol=.., abs_tol=..)``, ``assert
f(args)`` and ``assert not f(args)`` are compared outside the same way. Anything else
(a loop, a helper, ``set(f(args)) == ...``, a non-literal argument, keywords) is not
transformed: `plain_asserts` returns None and the task is checked in-process,
as the official harnesses do (the caller counts it).
"""

from __future__ import annotations

import ast
import builtins
import math
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CallTests:
    """The calls of a task's asserts: `inputs[i]` is the i-th assert's argument
    list, `expected[i]` the value its output is compared with, by `comparisons[i]`
    (``eq``: ``==``; ``isclose``: ``math.isclose`` with `options[i]`; ``truthy`` /
    ``falsy``: ``assert f(...)`` / ``assert not f(...)``)."""

    entry_point: str
    inputs: list[list[Any]]
    expected: list[Any]
    comparisons: list[str] = field(default_factory=list)  # empty: all ``eq``
    options: list[dict[str, Any]] = field(default_factory=list)

    def holds(self, index: int, output: Any) -> bool:
        """Whether the `index`-th assert holds for `output` (rebuilt from plain data:
        never a program's object); an error in the comparison is a failure."""
        comparison = self.comparisons[index] if self.comparisons else "eq"
        try:
            if comparison == "isclose":
                return math.isclose(output, self.expected[index], **self.options[index])
            if comparison == "truthy":
                return bool(output)
            if comparison == "falsy":
                return not output
            return bool(output == self.expected[index])
        except Exception:  # noqa: BLE001 - e.g. isclose of a placeholder
            return False

    @property
    def only_equality(self) -> bool:
        return all(c == "eq" for c in self.comparisons)


class _NotPlain(Exception):  # noqa: N818 - control flow of the parser below
    pass


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _NotPlain from None


def _call(node: ast.expr, callee: str | None) -> tuple[str, list[Any]]:
    """(name, arguments) of a call of `callee` (or, without one, of any name that is
    not a builtin) with literal positional arguments."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)) or node.keywords:
        raise _NotPlain
    name = node.func.id
    if (callee is not None and name != callee) or (callee is None and hasattr(builtins, name)):
        raise _NotPlain
    if any(isinstance(a, ast.Starred) for a in node.args):
        raise _NotPlain
    return name, [_literal(a) for a in node.args]


def _assertion(test: ast.expr, callee: str | None) -> tuple[str, list[Any], str, Any, dict]:
    """(called name, arguments, comparison, expected, options) of one assert's test:
    ``f(args) == value`` (either side), ``math.isclose(f(args), value, rel_tol=..,
    abs_tol=..)``, ``f(args)`` or ``not f(args)``."""
    if isinstance(test, ast.Compare):
        if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
            raise _NotPlain
        left, right = test.left, test.comparators[0]
        if not isinstance(left, ast.Call):
            left, right = right, left
        name, args = _call(left, callee)
        return name, args, "eq", _literal(right), {}
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        name, args = _call(test.operand, callee)
        return name, args, "falsy", None, {}
    if (
        isinstance(test, ast.Call)
        and isinstance(test.func, ast.Attribute)
        and isinstance(test.func.value, ast.Name)
        and (test.func.value.id, test.func.attr) == ("math", "isclose")
    ):
        if len(test.args) != 2 or any(k.arg not in ("rel_tol", "abs_tol") for k in test.keywords):
            raise _NotPlain
        name, args = _call(test.args[0], callee)
        options = {str(k.arg): _literal(k.value) for k in test.keywords}
        return name, args, "isclose", _literal(test.args[1]), options
    name, args = _call(test, callee)
    return name, args, "truthy", None, {}


def _asserts(body: list[ast.stmt], callee: str | None) -> CallTests:
    names: set[str] = set()
    inputs, expected, comparisons, options = [], [], [], []
    for statement in body:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring or a bare constant
        if not isinstance(statement, ast.Assert):
            raise _NotPlain
        if isinstance(statement.test, ast.Constant) and statement.test.value is True:
            continue  # HumanEval's `assert True, "..."`
        name, args, comparison, value, extra = _assertion(statement.test, callee)
        names.add(name)
        inputs.append(args)
        expected.append(value)
        comparisons.append(comparison)
        options.append(extra)
    if len(names) != 1:
        raise _NotPlain
    return CallTests(names.pop(), inputs, expected, comparisons, options)


def plain_asserts(tests: str) -> CallTests | None:
    """MBPP's test lines (asserts of one function throughout: see `_assertion`), as
    calls; None when any statement is something else."""
    try:
        return _asserts(ast.parse(tests).body, None)
    except (SyntaxError, _NotPlain, RecursionError, MemoryError, ValueError):
        return None


def plain_check(test: str, entry_point: str) -> CallTests | None:
    """HumanEval's test code (``METADATA`` and ``def check(candidate):`` holding only
    asserts of ``candidate(...)``), as calls of `entry_point`; None when it is
    anything else."""
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
        calls = _asserts(checks[0].body, arguments.args[0].arg)
    except (SyntaxError, _NotPlain, RecursionError, MemoryError, ValueError):
        return None
    return CallTests(entry_point, calls.inputs, calls.expected, calls.comparisons, calls.options)


def _is_constant(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def _is_metadata(statement: ast.stmt) -> bool:
    if not isinstance(statement, ast.Assign):
        return False
    targets = statement.targets
    return len(targets) == 1 and isinstance(targets[0], ast.Name) and targets[0].id == "METADATA"
