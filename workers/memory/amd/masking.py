"""Typed placeholders for concrete runtime values (AMD section 3.2).

Memory must transfer to tasks with different inputs, so the concrete arguments of a
teacher's calls are replaced by typed placeholders named after the PARAMETER that
received them: ``mv(source='final_report.pdf', destination='temp')`` becomes
``mv(source=<SOURCE>, destination=<DESTINATION>)``.

Placeholder rule (by parameter name, never by value):
- a small table of common names maps to shared types: ``file_name`` -> ``<FILE_NAME>``,
  ``folder``/``dir_name`` -> ``<DIR_NAME>``, ``amount``/``price`` -> ``<AMOUNT>``,
  ``email`` -> ``<EMAIL>``, ``user``/``username`` -> ``<USERNAME>``, ``id`` -> ``<ID>``...
- any other name becomes its UPPER_SNAKE form (``user_id`` -> ``<USER_ID>``,
  ``tweet_id`` -> ``<TWEET_ID>``, ``fuelAmount`` -> ``<FUEL_AMOUNT>``); a trailing
  number is kept apart so two files stay distinguishable (``file_name1`` ->
  ``<FILE_NAME_1>``);
- positional arguments take the parameter names of the function's doc (BFCL docs list
  ``parameters.properties`` in signature order); without a doc they are ``<ARG_1>``...

What is KEPT verbatim: booleans and ``None`` (flags carry no task-specific data), and
strings that belong to a SMALL enum (at most ``MAX_KEPT_ENUM`` values) declared by the
doc, either as JSON-schema ``enum``, BFCL's ``[Enum]: [...]`` description suffix, or a
parenthesised slash list in the description (BFCL's ``place_order``: "Type of the order
(Buy/Sell).") (``mode='engage'``, ``unit='celsius'``, ``door=['driver']``,
``order_type='Buy'``). Everything else is masked.
Containers keep their shape: list elements take the parameter's placeholder, dict keys
are kept and their values are masked by the key's name
(``updates={'status': <STATUS>}``).

Calls are parsed with `ast` and only literal nodes are read; nothing is ever evaluated.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_KEPT_ENUM = 8  # an enum with at most this many values is kept verbatim
MIN_VALUE_CHARS = 3  # shorter values ('..', '5') are never searched for in free text
ELLIPSIS = "…"

# Parameter name -> placeholder type, for names shared across tools.
_TYPES: dict[str, str] = {
    "file_name": "FILE_NAME",
    "filename": "FILE_NAME",
    "file": "FILE_NAME",
    "folder": "DIR_NAME",
    "dir_name": "DIR_NAME",
    "dirname": "DIR_NAME",
    "directory": "DIR_NAME",
    "dir": "DIR_NAME",
    "path": "PATH",
    "file_path": "FILE_PATH",
    "filepath": "FILE_PATH",
    "email": "EMAIL",
    "email_address": "EMAIL",
    "amount": "AMOUNT",
    "price": "AMOUNT",
    "cost": "AMOUNT",
    "user": "USERNAME",
    "username": "USERNAME",
    "user_name": "USERNAME",
    "id": "ID",
    "password": "PASSWORD",
    "phone": "PHONE_NUMBER",
    "phone_number": "PHONE_NUMBER",
}

# Placeholders shared across tools: preferred when one value fills several parameters.
TYPED_PLACEHOLDERS = frozenset(f"<{kind}>" for kind in _TYPES.values())

_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b-\u200f\u2028\u2029\ufeff]")
_ENUM_SUFFIX = re.compile(r"\[Enum\]\s*:\s*(.+)$", re.IGNORECASE | re.DOTALL)
# "(Buy/Sell)": alternatives of single words, in parentheses, separated by slashes.
_SLASH_ENUM = re.compile(r"\(\s*([\w-]+(?:\s*/\s*[\w-]+)+)\s*\)")


def placeholder_for(name: str) -> str:
    """The typed placeholder of a parameter name, e.g. ``folder`` -> ``<DIR_NAME>``."""
    snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name.strip())
    snake = re.sub(r"[^A-Za-z0-9]+", "_", snake).strip("_").lower()
    match = re.fullmatch(r"(.*?[a-z_])_?(\d+)", snake)
    base, number = (match.group(1).rstrip("_"), match.group(2)) if match else (snake, "")
    kind = _TYPES.get(base, base.upper()) or "VALUE"
    return f"<{kind}_{number}>" if number else f"<{kind}>"


@dataclass(frozen=True)
class MaskedCall:
    """One masked call and the concrete values it hid (value text -> placeholder)."""

    function: str
    masked: str
    values: dict[str, str] = field(default_factory=dict)


def mask_call(source: str, doc: Mapping[str, Any] | None = None) -> str:
    """``mv(source='a.pdf', destination='temp')`` -> ``mv(source=<SOURCE>, destination=<DESTINATION>)``."""
    return mask_call_detailed(source, doc).masked


def mask_call_detailed(
    source: str,
    doc: Mapping[str, Any] | None = None,
    placeholders: Mapping[str, str] | None = None,
) -> MaskedCall:
    """Mask a canonical call source; also report which concrete values were hidden.

    `placeholders` (value text -> placeholder) fixes the placeholder of values already
    seen elsewhere in the same trajectory, so one value is masked the same way in every
    call (``mv(source='a.pdf')`` then ``cat(file_name='a.pdf')`` -> both
    ``<FILE_NAME>``). Only values long enough to be tracked in free text
    (`MIN_VALUE_CHARS`) are unified; short ones ('5', 'ab') keep their parameter's
    placeholder, as a shared '5' is more likely chance than data flow."""
    fixed = {
        value: ph
        for value, ph in (placeholders or {}).items()
        if len(value.strip()) >= MIN_VALUE_CHARS
    }
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        node = None
    if not isinstance(node, ast.Call):
        # Never happens for validated calls; do not leak anything if it does.
        name = re.match(r"\s*([\w.]*)", source).group(1) or "call"  # type: ignore[union-attr]
        return MaskedCall(name, f"{name}(<ARGS>)")
    name = _dotted(node.func) or "call"
    params = _param_names(doc)
    properties = _properties(doc)
    values: dict[str, str] = {}
    parts = []
    for index, arg in enumerate(node.args):
        pname = params[index] if index < len(params) else None
        ph = placeholder_for(pname) if pname else f"<ARG_{index + 1}>"
        parts.append(_mask(arg, ph, properties.get(pname or "", {}), values, fixed))
    for kw in node.keywords:
        if kw.arg is None:  # **kwargs: not a literal call
            parts.append("**<KWARGS>")
            continue
        prop = properties.get(kw.arg, {})
        masked = _mask(kw.value, placeholder_for(kw.arg), prop, values, fixed)
        parts.append(f"{kw.arg}={masked}")
    return MaskedCall(name.rsplit(".", 1)[-1], f"{name}({', '.join(parts)})", values)


def function_name(source: str) -> str | None:
    """The called function's (last) name, or None when `source` is not a call."""
    try:
        node = ast.parse(source.strip(), mode="eval").body
    except (SyntaxError, ValueError):
        return None
    if isinstance(node, ast.Call):
        name = _dotted(node.func)
        return name.rsplit(".", 1)[-1] if name else None
    return None


