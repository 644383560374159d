"""Safety bounds on memory, the same for every method (`config.MemoryBounds`, ours).

Builder output is model output: untrusted, of any length, and read back into a
student's prompt. So, method-agnostically:

- at build time (`bound_bank`, on every bank a build or render stage writes): each text
  field of an entry is cut to `max_field_chars`, an entry's text fields together to
  `max_entry_chars`, and text that would pass for structure is made inert: the chat
  template control tokens of the model families we serve (`<|im_start|>`, `[INST]`,
  `<start_of_turn>`, `</s>`, `<think>`, ...), memory tags (`</memory>`) and, at the start
  of a line, the delimiters the method's own rendering uses (its `memory_delimiters`:
  `[Workflow]`, `# Memory Item`, ...), so no entry can close its memory block, open a
  system turn or fake another entry. Everything is counted in the bank's stats
  (`bounds:field_cuts`, `bounds:entry_cuts`, `bounds:neutralised`);
- at read time (`BoundedHooks`, around every method's episode hooks): what one hook
  call adds to the system prompt, the user's message or an observation is cut to
  `max_injected_chars`, counted in the episode record (`memory_injection_cut`).

An inert marker keeps its letters between guillemets (`<|im_start|>` becomes
`‹|im_start|›`, `[Workflow]` at a line start `‹Workflow›`): readable in a report, never a
token or a delimiter.
"""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from distillery.workers.envs.base import ToolResult
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.config import MemoryBounds
from distillery.workers.memory.entries import MemorySource

# Control tokens and tags anywhere in a text: ChatML / Qwen / Llama 3 / Phi (`<|...|>`,
# DeepSeek's full-width bars too), Llama 2 / Mistral (`[INST]`, `<<SYS>>`, `<s>`),
# Gemma (`<start_of_turn>`), reasoning and tool-call tags, and memory tags.
CONTROL_MARKERS = re.compile(
    r"<[|｜][^<>\n]{0,64}?[|｜]>"
    r"|\[/?INST\]|<</?SYS>>|</?s>|<(?:start|end)_of_turn>|<(?:bos|eos|pad)>"
    r"|</?(?:think|tool_call|tool_response|memory|memories)\b[^<>\n]{0,40}>",
    re.IGNORECASE,
)
CUT_MARK = "\n[... {n} characters cut]"
INJECTION_CUT_MARK = "\n[memory cut: {n} characters]"


def memory_delimiters(kind: str) -> tuple[str, ...]:
    """The delimiters a method's rendering uses (regular expressions, matched where a
    line starts), from its optional `memory_delimiters` attribute."""
    from distillery.workers.memory.registry import memory_method

    return tuple(getattr(memory_method(kind), "memory_delimiters", ()))


def inert(marker: str) -> str:
    """A marker with its brackets replaced: readable, never a token or a delimiter."""
    inner = marker.strip().strip("<>[]").strip()
    return f"‹{inner}›"


def delimiter_pattern(delimiters: Sequence[str]) -> re.Pattern[str] | None:
    """The method's delimiters (regular expressions) where they start a line."""
    if not delimiters:
        return None
    alternatives = "|".join(f"(?:{d})" for d in delimiters)
    return re.compile(rf"^([ \t]*)({alternatives})", re.MULTILINE)


def neutralise(text: str, delimiters: re.Pattern[str] | None) -> tuple[str, int]:
    """`text` with every control marker, and every delimiter starting a line, inert;
    how many were."""
    count = 0

    def control(match: re.Match[str]) -> str:
        nonlocal count
        count += 1
        return inert(match.group(0))

    text = CONTROL_MARKERS.sub(control, text)
    if delimiters is not None:

        def delimiter(match: re.Match[str]) -> str:
            nonlocal count
            count += 1
            return match.group(1) + inert(match.group(2))

        text = delimiters.sub(delimiter, text)
    return text, count


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + CUT_MARK.format(n=len(text) - limit)


