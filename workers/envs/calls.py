"""Safe parsing of untrusted model output into validated tool calls.

Model output is never `eval`-ed here. Text is parsed with `ast` only, and a call is
accepted only when it is a plain ``name(...)`` of one of the task's functions whose
arguments are literals (constants, containers of literals, a sign on a number). Each
accepted call is rebuilt as a `ToolCall` from the parsed *values*, so the string later
handed to a benchmark executor is our canonical rendering, never the model's text; and
`check_call` re-parses that rendering before anything runs, so even a hand-built
`ToolCall` cannot smuggle code through.

What counts as a call, and what ends the turn, is BFCL's decoder's decision
(`decoding.py`): this module only decides what of it may *run*.

- A response BFCL cannot decode (prose, a syntax error, a list with a non-call, invalid
  JSON arguments) runs nothing and ends the turn (`ParsedAction.decode_error`).
- A decoded call that is not a plain literal-only call of one of the task's functions
  (an unknown name, attribute access, values BFCL would `eval`) becomes a
  `RejectedCall` with a reason: answered with an error, never executed, and scored as
  a call that changed nothing (BFCL's executor would run it and fail).
- A response with more than `max_calls` calls, or longer than `max_text_chars`, is
  rejected as a whole (one `RejectedCall`): it is pathological, not a plan.

Every refusal by a size limit, or of a value only `eval` could compute, names its
protection (`RejectedCall.limit`: `CALL_SIZE`, `UNSAFE_ARGUMENTS`), so a benchmark can
record it as a deviation from its own runner and count how often it fires.
"""

from __future__ import annotations

import ast
import json
import keyword
import math
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from distillery.workers.envs.base import ParsedAction, RejectedCall, ToolCall
from distillery.workers.envs.decoding import (
    CALL_SIZE,
    UNSAFE_ARGUMENTS,
    ArithmeticBounds,
    DecodedCall,
    DecodeFailure,
    decode_text,
    decode_tool_calls,
)


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

# Limits that only protect the machine: each far above anything a benchmark's ground
# truth or a realistic reply holds (BFCL's 200 tasks, measured: at most 7 calls in a
# turn, 255 characters in a call, 478 in a whole turn written as one reply, nesting 1,
# 7 values in a call, 6-digit integers), so they fire only on degenerate output.
PROTECTION_LIMITS = CallLimits(
    max_text_chars=200_000,
    max_call_chars=100_000,
    max_calls=256,
    max_depth=16,
    max_values=10_000,
    max_int_digits=64,
)

_SCALAR_TYPES = (str, int, float, bool, type(None))
_CONTAINER_TYPES = (list, tuple, set)

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
    """Internal: one call failed validation; the message is the reason, `limit` the
    protection that refused it (None: the call is invalid, not refused)."""

    def __init__(self, reason: str, limit: str | None = None) -> None:
        super().__init__(reason)
        self.limit = limit


def _too_large(reason: str) -> _Rejected:
    return _Rejected(reason, CALL_SIZE)


# --------------------------------------------------------------------------- public


def parse_text_calls(
    text: str,
    allowed: Collection[str],
    limits: CallLimits = DEFAULT_LIMITS,
    positional_args: bool = False,
    report_invalid: bool = False,
    arithmetic: bool = False,
) -> ParsedAction:
    """BFCL prompt-format output (``[f(a=1), g()]`` or ``f(a=1)``) -> validated calls.

    Decoded as BFCL decodes it (`decoding.decode_text`): positional arguments are
    dropped unless `positional_args`; an undecodable response is a `decode_error`
    (the turn ends) unless `report_invalid` turns a call-like one into a rejected,
    unscored call that the model is told about. `arithmetic`: constant arithmetic in
    an argument is computed (as BFCL's decoder computes it), else refused.
    """
    if not isinstance(text, str):
        return ParsedAction(decode_error="the response has no text")
    if len(text) > limits.max_text_chars:
        return _too_long(text.strip(), limits)
    bounds = ArithmeticBounds(limits.max_int_digits, limits.max_call_chars) if arithmetic else None
    try:
        decoded = decode_text(text, bounds)
    except DecodeFailure as exc:
        return _undecodable(text, str(exc), report_invalid, limits)
    return _validated(decoded, allowed, limits, positional_args)


