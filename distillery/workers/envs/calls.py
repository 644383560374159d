"""Safe parsing of untrusted model output into validated tool calls.

Model output is never `eval`-ed here. Text is parsed with `ast` only, and a call is
accepted only when it is a plain ``name(...)`` of one of the task's functions whose
arguments are literals (constants, containers of literals, a sign on a number). Each
accepted call is rebuilt as a `ToolCall` from the parsed *values*, so the string later
handed to a benchmark executor is our canonical rendering, never the model's text; and
`check_call` re-parses that rendering before anything runs, so even a hand-built
`ToolCall` cannot smuggle code through.

Rules for the prompt format (``[f(a=1), g()]``):

- Text that does not parse as a Python expression, or parses to something without any
  call in it (prose, ``[]``, a bare string), is an *empty* action: the model is
  talking, which ends the turn as in BFCL.
- Text that parses and contains a call is a call attempt. Each element of the list is
  judged on its own: valid calls run in their order, every forbidden element becomes a
  `RejectedCall` with a reason (mixed lists are *not* all-or-nothing, matching BFCL's
  executor, which runs each decoded call independently). Rejected elements are reported
  to the model, never executed.
- A response with more than `max_calls` elements, or longer than `max_text_chars`, is
  rejected as a whole (one `RejectedCall`): it is pathological, not a plan.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from distillery.workers.envs.base import ParsedAction, RejectedCall, ToolCall


@dataclass(frozen=True)
class CallLimits:
    """Size limits on model output, so hostile or degenerate output stays cheap."""

    max_text_chars: int = 20_000  # one whole response
    max_call_chars: int = 8_000  # one call: its source text, JSON arguments and rendering
    max_calls: int = 32  # calls in one response
    max_depth: int = 8  # container nesting inside one argument
    max_values: int = 2_000  # literal values (all nesting levels) in one call
    max_int_digits: int = 30  # |int| < 10**max_int_digits
    max_raw_chars: int = 300  # how much of a rejected piece is kept for the report


DEFAULT_LIMITS = CallLimits()

_SCALAR_TYPES = (str, int, float, bool, type(None))
_CONTAINER_TYPES = (list, tuple, set)

_FENCE = re.compile(r"^```[\w+-]*[ \t]*\n?(?P<body>.*?)\n?[ \t]*```$", re.DOTALL)
# Cheap test for over-long text: is it trying to call something, or just long prose?
_LOOKS_LIKE_CALL = re.compile(r"^[\[(]?\s*[A-Za-z_][\w.]*\s*\(")

_NOT_LITERAL = {
    ast.Name: "names are not literals (quote strings)",
    ast.Call: "nested calls are not allowed",
    ast.Attribute: "attribute access is not allowed",
    ast.Subscript: "subscripts are not allowed",
    ast.Lambda: "lambdas are not allowed",
    ast.ListComp: "comprehensions are not allowed",
    ast.SetComp: "comprehensions are not allowed",
    ast.DictComp: "comprehensions are not allowed",
    ast.GeneratorExp: "comprehensions are not allowed",
    ast.JoinedStr: "f-strings are not allowed",
    ast.BinOp: "operators are not allowed (write the value itself)",
    ast.BoolOp: "operators are not allowed (write the value itself)",
    ast.Compare: "operators are not allowed (write the value itself)",
    ast.Starred: "* unpacking is not allowed",
    ast.NamedExpr: "assignment expressions are not allowed",
    ast.IfExp: "conditional expressions are not allowed",
    ast.Await: "await is not allowed",
}


class _Rejected(Exception):
    """Internal: one call failed validation; the message is the reason."""


# --------------------------------------------------------------------------- public


def parse_text_calls(
    text: str, allowed: Collection[str], limits: CallLimits = DEFAULT_LIMITS
) -> ParsedAction:
    """BFCL prompt-format output (``[f(a=1), g()]`` or ``f(a=1)``) -> validated calls."""
    if not isinstance(text, str):
        return ParsedAction()
    body = _strip_wrappers(text)
    if len(body) > limits.max_text_chars:
        return _too_long(body, limits)
    tree = _parse_expression(body)
    if tree is None:
        return ParsedAction()
    elements = _call_elements(tree.body)
    if elements is None:
        return ParsedAction()
    if len(elements) > limits.max_calls:
        reason = f"too many calls in one response: {len(elements)} (limit {limits.max_calls})"
        return ParsedAction(rejected=(RejectedCall(_clip(body, limits), reason),))
    calls: list[ToolCall] = []
    rejected: list[RejectedCall] = []
    for node in elements:
        raw = ast.get_source_segment(body, node) or ast.unparse(node)
        try:
            calls.append(_call_from_node(node, raw, allowed, limits))
        except _Rejected as exc:
            rejected.append(RejectedCall(_clip(raw, limits), str(exc)))
    return ParsedAction(calls=tuple(calls), rejected=tuple(rejected))


def parse_native_calls(
    tool_calls: Iterable[Any], allowed: Collection[str], limits: CallLimits = DEFAULT_LIMITS
) -> ParsedAction:
    """OpenAI-style tool calls ``{"id", "name", "arguments"}`` -> validated calls.

    `arguments` is a JSON object string (a dict is accepted too). The nested form
    ``{"id", "function": {"name", "arguments"}}`` is also understood.
    """
    items = list(tool_calls or [])
    if len(items) > limits.max_calls:
        # Every call keeps its id, so each one can still be answered.
        reason = f"too many calls in one response: {len(items)} (limit {limits.max_calls})"
        rejected = tuple(
            RejectedCall(_clip(_native_raw(item), limits), reason, _native_id(item))
            for item in items
        )
        return ParsedAction(rejected=rejected)
    calls: list[ToolCall] = []
    rejected_calls: list[RejectedCall] = []
    for item in items:
        try:
            calls.append(_call_from_native(item, allowed, limits))
        except _Rejected as exc:
            raw = _clip(_native_raw(item), limits)
            rejected_calls.append(RejectedCall(raw, str(exc), _native_id(item)))
    return ParsedAction(calls=tuple(calls), rejected=tuple(rejected_calls))


def check_call(
    call: ToolCall, allowed: Collection[str], limits: CallLimits = DEFAULT_LIMITS
) -> str | None:
    """Why `call` must not run, or None when its canonical source is safe to execute.

    Checks the name, argument names and values, then re-parses `call.source` and
    requires it to be a literal-only call again: this is the guarantee an executor
    that `eval`s the source relies on.
    """
    try:
        _check_call(call, allowed, limits)
    except _Rejected as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ prompt format


def _strip_wrappers(text: str) -> str:
    body = text.strip()
    match = _FENCE.match(body)
    if match:
        body = match.group("body").strip()
    # Single backticks around a call (`f(a=1)`) are formatting, not code.
    return body.strip("`").strip()


def _too_long(body: str, limits: CallLimits) -> ParsedAction:
    if not _LOOKS_LIKE_CALL.match(body):
        return ParsedAction()  # long prose still just ends the turn
    reason = f"response too long: {len(body)} characters (limit {limits.max_text_chars})"
    return ParsedAction(rejected=(RejectedCall(_clip(body, limits), reason),))


def _parse_expression(body: str) -> ast.Expression | None:
    if not body:
        return None
    try:
        return ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _call_elements(node: ast.expr) -> list[ast.expr] | None:
    """The elements of a call attempt, or None when the text is not one."""
    if isinstance(node, ast.Call):
        return [node]
    if isinstance(node, (ast.List, ast.Tuple)):
        if any(_contains_call(elt) for elt in node.elts):
            return list(node.elts)
        return None
    if _contains_call(node):
        return [node]  # e.g. a comprehension of calls: an attempt, rejected below
    return None


def _contains_call(node: ast.AST) -> bool:
    return any(isinstance(sub, ast.Call) for sub in ast.walk(node))


def _call_from_node(
    node: ast.expr, raw: str, allowed: Collection[str], limits: CallLimits
) -> ToolCall:
    if not isinstance(node, ast.Call):
        raise _Rejected(f"not a function call: {_node_kind(node)}")
    if len(raw) > limits.max_call_chars:
        raise _Rejected(f"call too long: {len(raw)} characters (limit {limits.max_call_chars})")
    name = _callee_name(node.func, allowed)
    budget = [limits.max_values]
    for index, arg in enumerate(node.args):
        _require_literal(arg, f"positional argument {index + 1}", 1, budget, limits)
    seen: set[str] = set()
    for kw in node.keywords:
        if kw.arg is None:
            raise _Rejected("** unpacking is not allowed")
        if kw.arg in seen:
            raise _Rejected(f"argument {kw.arg!r} given twice")
        seen.add(kw.arg)
        _require_literal(kw.value, f"argument {kw.arg!r}", 1, budget, limits)
    args = tuple(_literal_value(arg) for arg in node.args)
    kwargs = {kw.arg: _literal_value(kw.value) for kw in node.keywords if kw.arg}
    call = ToolCall(name=name, args=args, kwargs=kwargs)
    _check_call(call, allowed, limits)
    return call


def _callee_name(func: ast.expr, allowed: Collection[str]) -> str:
    if isinstance(func, ast.Attribute):
        raise _Rejected(f"attribute access is not allowed: {_short(ast.unparse(func))}")
    if isinstance(func, ast.Call):
        raise _Rejected("calling the result of a call is not allowed")
    if not isinstance(func, ast.Name):
        raise _Rejected(f"the callee must be a plain function name, not {_node_kind(func)}")
    if func.id not in allowed:
        raise _Rejected(f"unknown function {func.id!r}")
    return func.id


def _require_literal(
    node: ast.expr, where: str, depth: int, budget: list[int], limits: CallLimits
) -> None:
    """Structural check before `ast.literal_eval`, so every rejection has a reason."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _Rejected(f"too many values in one call (limit {limits.max_values})")
    if depth > limits.max_depth:
        raise _Rejected(f"{where}: nesting deeper than {limits.max_depth}")
    if isinstance(node, ast.Constant):
        if type(node.value) not in _SCALAR_TYPES:
            raise _Rejected(f"{where}: {type(node.value).__name__} literals are not allowed")
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = node.operand
        if isinstance(operand, ast.Constant) and type(operand.value) in (int, float):
            return
        raise _Rejected(f"{where}: a sign applies to a number only")
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        for elt in node.elts:
            _require_literal(elt, where, depth + 1, budget, limits)
        return
    if isinstance(node, ast.Dict):
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise _Rejected(f"{where}: ** unpacking is not allowed")
            _require_literal(key, where, depth + 1, budget, limits)
            _require_literal(value, where, depth + 1, budget, limits)
        return
    why = _NOT_LITERAL.get(type(node), f"{_node_kind(node)} is not a literal")
    raise _Rejected(f"{where} is not a literal: {why}")