def _texts(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _texts(item)
    elif dataclasses.is_dataclass(value) and not isinstance(value, (type, MemorySource)):
        for f in dataclasses.fields(value):
            if f.name != "memory_id":
                yield from _texts(getattr(value, f.name))


def entry_chars(entry: Any) -> int:
    """The characters of an entry's text fields (its id and provenance excepted)."""
    return sum(len(t) for t in _texts(entry))


def _map_texts(value: Any, fn: Any) -> Any:
    """`value` with `fn` applied to every text field (ids and provenance kept)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_texts(v, fn) for v in value]
    if isinstance(value, tuple):
        return tuple(_map_texts(v, fn) for v in value)
    if dataclasses.is_dataclass(value) and not isinstance(value, (type, MemorySource)):
        changes = {}
        for f in dataclasses.fields(value):
            if f.name == "memory_id" or not f.init:
                continue
            old = getattr(value, f.name)
            new = _map_texts(old, fn)
            if new is not old and new != old:
                changes[f.name] = new
        return dataclasses.replace(value, **changes) if changes else value
    return value  # numbers, flags, dicts (a benchmark's own schemas)


def bound_entry(
    entry: Any, bounds: MemoryBounds, delimiters: re.Pattern[str] | None, counts: Counter[str]
) -> Any:
    """One entry within the bounds (see the module docstring); `counts` updated."""

    def per_field(text: str) -> str:
        if bounds.neutralise_markers:
            text, n = neutralise(text, delimiters)
            counts["bounds:neutralised"] += n
        if len(text) > bounds.max_field_chars:
            counts["bounds:field_cuts"] += 1
            text = _cut(text, bounds.max_field_chars)
        return text

    entry = _map_texts(entry, per_field)
    total = entry_chars(entry)
    if total > bounds.max_entry_chars:
        # Every field keeps its share of the budget (at least a line's worth).
        counts["bounds:entry_cuts"] += 1
        share = bounds.max_entry_chars / total
        entry = _map_texts(entry, lambda t: _cut(t, max(80, int(len(t) * share) - 40)))
    return entry


def bound_bank(bank: BuiltBank, bounds: MemoryBounds, delimiters: Sequence[str]) -> BuiltBank:
    """The bank with every entry within the bounds; what was cut or neutralised is
    added to its stats."""
    pattern = delimiter_pattern(delimiters) if bounds.neutralise_markers else None
    counts: Counter[str] = Counter()
    collections = {
        name: [bound_entry(e, bounds, pattern, counts) for e in entries]
        for name, entries in bank.collections.items()
    }
    stats = dict(bank.stats)
    for key, n in counts.items():
        stats[key] = stats.get(key, 0) + n
    return BuiltBank(bank.prefix, bank.specs, collections, stats)


# -- read time ------------------------------------------------------------------------


def cut_injection(before: str, after: str, limit: int) -> tuple[str, bool]:
    """`after` (a hook's rewrite of `before`) with what it added cut to `limit`
    characters; whether it was. Memory goes before or after the original text (every
    method so far); where it went elsewhere, the whole is cut to the original plus
    `limit`."""
    added = len(after) - len(before)
    if added <= limit:
        return after, False
    if after.endswith(before):  # memory first
        block = after[:added]
        return block[:limit] + INJECTION_CUT_MARK.format(n=added - limit) + before, True
    if after.startswith(before):  # memory last
        block = after[len(before) :]
        return before + block[:limit] + INJECTION_CUT_MARK.format(n=added - limit), True
    keep = len(before) + limit
    return after[:keep] + INJECTION_CUT_MARK.format(n=len(after) - keep), True


class BoundedHooks:
    """A memory method's episode hooks with what each call injects bounded (read time);
    everything else is the method's own."""

    def __init__(self, hooks: Any, max_injected_chars: int) -> None:
        self._hooks = hooks
        self._limit = max_injected_chars
        self.cuts = 0

    def _bounded(self, before: str, after: str) -> str:
        if not isinstance(after, str):
            return after
        after, cut = cut_injection(before, after, self._limit)
        self.cuts += cut
        return after

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        prompt = await self._hooks.before_turn(turn_index, user_text, system_prompt)
        return self._bounded(system_prompt, prompt)

    async def user_message(self, turn_index: int, user_text: str) -> str:
        rewrite = getattr(self._hooks, "user_message", None)
        if rewrite is None:
            return user_text
        return self._bounded(user_text, await rewrite(turn_index, user_text))

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        shown = await self._hooks.after_step(turn_index, user_text, observations)
        if len(shown) != len(observations):
            return shown
        out = []
        for before, after in zip(observations, shown, strict=True):
            content = self._bounded(before.content, after.content)
            out.append(
                after if content is after.content else dataclasses.replace(after, content=content)
            )
        return out

    def model_usage(self) -> Any:
        return self._hooks.model_usage()

    def record(self) -> dict[str, Any]:
        record = dict(self._hooks.record())
        if self.cuts:
            record["memory_injection_cut"] = self.cuts
        return record
