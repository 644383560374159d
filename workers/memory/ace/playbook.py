"""The playbook: its sections, its text, and reading the reflector's and the curator's
answers (untrusted: anything malformed is a violation, never an exception).

Section sets and id slugs: "generic", ace.py `_initialize_empty_playbook` (its seven
sections); "appworld", the AppWorld harness's eight (appworld_initial_playbook.txt)
with its slugs (`code/ace/utils.py` `get_section_slug`). A bullet id is
`<slug>-<n:05d>` with one counter over all sections (the original's `next_global_id`).
A curator's section outside the set goes to OTHERS (playbook_utils.py
`apply_curator_operations`), counted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distillery.workers.memory.ace import prompts
from distillery.workers.memory.ace.records import Bullet
from distillery.workers.memory.building import Violation
from distillery.workers.memory.entries import MemorySource

SECTIONS: dict[str, tuple[tuple[str, str], ...]] = {
    "generic": (
        ("STRATEGIES & INSIGHTS", "si"),
        ("FORMULAS & CALCULATIONS", "calc"),
        ("CODE SNIPPETS & TEMPLATES", "code"),
        ("COMMON MISTAKES TO AVOID", "err"),
        ("PROBLEM-SOLVING HEURISTICS", "prob"),
        ("CONTEXT CLUES & INDICATORS", "ctx"),
        ("OTHERS", "misc"),
    ),
    "appworld": (
        ("STRATEGIES AND HARD RULES", "shr"),
        ("APIs TO USE FOR SPECIFIC INFORMATION", "api"),
        ("USEFUL CODE SNIPPETS AND TEMPLATES", "code"),
        ("COMMON MISTAKES AND CORRECT STRATEGIES", "cms"),
        ("PROBLEM-SOLVING HEURISTICS AND WORKFLOWS", "psw"),
        ("VERIFICATION CHECKLIST", "vc"),
        ("TROUBLESHOOTING AND PITFALLS", "ts"),
        ("OTHERS", "misc"),
    ),
}
OTHERS = "others"
INITIAL_SOURCE = MemorySource("initial-playbook", None, "initial", "playbook file", "initial")
_ID = re.compile(r"^\[([^\]]+)\]\s*(?:helpful=(\d+)\s*harmful=(\d+)\s*::\s*)?(.*)$")
_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)


def normalize(section: str) -> str:
    """The original's section key: lower case, spaces to `_`, `&` to `and`, no colon."""
    return section.strip().lower().replace(" ", "_").replace("&", "and").rstrip(":")


@dataclass(frozen=True)
class SectionSet:
    names: tuple[str, ...]  # as the playbook shows them
    keys: tuple[str, ...]  # normalized
    slugs: dict[str, str]  # key -> id slug

    @classmethod
    def of(cls, name: str) -> SectionSet:
        pairs = SECTIONS[name]
        keys = tuple(normalize(n) for n, _ in pairs)
        return cls(
            tuple(n for n, _ in pairs), keys, {k: s for k, (_, s) in zip(keys, pairs, strict=True)}
        )

    def key(self, section: str) -> tuple[str, bool]:
        """(the section's key, whether it was known): an unknown one is OTHERS."""
        key = normalize(section)
        return (key, True) if key in self.keys else (OTHERS, False)


def next_number(bullets: Iterable[Bullet]) -> int:
    """The next id number: one past the highest (the original's `get_next_global_id`)."""
    numbers = [int(m.group(1)) for b in bullets if (m := re.search(r"-(\d+)$", b.memory_id))]
    return max(numbers, default=0) + 1


def render(bullets: Sequence[Bullet], sections: SectionSet, counts: bool) -> str:
    """The playbook's text: every section header, its bullets in the order added."""
    lines: list[str] = []
    by_section: dict[str, list[Bullet]] = {}
    for bullet in sorted(bullets, key=lambda b: (b.order, b.memory_id)):
        by_section.setdefault(bullet.section, []).append(bullet)
    for name, key in zip(sections.names, sections.keys, strict=True):
        if lines:
            lines.append("")
        lines.append(prompts.SECTION_LINE.format(name=name))
        for b in by_section.get(key, []):
            line = prompts.BULLET_COUNTS if counts else prompts.BULLET_PLAIN
            content = " ".join(b.content.split())
            lines.append(
                line.format(id=b.memory_id, helpful=b.helpful, harmful=b.harmful, content=content)
            )
    return "\n".join(lines)


