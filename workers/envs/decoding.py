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
reading a value (arithmetic, a nested call with keywords, a dict of dicts it renders
as a call), the call is decoded but marked `unsafe`: it is never run here, and it
still counts as a call of its step, as BFCL counts it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from typing import Any, cast


class DecodeFailure(Exception):
    """The response is not decodable as calls (BFCL's decoder raises)."""


@dataclass(frozen=True)
class DecodedCall:
    """One call as BFCL's decoder reads it; nothing here is validated yet."""

    name: Any  # a str for text; whatever the tool call carries for native calls
    kwargs: dict[Any, Any] = field(default_factory=dict)
    positional: tuple[ast.expr, ...] = ()  # dropped by BFCL; kept for the option
    raw: str = ""  # the response's text of this call
    unsafe: str | None = None  # why BFCL would evaluate model text for this call
    call_id: str | None = None


class _Unsafe(Exception):
    pass


# ------------------------------------------------------------------ prompt format


def bfcl_normalised_text(text: str) -> str:
    """The string BFCL hands to `ast.parse` for a prompting model's response."""
    result = text.strip("`\n ")
    if not result.startswith("["):
        result = "[" + result
    if not result.endswith("]"):
        result = result + "]"
    return result.strip().strip("'")


def decode_text(text: str) -> list[DecodedCall]:
    """BFCL's ``default_decode_execute_prompting`` for python calls, without `eval`.

    Raises `DecodeFailure` where BFCL's decoder raises. An empty list is a response
    that decoded to no call (``[]``): it ends the turn too.
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
            decoded.append(_decode_call(element, raw))
        except (TypeError, RecursionError, MemoryError) as exc:  # e.g. an unhashable key
            raise DecodeFailure(f"undecodable value: {type(exc).__name__}") from None
    return decoded


def _decode_call(node: ast.Call, raw: str) -> DecodedCall:
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
    unsafe = None
    for keyword in node.keywords:
        try:
            kwargs[keyword.arg] = _decode_value(keyword.value)
        except _Unsafe as exc:
            unsafe = unsafe or str(exc)
            kwargs[keyword.arg] = None
    if unsafe is None:
        try:
            for value in kwargs.values():
                _check_rendering(value)
        except _Unsafe as exc:
            unsafe = str(exc)
    return DecodedCall(name, kwargs, tuple(node.args), raw, unsafe)


def _decode_value(node: ast.expr) -> Any:
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
        return [_decode_value(v) for v in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise DecodeFailure("** unpacking in a dict")
        return {
            _decode_value(k): _decode_value(v)
            for k, v in zip(node.keys, node.values, strict=True)
            if k is not None
        }
    if isinstance(node, ast.BinOp):
        raise _Unsafe("operators are evaluated by BFCL's decoder; write the value itself")
    if isinstance(node, ast.Name):
        return node.id  # BFCL reads a bare name as its string
    if isinstance(node, ast.Call):
        if not node.keywords:
            return ast.unparse(node)  # BFCL passes a nested call on as its text
        raise _Unsafe("nested calls are not allowed")
    if isinstance(node, ast.Tuple):
        return tuple(_decode_value(v) for v in node.elts)
    if isinstance(node, ast.Subscript):
        return ast.unparse(node.value) + "[" + ast.unparse(node.slice) + "]"
    # Lambda fails inside BFCL's own eval path; the rest is unsupported there.
    raise DecodeFailure(f"unsupported value: {type(node).__name__}")


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