def sanitise_observation(text: str | None, limit: int = 500) -> str:
    """Printable, single-spaced, at most `limit` characters (cut ones end with '…')."""
    if not text:
        return ""
    text = _CONTROL.sub(" ", str(text))
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    if limit <= len(ELLIPSIS):
        return ELLIPSIS[:limit]
    cut = text[: limit - len(ELLIPSIS)]
    # Never end inside a placeholder ("<TRAVEL…" would read as a value, not a type).
    cut = re.sub(r"<[A-Z0-9_]*$", "", cut)
    return cut.rstrip() + ELLIPSIS


def placeholders_in(text: str) -> list[str]:
    """The distinct placeholders of a masked text, in order of appearance."""
    return list(dict.fromkeys(_PLACEHOLDER.findall(text or "")))


def preferred_placeholder(candidates: Iterable[str]) -> str:
    """One placeholder for a value seen under several: shared types first, then
    unnumbered ones, then the first seen (``<FILE_NAME>`` over ``<SOURCE>``)."""
    ordered = list(dict.fromkeys(candidates))
    return min(
        ordered,
        key=lambda p: (
            p not in TYPED_PLACEHOLDERS,
            bool(re.search(r"_\d+>$", p)),
            ordered.index(p),
        ),
    )


def find_values(text: str, values: Mapping[str, str], ignore: Iterable[str] = ()) -> list[str]:
    """The concrete values (keys of `values`) that occur in `text`, longest first.

    Matching is case-insensitive, on whole tokens (``temp`` does not match
    ``template``), skips text inside placeholders, and ignores values shorter than
    `MIN_VALUE_CHARS` and those in `ignore` (e.g. function and class names).
    """
    found = []
    for value, pattern in _patterns(values, ignore):
        if any(pattern.search(piece) for piece in _outside_placeholders(text)):
            found.append(value)
    return found