def _literal_value(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as exc:
        # e.g. an unhashable dict key: structurally literal, but no value exists.
        raise _Rejected(f"invalid literal: {_short(str(exc))}") from None


# ------------------------------------------------------------------- native calls


def _native_parts(item: Any) -> tuple[Any, Any]:
    if not isinstance(item, dict):
        raise _Rejected("malformed tool call: not an object")
    function = item.get("function")
    if isinstance(function, dict):
        return function.get("name"), function.get("arguments")
    return item.get("name"), item.get("arguments")


def _native_id(item: Any) -> str | None:
    call_id = item.get("id") if isinstance(item, dict) else None
    return call_id if isinstance(call_id, str) else None


def _native_raw(item: Any) -> str:
    try:
        name, arguments = _native_parts(item)
    except _Rejected:
        return repr(item)
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, default=repr)
    return f"{name}({arguments})"


def _call_from_native(item: Any, allowed: Collection[str], limits: CallLimits) -> ToolCall:
    name, arguments = _native_parts(item)
    if not isinstance(name, str) or name not in allowed:
        raise _Rejected(f"unknown function {_short(repr(name))}")
    kwargs = _native_arguments(arguments, limits)
    call = ToolCall(name=name, kwargs=kwargs, call_id=_native_id(item))
    _check_call(call, allowed, limits)
    return call


