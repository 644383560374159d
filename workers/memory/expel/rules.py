"""The insight list's operations, as the original applies them (LeapLabTHU/ExpeL,
agent/expel.py `parse_rules` and `update_rules`), written anew.

An answer holds lines `<OPERATION> <n>: <rule>`. A line counts when its rule is
non-empty, names no operation word inside and ends with a period (the original's
filters against malformed or cut-off answers). Then:

- an ADD whose text contains an existing rule is dropped; an EDIT whose text contains
  an existing rule becomes an AGREE of it, one naming no existing number is dropped; a
  REMOVE or AGREE whose text contains no existing rule is dropped;
- applied in the order REMOVE (-1, or -3 when the list is full: `max_num_rules + 5`
  rules), AGREE (+1), EDIT (the rule rewritten, +1), ADD (a new rule at 2);
- rules at 0 or below are removed; the list is sorted by importance, highest first
  (stable: ties keep their order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from distillery.workers.memory.entries import MemorySource

OPERATION = re.compile(r"((?:REMOVE|EDIT|ADD|AGREE)(?: \d+|)): (?:[a-zA-Z\s\d]+: |)(.*)")
_BANNED = ("ADD", "AGREE", "EDIT")


@dataclass(frozen=True)
class Rule:
    rule_id: int
    text: str
    importance: int
    source: MemorySource


@dataclass(frozen=True)
class Operation:
    kind: str  # ADD | EDIT | REMOVE | AGREE
    number: int | None  # the existing rule's number (1-based) it names, if any
    text: str


def parse_operations(answer: str) -> list[Operation]:
    """The well-formed operation lines of an answer, in order."""
    out = []
    for head, text in OPERATION.findall(answer):
        text = text.strip()
        if not text or any(word in text for word in _BANNED) or not text.endswith("."):
            continue
        kind, _, number = head.partition(" ")
        out.append(Operation(kind, int(number) if number.strip() else None, text))
    return out


def _containing(rules: list[Rule], text: str) -> int | None:
    """The index of the first rule whose text the operation's text contains."""
    return next((i for i, rule in enumerate(rules) if rule.text in text), None)


def apply_operations(
    rules: list[Rule],
    operations: list[Operation],
    max_num_rules: int,
    source: MemorySource,
    next_id: int,
) -> tuple[list[Rule], int, dict[str, int]]:
    """(the new list, the next rule id, how many operations of each kind were applied
    or dropped). `source`: where an added rule comes from."""
    rules = list(rules)
    full = max_num_rules + 5 <= len(rules)
    kept: list[Operation] = []
    counts: dict[str, int] = {}
    for op in operations:
        index = _containing(rules, op.text)
        if op.kind == "ADD" and index is not None:
            counts["dropped"] = counts.get("dropped", 0) + 1
            continue
        if op.kind == "EDIT":
            if index is not None:
                op = Operation("AGREE", index + 1, rules[index].text)
            elif op.number is None or op.number > len(rules) or op.number < 1:
                counts["dropped"] = counts.get("dropped", 0) + 1
                continue
        if op.kind in ("REMOVE", "AGREE") and index is None:
            counts["dropped"] = counts.get("dropped", 0) + 1
            continue
        kept.append(op)
    for kind in ("REMOVE", "AGREE", "EDIT", "ADD"):
        for op in (o for o in kept if o.kind == kind):
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "ADD":
                rules.append(Rule(next_id, op.text, 2, source))
                next_id += 1
                continue
            if kind == "EDIT":
                assert op.number is not None
                i = op.number - 1
                rules[i] = replace(rules[i], text=op.text, importance=rules[i].importance + 1)
                continue
            i = _containing(rules, op.text)
            if i is None:  # an earlier operation of this answer changed it
                continue
            delta = 1 if kind == "AGREE" else -(3 if full else 1)
            rules[i] = replace(rules[i], importance=rules[i].importance + delta)
    rules = [r for r in rules if r.importance > 0]
    rules.sort(key=lambda r: -r.importance)
    return rules, next_id, counts