def parse_native_calls(
    tool_calls: Iterable[Any],
    allowed: Collection[str],
    limits: CallLimits = DEFAULT_LIMITS,
    report_invalid: bool = False,
) -> ParsedAction:
    """OpenAI-style tool calls ``{"id", "name", "arguments"}`` -> validated calls.

    `arguments` is a JSON object string (a dict is accepted too); the nested form
    ``{"id", "function": {"name", "arguments"}}`` is also understood. As in BFCL, one
    call whose arguments are not a JSON object makes the whole response undecodable
    (a `decode_error`: the turn ends), unless `report_invalid`: then that call alone
    is rejected, unscored, and the model is told.
    """
    items = list(tool_calls or [])
    if len(items) > limits.max_calls:
        # Every call keeps its id, so each one can still be answered.
        reason = f"too many calls in one response: {len(items)} (limit {limits.max_calls})"
        rejected = tuple(
            RejectedCall(
                _clip(_native_raw(item), limits), reason, _native_id(item), i, limit=CALL_SIZE
            )
            for i, item in enumerate(items)
        )
        return ParsedAction(rejected=rejected)
    decoded: list[DecodedCall | RejectedCall] = []
    for position, item in enumerate(items):
        try:
            (call,) = decode_tool_calls([item])
        except DecodeFailure as exc:
            if not report_invalid:
                return ParsedAction(decode_error=str(exc))
            raw = _clip(_native_raw(item), limits)
            decoded.append(RejectedCall(raw, str(exc), _native_id(item), position, False))
            continue
        decoded.append(call)
    return _validated(decoded, allowed, limits, positional_args=False)


def check_call(
    call: ToolCall, allowed: Collection[str], limits: CallLimits = DEFAULT_LIMITS
) -> str | None:
    """Why `call` must not run, or None when its canonical source is safe to execute.

    Checks the name, argument names and values, then re-parses `call.source` and
    requires it to be a literal-only call again: this is the guarantee an executor
    that `eval`s the source relies on.
    """
    refused = refusal(call, allowed, limits)
    return None if refused is None else refused[0]


def refusal(
    call: ToolCall, allowed: Collection[str], limits: CallLimits = DEFAULT_LIMITS
) -> tuple[str, str | None] | None:
    """`check_call`'s reason with the protection that refused the call (None: the call
    is invalid), or None when the call may run."""
    try:
        _check_call(call, allowed, limits)
    except _Rejected as exc:
        return str(exc), exc.limit
    return None


# ------------------------------------------------------------------ validation


def _validated(
    decoded: Sequence[DecodedCall | RejectedCall],
    allowed: Collection[str],
    limits: CallLimits,
    positional_args: bool,
) -> ParsedAction:
    if len(decoded) > limits.max_calls:
        reason = f"too many calls in one response: {len(decoded)} (limit {limits.max_calls})"
        raw = _clip(_raw_of(decoded), limits)
        return ParsedAction(rejected=(RejectedCall(raw, reason, limit=CALL_SIZE),))
    calls: list[ToolCall] = []
    rejected: list[RejectedCall] = []
    for position, item in enumerate(decoded):
        if isinstance(item, RejectedCall):
            rejected.append(item)
            continue
        try:
            calls.append(_call_from_decoded(item, allowed, limits, positional_args))
        except _Rejected as exc:
            raw = _clip(_display(item), limits)
            rejected.append(RejectedCall(raw, str(exc), item.call_id, position, limit=exc.limit))
    return ParsedAction(calls=tuple(calls), rejected=tuple(rejected))