def mask_text(text: str, values: Mapping[str, str], ignore: Iterable[str] = ()) -> str:
    """Replace every concrete value of `values` in free text by its placeholder."""
    if not text:
        return text
    for value, pattern in _patterns(values, ignore):
        placeholder = values[value]
        pieces = re.split(f"({_PLACEHOLDER.pattern})", text)
        text = "".join(
            piece
            if _PLACEHOLDER.fullmatch(piece)
            else pattern.sub(lambda _m, ph=placeholder: ph, piece)
            for piece in pieces
        )
    return text


# ---------------------------------------------------------------------------------


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return f"{head}.{node.attr}" if head else None
    return None


def _properties(doc: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    if not doc:
        return {}
    params = doc.get("parameters") or {}
    props = params.get("properties") if isinstance(params, Mapping) else None
    return dict(props) if isinstance(props, Mapping) else {}


def _param_names(doc: Mapping[str, Any] | None) -> list[str]:
    return list(_properties(doc))


def _enum(prop: Mapping[str, Any]) -> list[Any] | None:
    """The declared enum of a parameter (or of its array items), if any."""
    items = prop.get("items")
    for source in (prop, items if isinstance(items, Mapping) else {}):
        if isinstance(source.get("enum"), list):
            return source["enum"]
    description = str(prop.get("description", ""))
    match = _ENUM_SUFFIX.search(description)
    if not match:
        slashed = _SLASH_ENUM.search(description)
        return [v.strip() for v in slashed.group(1).split("/")] if slashed else None
    rest = match.group(1).strip()
    if rest.startswith("["):
        try:
            parsed = json.loads(rest[: rest.index("]") + 1])
            return parsed if isinstance(parsed, list) else None
        except (ValueError, json.JSONDecodeError):
            return None
    return [item.strip().rstrip(".") for item in rest.split(",") if item.strip()]


def _kept_enum(prop: Mapping[str, Any]) -> set[str]:
    values = _enum(prop)
    if not values or len(values) > MAX_KEPT_ENUM:
        return set()
    return {v for v in values if isinstance(v, str)}


def _literal(node: ast.AST) -> tuple[bool, Any]:
    """(is a scalar literal, its value): constants and signed numbers only."""
    if isinstance(node, ast.Constant):
        return True, node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub | ast.UAdd)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        value = node.operand.value
        return True, -value if isinstance(node.op, ast.USub) else value
    return False, None


def _mask(
    node: ast.AST,
    ph: str,
    prop: Mapping[str, Any],
    values: dict[str, str],
    fixed: Mapping[str, str],
) -> str:
    is_scalar, value = _literal(node)
    if is_scalar:
        if value is None or isinstance(value, bool):
            return repr(value)
        text = str(value)
        if isinstance(value, str) and value in _kept_enum(prop) and text not in fixed:
            return repr(value)
        ph = fixed.get(text, ph)
        if text.strip():
            values.setdefault(text, ph)
        return ph
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        items = [_mask(item, ph, prop, values, fixed) for item in node.elts]
        if isinstance(node, ast.Tuple):
            return f"({', '.join(items)}{',' if len(items) == 1 else ''})"
        if isinstance(node, ast.Set):
            return "{" + ", ".join(items) + "}" if items else "set()"
        return f"[{', '.join(items)}]"
    if isinstance(node, ast.Dict):
        parts = []
        for key, val in zip(node.keys, node.values, strict=True):
            if key is None:
                parts.append(f"**{ph}")
                continue
            is_key, key_value = _literal(key)
            key_text = repr(key_value) if is_key and isinstance(key_value, str) else ph
            inner = placeholder_for(key_value) if is_key and isinstance(key_value, str) else ph
            parts.append(f"{key_text}: {_mask(val, inner, {}, values, fixed)}")
        return "{" + ", ".join(parts) + "}"
    return ph  # not a literal: hide it entirely


def _patterns(values: Mapping[str, str], ignore: Iterable[str]) -> list[tuple[str, re.Pattern]]:
    skip = {s.lower() for s in ignore}
    out = []
    for value in sorted(values, key=lambda v: (-len(v), v)):
        needle = value.strip()
        if len(needle) < MIN_VALUE_CHARS or needle.lower() in skip:
            continue
        left = r"(?<![A-Za-z0-9_])" if re.match(r"\w", needle) else ""
        right = r"(?![A-Za-z0-9_])" if re.search(r"\w$", needle) else ""
        out.append((value, re.compile(left + re.escape(needle) + right, re.IGNORECASE)))
    return out


def _outside_placeholders(text: str) -> list[str]:
    return _PLACEHOLDER.split(text or "")