def _native_arguments(arguments: Any, limits: CallLimits) -> dict[str, Any]:
    if arguments is None or arguments == "":
        return {}
    if isinstance(arguments, str):
        if len(arguments) > limits.max_call_chars:
            raise _Rejected(
                f"arguments too long: {len(arguments)} characters (limit {limits.max_call_chars})"
            )
        try:
            arguments = json.loads(arguments, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise _Rejected(f"arguments are not valid JSON: {_short(str(exc))}") from None
    if not isinstance(arguments, dict):
        raise _Rejected("arguments must be a JSON object")
    return arguments


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


# ------------------------------------------------------------- canonical re-check


def _check_call(call: ToolCall, allowed: Collection[str], limits: CallLimits) -> None:
    if type(call.name) is not str or call.name not in allowed or not call.name.isidentifier():
        raise _Rejected(f"unknown function {_short(repr(call.name))}")
    if type(call.args) is not tuple or type(call.kwargs) is not dict:
        raise _Rejected("malformed call")
    budget = [limits.max_values]
    for index, value in enumerate(call.args):
        _require_value(value, f"positional argument {index + 1}", 1, budget, limits)
    for key, value in call.kwargs.items():
        if type(key) is not str or not key.isidentifier() or keyword.iskeyword(key):
            raise _Rejected(f"invalid argument name {_short(repr(key))}")
        _require_value(value, f"argument {key!r}", 1, budget, limits)
    source = call.source
    if len(source) > limits.max_call_chars:
        raise _Rejected(f"call too long: {len(source)} characters (limit {limits.max_call_chars})")
    _require_canonical(source, call, limits)


def _require_value(
    value: Any, where: str, depth: int, budget: list[int], limits: CallLimits
) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise _Rejected(f"too many values in one call (limit {limits.max_values})")
    if depth > limits.max_depth:
        raise _Rejected(f"{where}: nesting deeper than {limits.max_depth}")
    kind = type(value)  # exact types: a subclass could override __repr__
    if kind is int and abs(value) >= 10**limits.max_int_digits:
        raise _Rejected(f"{where}: integer longer than {limits.max_int_digits} digits")
    if kind is float and not math.isfinite(value):
        raise _Rejected(f"{where}: non-finite numbers are not allowed")
    if kind in _SCALAR_TYPES:
        return
    if kind in _CONTAINER_TYPES:
        if kind is set and not value:
            raise _Rejected(f"{where}: an empty set has no literal form")
        for item in value:
            _require_value(item, where, depth + 1, budget, limits)
        return
    if kind is dict:
        for key, item in value.items():
            _require_value(key, where, depth + 1, budget, limits)
            _require_value(item, where, depth + 1, budget, limits)
        return
    raise _Rejected(f"{where}: {kind.__name__} values are not allowed")


def _require_canonical(source: str, call: ToolCall, limits: CallLimits) -> None:
    tree = _parse_expression(source)
    node = tree.body if tree is not None else None
    if (
        not isinstance(node, ast.Call)
        or not isinstance(node.func, ast.Name)
        or node.func.id != call.name
        or len(node.args) != len(call.args)
        or [kw.arg for kw in node.keywords] != list(call.kwargs)
    ):
        raise _Rejected("the call does not render as a plain literal call")
    budget = [limits.max_values]
    for arg in [*node.args, *(kw.value for kw in node.keywords)]:
        _require_literal(arg, "rendered argument", 1, budget, limits)


# ------------------------------------------------------------------------ helpers


def _node_kind(node: ast.AST) -> str:
    return type(node).__name__


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clip(text: str, limits: CallLimits) -> str:
    return _short(text, limits.max_raw_chars)
