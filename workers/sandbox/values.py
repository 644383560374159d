"""Values that cross the sandbox boundary, as JSON with tags (standard library only).

Inputs go into a sandboxed program and its function's outputs come back out. Neither
side may trust the other's objects: pickle would run the sender's code in the
receiver, and a returned object's own ``__eq__`` would decide its comparison. So only
plain data crosses, encoded here and rebuilt as the builtin types: None, bool, int,
float (inf and nan too), complex, str, bytes, list, tuple, set, frozenset and dict
(any keys). An instance of a subclass of one of them (a namedtuple, a Counter, an
IntEnum) crosses as its base type, with its type's name kept (`type_name`); anything
else crosses as an `Opaque` placeholder that equals nothing but itself being "not
None". Encoding is bounded in depth and in items, so a cyclic or huge value is an
error of the program that returned it, not a hang.

This file runs inside the sandbox too (its source is sent to the jail), so it imports
only the standard library and defines nothing at import time that reads the
environment.
"""

from __future__ import annotations

import math

TYPE_CHECKING = False  # typing's constant, without importing typing in the jail
if TYPE_CHECKING:
    from typing import Any

MAX_DEPTH = 100
MAX_ITEMS = 1_000_000
# Plain JSON integers up to this size; larger ones as hex (str(int) is limited to
# 4300 digits by default and would raise on a legal result).
_PLAIN_INT = 1 << 62


class ValueTooLarge(ValueError):
    """A value deeper than MAX_DEPTH or with more than MAX_ITEMS items."""


class Opaque:
    """A value of a type that does not cross the boundary (a function, a match
    object, a user class): only its type's name and that it is not None are known."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __eq__(self, other: object) -> bool:
        return False  # an opaque value equals nothing, not even another opaque one

    def __hash__(self) -> int:
        return hash(("opaque", self.type_name))

    def __repr__(self) -> str:
        return f"<opaque {self.type_name}>"


_BASES = (bool, int, float, complex, str, bytes, list, tuple, set, frozenset, dict)


def encode(value: object) -> object:
    """`value` as JSON-ready data (see the module docstring)."""
    budget = [MAX_ITEMS]
    return _encode(value, 0, budget)


def _encode(value: object, depth: int, budget: list[int]) -> object:
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueTooLarge(f"more than {MAX_ITEMS} items")
    if depth > MAX_DEPTH:
        raise ValueTooLarge(f"nested deeper than {MAX_DEPTH}")
    # Exact types (`type(value) is`), which the checker narrows `value` by: an
    # instance of a subclass is encoded below, as its base type.
    if value is None or type(value) is bool or type(value) is str:
        return value
    if type(value) is int:
        return value if -_PLAIN_INT < value < _PLAIN_INT else {"$": "int", "v": hex(value)}
    if type(value) is float:
        return value if math.isfinite(value) else {"$": "float", "v": repr(value)}
    kind = type(value)
    base = next((b for b in _BASES if isinstance(value, b)), None)
    if base is None and kind.__module__ == "numpy" and getattr(value, "shape", None) == ():
        # A numpy scalar (np.int64, np.bool_, ...), which compares equal to its plain
        # value in the official harnesses' in-process `==`: sent as that value.
        return {"$": "sub", "type": kind.__name__,
                "v": _encode(value.item(), depth + 1, budget)}  # type: ignore[attr-defined]  # fmt: skip
    if base is None:
        return {"$": "opaque", "type": kind.__name__}
    out = _encode_base(base, value, depth, budget)
    if kind is not base:
        out = {"$": "sub", "type": kind.__name__, "v": out}
    return out


def _encode_base(base: type, value: Any, depth: int, budget: list[int]) -> object:
    # `value` is an instance of `base` (`_encode` chose `base` by isinstance), a tie
    # the checker cannot see: Any. Every read of a subclass instance goes through the
    # base type's own methods, so a subclass's overrides cannot change what is encoded.
    if base is bool:
        return bool.__bool__(value)
    if base is int:
        return _encode(int.__index__(value), depth, budget)
    if base is float:
        return _encode(float.__float__(value), depth, budget)
    if base is str:
        return str.__str__(value)
    if base is complex:
        return {"$": "complex", "v": [_encode(complex.real.__get__(value), depth, budget),
                                      _encode(complex.imag.__get__(value), depth, budget)]}  # fmt: skip
    if base is bytes:
        return {"$": "bytes", "v": bytes.hex(value)}
    if base is dict:
        items = [[_encode(k, depth + 1, budget), _encode(v, depth + 1, budget)]
                 for k, v in dict.items(value)]  # fmt: skip
        return {"$": "dict", "v": items}
    if base is list:
        return [_encode(v, depth + 1, budget) for v in list.__iter__(value)]
    tag = base.__name__
    iterate = {tuple: tuple.__iter__, set: set.__iter__, frozenset: frozenset.__iter__}[base]
    return {"$": tag, "v": [_encode(v, depth + 1, budget) for v in iterate(value)]}


def decode(data: object, depth: int = 0) -> object:
    """The value `encode` wrote; a malformed encoding raises ValueError."""
    if depth > MAX_DEPTH + 2:
        raise ValueTooLarge(f"nested deeper than {MAX_DEPTH}")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if isinstance(data, list):
        return [decode(v, depth + 1) for v in data]
    if not isinstance(data, dict) or "$" not in data:
        raise ValueError(f"not an encoded value: {str(data)[:80]}")
    # JSON from the other side of the boundary: its shape is checked by its use (a
    # malformed encoding raises ValueError or TypeError), so `value` is Any.
    tag = data["$"]
    value: Any = data.get("v")
    if tag == "int":
        return int(value, 16)
    if tag == "float":
        if value not in ("inf", "-inf", "nan"):
            raise ValueError(f"not a special float: {str(value)[:40]}")
        return float(value)
    if tag == "complex":
        parts: Any = (decode(v, depth + 1) for v in value)  # two floats, as encoded
        real, imag = parts
        return complex(real, imag)
    if tag == "bytes":
        return bytes.fromhex(value)
    if tag == "dict":
        return {_hashable(decode(k, depth + 1)): decode(v, depth + 1) for k, v in value}
    if tag in ("tuple", "set", "frozenset"):
        items = [decode(v, depth + 1) for v in value]
        if tag == "tuple":
            return tuple(items)
        return (set if tag == "set" else frozenset)(_hashable(i) for i in items)
    if tag == "sub":
        return decode(value, depth + 1)  # its base type (see the module docstring)
    if tag == "opaque":
        return Opaque(str(data.get("type"))[:100])
    raise ValueError(f"unknown tag {str(tag)[:40]}")


def type_name(data: object) -> str:
    """The name of the type an encoded value had (a subclass's own name)."""
    if isinstance(data, dict):
        if data.get("$") in ("sub", "opaque"):
            return str(data.get("type"))
        return str(data.get("$"))
    if isinstance(data, list):
        return "list"
    return type(data).__name__


def _hashable(value: object) -> object:
    """A set member or dict key rebuilt from JSON: lists are not hashable, but an
    encoded set never holds one (its members were hashable when encoded)."""
    hash(value)
    return value
