"""Model output -> calls, decoded exactly as BFCL's own handlers decode it, minus `eval`.

BFCL's prompting handlers decode text with ``default_decode_execute_prompting``
(``model_handler/utils.py``) and its OpenAI function-calling handler decodes tool calls
with ``convert_to_function_call``. What they accept, what they drop and what makes a
whole response undecodable is what the leaderboard scores, so it is reproduced here
rule for rule:

- text: ``strip("`\\n ")``, brackets added when missing, ``strip().strip("'")``, then
  `ast.parse`; the body must be one call or a list/tuple/set of calls, else the
  response is undecodable. A call keeps its *keyword* arguments only (positional ones
  are dropped), a bare name becomes its string, a nested call without keywords and a
  subscript become their source text, ``-x``/``+x`` become ``-x``; an unsupported
  node anywhere makes the whole response undecodable.
- tool calls: every call's arguments must load as JSON and be an object, else the
  whole response is undecodable.

Undecodable means: nothing of the response runs and the turn ends (BFCL's loop
breaks; its checker drops the step). Where BFCL would `eval` model text instead of
reading a value (a nested call with keywords, a dict of dicts it renders as a call,
arithmetic beyond constants), the call is decoded but marked `unsafe`: it is never run
here, and it still counts as a call of its step, as BFCL counts it.

Arithmetic (``a=2+3``): BFCL's `resolve_ast_by_type` evaluates a binary operation with
``eval(ast.unparse(node))``. With `evaluate_arithmetic`, an operation on constants
(numbers, strings, and lists, tuples, sets and dicts of them, signs included) is
computed here by Python's own operators on the literal values, with no `eval`: the
same value BFCL's `eval` gets, and an error where BFCL's `eval` raises (``1/0``,
``"a"+1``: the whole response is undecodable, as in BFCL). Anything else inside an
operation (a name, a call, an attribute, ``str % args`` formatting) is code only an
`eval` could run: the call is `unsafe`. A result too large to be a value (an integer of
more than `ArithmeticBounds.max_int_digits` digits, a sequence longer than
`max_length`) is refused before it is computed: BFCL would compute it, or hang.
Without `evaluate_arithmetic` every operation is `unsafe` (the `refuse_arithmetic`
option of BFCL, and every other benchmark's decoding).
"""

from __future__ import annotations

import ast
import builtins
import json
import math
import operator
from dataclasses import dataclass, field
from typing import Any, cast

# `DecodedCall.limit` of a call refused because BFCL would evaluate model text.
UNSAFE_ARGUMENTS = "unsafe_arguments"
# ... and of one whose arithmetic would make a value too large to be an argument.
CALL_SIZE = "call_size"


class DecodeFailure(Exception):
    """The response is not decodable as calls (BFCL's decoder raises)."""


@dataclass(frozen=True)
class DecodedCall:
    """One call as BFCL's decoder reads it; nothing here is validated yet."""

    name: Any  # a str for text; whatever the tool call carries for native calls
    kwargs: dict[Any, Any] = field(default_factory=dict)
    positional: tuple[ast.expr, ...] = ()  # dropped by BFCL; kept for the option
    raw: str = ""  # the response's text of this call
    unsafe: str | None = None  # why the call may not run (BFCL would `eval` model text)
    call_id: str | None = None
    limit: str | None = None  # with `unsafe`: the protection that refuses it


@dataclass(frozen=True)
class ArithmeticBounds:
    """How large a value computed from constant arithmetic may get."""

    max_int_digits: int
    max_length: int  # characters of a str/bytes, items of a list/tuple/set/dict


class _Unsafe(Exception):
    def __init__(self, reason: str, limit: str = UNSAFE_ARGUMENTS) -> None:
        super().__init__(reason)
        self.limit = limit


# ------------------------------------------------------------------ prompt format


def bfcl_normalised_text(text: str) -> str:
    """The string BFCL hands to `ast.parse` for a prompting model's response."""
    result = text.strip("`\n ")
    if not result.startswith("["):
        result = "[" + result
    if not result.endswith("]"):
        result = result + "]"
    return result.strip().strip("'")