# A bullet id as a play cites it (`[shr-00001]`; any id of an initial playbook file).
_CITED_ID = re.compile(r"\[([^\[\]\s]{1,64})\]")


def cited_ids(texts: Iterable[str]) -> list[str]:
    """Every `[id]` in `texts`, each once, in the order first cited (ace.py's generator
    reads the `[xxx-00001]`s of its answer: core/generator.py
    `_extract_bullet_ids_regex`); which of them name bullets is the caller's to check."""
    out: dict[str, None] = {}
    for text in texts:
        out.update(dict.fromkeys(_CITED_ID.findall(text)))
    return list(out)


def render_lines(bullets: Sequence[Bullet], sections: SectionSet, counts: bool) -> str:
    """The bullets one per line, in the playbook's order, no section headers (ace.py's
    `extract_playbook_bullets`: the reflector's `bullets_used`)."""
    place = {key: i for i, key in enumerate(sections.keys)}
    line = prompts.BULLET_COUNTS if counts else prompts.BULLET_PLAIN
    return "\n".join(
        line.format(
            id=b.memory_id,
            helpful=b.helpful,
            harmful=b.harmful,
            content=" ".join(b.content.split()),
        )
        for b in sorted(
            bullets, key=lambda b: (place.get(b.section, len(place)), b.order, b.memory_id)
        )
    )


def bounded(
    bullets: Sequence[Bullet], sections: SectionSet, counts: bool, max_chars: int | None
) -> tuple[str, int]:
    """The playbook's text within `max_chars` (None: whole) and how many bullets were
    left out. Section-aware: bullets are taken in turn from every section (each in the
    order added) while the rendering fits, so a long early section cannot crowd out the
    later ones, as a cut from the head would; the sections keep their order."""
    text = render(bullets, sections, counts)
    if max_chars is None or len(text) <= max_chars:
        return text, 0
    queues: dict[str, list[Bullet]] = {}
    for bullet in sorted(bullets, key=lambda b: (b.order, b.memory_id)):
        queues.setdefault(bullet.section, []).append(bullet)
    order = [key for key in sections.keys if key in queues]
    order += [key for key in queues if key not in order]
    kept: list[Bullet] = []
    size = len(render([], sections, counts))
    blocked: set[str] = set()
    while len(blocked) < len(order):
        for key in order:
            if key in blocked or not queues[key]:
                blocked.add(key)
                continue
            bullet = queues[key][0]
            line = len(render([bullet], sections, counts)) - len(render([], sections, counts))
            if size + line > max_chars:
                blocked.add(key)  # this section's next bullet does not fit: it is full
                continue
            kept.append(queues[key].pop(0))
            size += line
    return render(kept, sections, counts), len(bullets) - len(kept)


def stats(bullets: Sequence[Bullet]) -> str:
    counts: dict[str, int] = {}
    for b in bullets:
        counts[b.section] = counts.get(b.section, 0) + 1
    parts = ", ".join(f"{k}: {n}" for k, n in sorted(counts.items()))
    return f"{len(bullets)} bullets" + (f" ({parts})" if parts else "")


def read_initial(path: str, sections: SectionSet) -> list[Bullet]:
    """The bullets of a playbook file in the original's format (see AceSettings)."""
    text = Path(path).expanduser().read_text(encoding="utf-8")
    return parse_initial(text, sections)


def parse_initial(text: str, sections: SectionSet) -> list[Bullet]:
    out: list[Bullet] = []
    section = OTHERS
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("##"):
            section = sections.key(stripped.lstrip("#"))[0]
            continue
        match = _ID.match(stripped)
        if not match or not match.group(4).strip():
            continue
        helpful, harmful = int(match.group(2) or 0), int(match.group(3) or 0)
        out.append(
            Bullet(
                match.group(1),
                INITIAL_SOURCE,
                section,
                match.group(4).strip(),
                helpful,
                harmful,
                len(out),
            )  # fmt: skip
        )
    return out