def _call_from_decoded(
    item: DecodedCall, allowed: Collection[str], limits: CallLimits, positional_args: bool
) -> ToolCall:
    name = item.name
    if not isinstance(name, str) or name not in allowed:
        if isinstance(name, str) and "." in name:
            raise _Rejected(f"attribute access is not allowed: {_short(name)}")
        # Worded as the NameError BFCL's executor reports for an unknown function.
        raise _Rejected(f"name {_short(repr(name))} is not defined")
    if item.unsafe:
        raise _Rejected(item.unsafe, item.limit or UNSAFE_ARGUMENTS)
    if len(item.raw) > limits.max_call_chars:
        raise _too_large(
            f"call too long: {len(item.raw)} characters (limit {limits.max_call_chars})"
        )
    if any(key is None for key in item.kwargs):
        raise _Rejected("** unpacking is not allowed")
    args: tuple[Any, ...] = ()
    if positional_args and item.positional:
        budget = [limits.max_values]
        for index, arg in enumerate(item.positional):
            _require_literal(arg, f"positional argument {index + 1}", 1, budget, limits)
        args = tuple(_literal_value(arg) for arg in item.positional)
    call = ToolCall(name=name, args=args, kwargs=dict(item.kwargs), call_id=item.call_id)
    _check_call(call, allowed, limits)
    return call


def _display(item: DecodedCall) -> str:
    """A rejected call as BFCL's decoder renders it (``name(k=v, ...)``), when it can
    be rendered; else the response's own text of it."""
    if not isinstance(item.name, str) or item.unsafe:
        return item.raw
    if not all(isinstance(k, str) for k in item.kwargs):
        return item.raw
    try:
        return ToolCall(item.name, (), dict(item.kwargs)).source
    except (ValueError, RecursionError, MemoryError):
        return item.raw


def _undecodable(text: str, reason: str, report_invalid: bool, limits: CallLimits) -> ParsedAction:
    body = text.strip().strip("`").strip()
    if report_invalid and _LOOKS_LIKE_CALL.match(body):
        reason = f"not decodable as function calls: {reason}"
        return ParsedAction(rejected=(RejectedCall(_clip(body, limits), reason, None, 0, False),))
    return ParsedAction(decode_error=reason)


def _too_long(body: str, limits: CallLimits) -> ParsedAction:
    if not _LOOKS_LIKE_CALL.match(body):
        return ParsedAction(decode_error="long text without a call")  # prose ends the turn
    reason = f"response too long: {len(body)} characters (limit {limits.max_text_chars})"
    return ParsedAction(rejected=(RejectedCall(_clip(body, limits), reason, limit=CALL_SIZE),))


def _raw_of(decoded: Sequence[DecodedCall | RejectedCall]) -> str:
    return ", ".join(item.raw for item in decoded)


def _parse_expression(body: str) -> ast.Expression | None:
    if not body:
        return None
    try:
        return ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        return None


def _require_literal(
    node: ast.expr, where: str, depth: int, budget: list[int], limits: CallLimits
) -> None:
    """Structural check before `ast.literal_eval`, so every rejection has a reason."""
    budget[0] -= 1
    if budget[0] < 0:
        raise _too_large(f"too many values in one call (limit {limits.max_values})")
    if depth > limits.max_depth:
        raise _too_large(f"{where}: nesting deeper than {limits.max_depth}")
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


def _native_id(item: Any) -> str | None:
    call_id = item.get("id") if isinstance(item, dict) else None
    return call_id if isinstance(call_id, str) else None


def _native_raw(item: Any) -> str:
    if not isinstance(item, dict):
        return repr(item)
    function = item.get("function")
    source = function if isinstance(function, dict) else item
    name, arguments = source.get("name"), source.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, default=repr)
    return f"{name}({arguments})"


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
        raise _too_large(f"call too long: {len(source)} characters (limit {limits.max_call_chars})")
    _require_canonical(source, call, limits)


def _require_value(
    value: Any, where: str, depth: int, budget: list[int], limits: CallLimits
) -> None:
    budget[0] -= 1
    if budget[0] < 0:
        raise _too_large(f"too many values in one call (limit {limits.max_values})")
    if depth > limits.max_depth:
        raise _too_large(f"{where}: nesting deeper than {limits.max_depth}")
    kind = type(value)  # exact types: a subclass could override __repr__
    if kind is int and abs(value) >= 10**limits.max_int_digits:
        raise _too_large(f"{where}: integer longer than {limits.max_int_digits} digits")
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