def decode_text(text: str, arithmetic: ArithmeticBounds | None = None) -> list[DecodedCall]:
    """BFCL's ``default_decode_execute_prompting`` for python calls, without `eval`.

    Raises `DecodeFailure` where BFCL's decoder raises. An empty list is a response
    that decoded to no call (``[]``): it ends the turn too. `arithmetic`: evaluate
    constant arithmetic within these bounds, as BFCL's `eval` would (None: every
    operation is `unsafe`).
    """
    body = bfcl_normalised_text(text)
    try:
        tree = ast.parse(body, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        raise DecodeFailure(f"not a Python expression: {type(exc).__name__}") from None
    node = tree.body
    if isinstance(node, ast.Call):
        elements: list[ast.expr] = [node]
    elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        elements = list(node.elts)
    else:
        raise DecodeFailure(f"not a list of calls: {type(node).__name__}")
    decoded = []
    for element in elements:
        if not isinstance(element, ast.Call):
            raise DecodeFailure(f"not a function call: {type(element).__name__}")
        raw = ast.get_source_segment(body, element) or ast.unparse(element)
        try:
            decoded.append(_decode_call(element, raw, arithmetic))
        except (TypeError, RecursionError, MemoryError) as exc:  # e.g. an unhashable key
            raise DecodeFailure(f"undecodable value: {type(exc).__name__}") from None
    return decoded


def _decode_call(node: ast.Call, raw: str, arithmetic: ArithmeticBounds | None) -> DecodedCall:
    """BFCL's `resolve_ast_call`: a dotted name and the keyword arguments."""
    parts = []
    func: ast.expr = node.func
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(func.id)
    name = ".".join(reversed(parts))
    kwargs: dict[Any, Any] = {}
    unsafe: _Unsafe | None = None
    for keyword in node.keywords:
        try:
            kwargs[keyword.arg] = _decode_value(keyword.value, arithmetic)
        except _Unsafe as exc:
            unsafe = unsafe or exc
            kwargs[keyword.arg] = None
    if unsafe is None:
        try:
            for value in kwargs.values():
                _check_rendering(value)
        except _Unsafe as exc:
            unsafe = exc
    if unsafe is None:
        return DecodedCall(name, kwargs, tuple(node.args), raw)
    return DecodedCall(name, kwargs, tuple(node.args), raw, str(unsafe), limit=unsafe.limit)


def _decode_value(node: ast.expr, arithmetic: ArithmeticBounds | None = None) -> Any:
    """BFCL's `resolve_ast_by_type`, case by case; `eval` cases raise `_Unsafe`."""
    if isinstance(node, ast.Constant):
        return "..." if node.value is Ellipsis else node.value
    if isinstance(node, ast.UnaryOp):
        # BFCL negates the operand's value whatever the operator (+5 -> -5).
        operand = node.operand
        if isinstance(operand, ast.Constant):
            try:
                return -cast(Any, operand.value)  # a TypeError is caught below
            except TypeError:
                pass
        raise DecodeFailure("unsupported unary operand")
    if isinstance(node, ast.List):
        return [_decode_value(v, arithmetic) for v in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise DecodeFailure("** unpacking in a dict")
        return {
            _decode_value(k, arithmetic): _decode_value(v, arithmetic)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    if isinstance(node, ast.BinOp):
        if arithmetic is None:
            raise _Unsafe("operators are evaluated by BFCL's decoder; write the value itself")
        return _arithmetic(node, arithmetic)
    if isinstance(node, ast.Name):
        return node.id  # BFCL reads a bare name as its string
    if isinstance(node, ast.Call):
        if not node.keywords:
            return ast.unparse(node)  # BFCL passes a nested call on as its text
        raise _Unsafe("nested calls are not allowed")
    if isinstance(node, ast.Tuple):
        return tuple(_decode_value(v, arithmetic) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    # Lambda fails inside BFCL's own eval path; the rest is unsupported there.
    raise DecodeFailure(f"unsupported value: {type(node).__name__}")


# ------------------------------------------------------------------ arithmetic

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.BitAnd: operator.and_,
    ast.MatMult: operator.matmul,
}
_UNARY = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
    ast.Not: operator.not_,
}
_SEQUENCES = (str, bytes, list, tuple)
_NOT_CONSTANT = "only constant arithmetic is evaluated here (BFCL's decoder would `eval` it)"


def _arithmetic(node: ast.expr, bounds: ArithmeticBounds) -> Any:
    """The value Python's `eval` gives a constant expression, computed operator by
    operator on literal values (never `eval`); `DecodeFailure` where `eval` raises."""
    try:
        return _constant_value(node, bounds)
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError) as exc:
        raise DecodeFailure(
            f"BFCL's decoder fails on this operation: {type(exc).__name__}"
        ) from None


def _constant_value(node: ast.expr, bounds: ArithmeticBounds) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _bounded(_UNARY[type(node.op)](_constant_value(node.operand, bounds)), bounds)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left = _constant_value(node.left, bounds)
        right = _constant_value(node.right, bounds)
        _require_cheap(node.op, left, right, bounds)
        return _bounded(_BINARY[type(node.op)](left, right), bounds)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_constant_value(item, bounds) for item in node.elts]
        kind = {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)]
        return kind(items)
    if isinstance(node, ast.Dict) and all(key is not None for key in node.keys):
        return {
            _constant_value(k, bounds): _constant_value(v, bounds)  # type: ignore[arg-type]
            for k, v in zip(node.keys, node.values, strict=True)
        }
    if isinstance(node, ast.Name) and not _may_be_bound(node.id):
        # `eval` in BFCL's decoder module: a name bound nowhere there is a NameError (a
        # lower-case name bound there is a module or function: any operator on it is
        # a TypeError), so the response is undecodable, as in BFCL.
        raise DecodeFailure(f"name {node.id[:40]!r} is not defined (BFCL's eval fails)")
    raise _Unsafe(_NOT_CONSTANT)