def json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object of an answer: the whole text, a fenced block, or the
    first balanced `{...}` (the original's `extract_json_from_text`, written anew)."""
    candidates = [text.strip(), *(m.strip() for m in _FENCED.findall(text))]
    start = text.find("{")
    while start != -1:
        depth, in_string, escaped = 0, False, False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escaped:
                    escaped = False
                elif ch == "\\":
                    escaped = True
                elif ch == '"':
                    in_string = False
                continue
            if ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    candidates.append(text[start : i + 1])
                    break
        start = text.find("{", start + 1) if depth else -1
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(value, dict):
            return value
    return None


REFLECTION_FIELDS = (
    "reasoning", "error_identification", "root_cause_analysis", "correct_approach",
    "key_insight",
)  # fmt: skip
TAGS = ("helpful", "harmful", "neutral")


@dataclass(frozen=True)
class Reflection:
    text: str  # the fields, as the curator reads them
    tags: tuple[tuple[str, str], ...]  # (bullet id, helpful | harmful | neutral)


def parse_reflection(text: str, known: set[str]) -> tuple[Reflection | None, list[Violation]]:
    data = json_object(text)
    if data is None:
        return None, [Violation("not_json", "no JSON object")]
    fields = {k: data.get(k) for k in REFLECTION_FIELDS}
    if not any(isinstance(v, str) and v.strip() for v in fields.values()):
        return None, [Violation("empty", "none of " + ", ".join(REFLECTION_FIELDS) + " is set")]
    body = "\n".join(
        f"{k}: {v.strip()}" for k, v in fields.items() if isinstance(v, str) and v.strip()
    )
    tags = []
    raw = data.get("bullet_tags")
    for item in raw if isinstance(raw, list) else []:
        if not isinstance(item, dict):
            continue
        bullet = str(item.get("id") or item.get("bullet_id") or item.get("bullet") or "")
        tag = str(item.get("tag", "")).lower()
        if bullet in known and tag in TAGS:  # an unknown id or tag is ignored (original)
            tags.append((bullet, tag))
    return Reflection(body, tuple(tags)), []


@dataclass(frozen=True)
class Addition:
    section: str  # key
    content: str
    known_section: bool


def parse_curation_as_harness(
    text: str, sections: SectionSet
) -> tuple[list[Addition] | None, list[Violation]]:
    """A curator answer read as ACE's AppWorld harness reads it (adaptation_react.py
    `curator_call`, its strict validation): all of it, or nothing (an empty list: the
    playbook stays as it was; the harness asks no second time). A section outside the
    playbook's is an addition marked unknown (the caller skips it, as the harness does)."""
    data = json_object(text)
    if data is None:
        return [], [Violation("not_json", "no JSON object")]
    if not isinstance(data.get("reasoning"), str):
        return [], [Violation("no_reasoning", "`reasoning` must be a string")]
    operations = data.get("operations")
    if not isinstance(operations, list):
        return [], [Violation("no_operations", "`operations` must be a list")]
    out: list[Addition] = []
    for i, op in enumerate(operations):
        if not isinstance(op, dict) or op.get("type") != "ADD":
            return [], [Violation("not_add", f"operation {i} is not an ADD object")]
        if not {"section", "content"} <= set(op):
            return [], [Violation("missing_fields", f"ADD operation {i} lacks a field")]
        key, known = sections.key(str(op.get("section", "")))
        out.append(Addition(key, str(op["content"]).strip(), known))
    return out, []


def parse_curation(
    text: str, sections: SectionSet
) -> tuple[list[Addition] | None, list[Violation]]:
    data = json_object(text)
    if data is None:
        return None, [Violation("not_json", "no JSON object")]
    operations = data.get("operations")
    if not isinstance(operations, list):
        return None, [Violation("no_operations", "`operations` must be a list")]
    out: list[Addition] = []
    problems: list[Violation] = []
    for i, op in enumerate(operations):
        if not isinstance(op, dict):
            problems.append(Violation("operation", f"operation {i} is not an object"))
            continue
        kind = str(op.get("type", "")).upper()
        content = op.get("content")
        if kind != "ADD":
            # The original's curator accepts ADD only (adaptation_react.py).
            problems.append(Violation("not_add", f"operation {i}: only ADD is supported"))
            continue
        if not isinstance(content, str) or not content.strip():
            problems.append(Violation("no_content", f"operation {i} has no content"))
            continue
        key, known = sections.key(str(op.get("section", "")))
        out.append(Addition(key, content.strip(), known))
    if problems and not out:
        return None, problems
    return out, []