def _may_be_bound(name: str) -> bool:
    """Whether `name` may hold a value in the namespace BFCL's decoder `eval`s in (a
    builtin, a dunder, an upper-case constant or class of its module), so that only
    `eval` could tell what an operation on it gives."""
    return name in _BUILTINS or name.startswith("_") or name != name.lower()


_BUILTINS = frozenset(dir(builtins))


def _int_digits(value: int) -> float:
    return abs(value).bit_length() * math.log10(2)


def _require_cheap(op: ast.operator, left: Any, right: Any, bounds: ArithmeticBounds) -> None:
    """Refuse an operation whose result is too large before computing it (a huge power,
    shift or repetition would take the worker's memory or time)."""
    too_large = _Unsafe("the arithmetic's result is too large to be an argument", CALL_SIZE)
    ints = isinstance(left, int) and isinstance(right, int)
    if (
        isinstance(op, ast.Pow)
        and ints
        and right > 0
        and abs(left) > 1
        and right * math.log10(abs(left)) > bounds.max_int_digits + 1
    ):
        raise too_large
    if isinstance(op, ast.LShift) and ints and right > 4 * bounds.max_int_digits:
        raise too_large
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            if (
                isinstance(seq, _SEQUENCES)
                and isinstance(count, int)
                and len(seq) * count > bounds.max_length
            ):
                raise too_large
    if isinstance(op, ast.Mod) and isinstance(left, (str, bytes)):
        raise _Unsafe(_NOT_CONSTANT)  # printf-style formatting: code, not arithmetic


def _bounded(value: Any, bounds: ArithmeticBounds) -> Any:
    if isinstance(value, int) and _int_digits(value) > bounds.max_int_digits + 1:
        raise _Unsafe("the arithmetic's result is too large to be an argument", CALL_SIZE)
    if isinstance(value, (*_SEQUENCES, set, dict)) and len(value) > bounds.max_length:
        raise _Unsafe("the arithmetic's result is too large to be an argument", CALL_SIZE)
    return value


def _check_rendering(value: Any) -> None:
    """BFCL renders values with `parse_nested_value`: the same text as `repr` except
    for dicts, whose keys are written ``'{k}'`` and which become *calls* when every
    value is a dict. An empty such dict makes BFCL's decoder raise."""
    if not isinstance(value, dict):
        return
    if all(isinstance(v, dict) for v in value.values()):
        if not value:
            raise DecodeFailure("an empty dict argument (BFCL's renderer fails on it)")
        raise _Unsafe("a dict of dicts is rendered as a call by BFCL's decoder")
    for key, item in value.items():
        if not isinstance(key, str) or f"'{key}'" != repr(key):
            raise _Unsafe("dict keys must be plain strings")
        _check_rendering(item)


# ------------------------------------------------------------------- tool calls


def decode_tool_calls(tool_calls: list[Any]) -> list[DecodedCall]:
    """BFCL's ``convert_to_function_call`` over OpenAI-style tool calls.

    Every call's arguments must be a JSON object (a string that `json.loads` reads
    as one, or an object already); else the whole response is undecodable, as in
    BFCL, where one bad call ends the turn and its step is dropped.
    """
    decoded = []
    for item in tool_calls:
        name, arguments, call_id = _native_parts(item)
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError) as exc:
                raise DecodeFailure(f"arguments of {name!r} are not valid JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise DecodeFailure(f"arguments of {name!r} are not a JSON object")
        raw = f"{name}({json.dumps(arguments, default=repr)[:400]})"
        decoded.append(DecodedCall(name, arguments, (), raw, None, call_id))
    return decoded


def _native_parts(item: Any) -> tuple[Any, Any, str | None]:
    if not isinstance(item, dict):
        raise DecodeFailure("malformed tool call: not an object")
    call_id = item.get("id") if isinstance(item.get("id"), str) else None
    function = item.get("function")
    if isinstance(function, dict):
        return function.get("name"), function.get("arguments"), call_id
    return item.get("name"), item.get("arguments"), call_id
