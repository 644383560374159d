"""SASM at inference as episode hooks: before each user turn the student decomposes the
request into (category, description) subtasks, each subtask retrieves the top-k
experiences OF ITS OWN CATEGORY by description similarity (the collection's group
filter: the paper's two-stage, category-gated retrieval), and the experiences go in
front of the system prompt for that turn.

This is the AMD authors' "upfront" SASM student (sasm_evaluation_react.py,
`SASMUpfrontEvaluationReActAgent`: decompose with the student model, retrieve one
experience per distinct category, inject them all before acting), applied to every
user turn of a multi-turn task (settings `student: upfront`, the default of the `sasm`
entry). On AppWorld the experiences go into the upfront student's prompt where it puts
them (`prompt_framing`). Their default student, which moves one category's experience
at each subtask transition the model announces in its reply, is `transition.py`
(`student: transition`, the `sasm_amd_appworld` entry of the AppWorld paper runs). With
`repeat_warning` both append the port's warning when the same code ran three times in a
row (memory/repeats.py), counted in the record (`repeat_warnings`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from distillery.workers.agents.hook_messages import StepMessages
from distillery.workers.envs.base import ToolResult
from distillery.workers.envs.conventions import ContextChoice
from distillery.workers.llm.types import ChatResult, InvalidReply, RequestRejected, Usage
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.port_context import context_choice
from distillery.workers.memory.repeats import RepeatedCode
from distillery.workers.memory.sasm import prompts
from distillery.workers.memory.sasm.records import CATEGORIES, COLLECTION

AskModel = Callable[[list[dict[str, Any]]], Awaitable[ChatResult]]

# After a step's output when the last three steps ran the same code (`repeat_warning`:
# both of the port's students, sasm_evaluation_react.py lines 165-175 and 370-380; our
# wording of theirs).
REPEAT_WARNING = (
    "⚠️ The exact same code has now run again and again without any progress. Stop, and "
    "take a completely different approach.\n\n"
)


def parse_decomposition(text: str, max_subtasks: int) -> tuple[list[tuple[str, str]], str | None]:
    """(z, d) pairs of the student's answer: items with a known category and a
    description are kept (as the port keeps them), at most `max_subtasks`; none kept
    is a problem to retry on."""
    match = re.search(r"\{.*\}|\[.*\]", text or "", re.DOTALL)
    if not match:
        return [], "no JSON object found"
    try:
        value = json.loads(match.group(0))
    except json.JSONDecodeError as exc:
        return [], f"invalid JSON ({exc.msg})"
    items = value.get("subtasks") if isinstance(value, dict) else value
    if not isinstance(items, list):
        return [], 'expected {"subtasks": [...]}'
    pairs = [
        (item["z"], " ".join(item["d"].split()))
        for item in items
        if isinstance(item, dict)
        and item.get("z") in CATEGORIES
        and isinstance(item.get("d"), str)
        and item["d"].strip()
    ]
    if not pairs:
        return [], f"no subtask with a category among {', '.join(CATEGORIES)} and a description"
    return pairs[:max_subtasks], None


@dataclass
class SasmLog:
    """What the episode record keeps: per-turn decompositions and every hit, audited."""

    retrievals: list[dict[str, Any]] = field(default_factory=list)
    decompositions: list[dict[str, Any]] = field(default_factory=list)
    checked: int = 0
    violations: int = 0
    off_category: int = 0
    usage: Usage = Usage()
    llm_calls: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "retrievals": self.retrievals,
            "decompositions": self.decompositions,
            "isolation_checked": self.checked,
            "isolation_violations": self.violations,
            "off_category": self.off_category,
        }


class SasmHooks:
    """EpisodeHooks (and MemoryHooks) of one student episode with SASM memory."""

    # In a benchmark's own opening prompt (AppWorld's), the experiences go where the AMD
    # authors' upfront SASM student puts them: after the key instructions, under their
    # own heading (workers/envs/appworld/framings.py, port `sasm`).
    prompt_framing: ClassVar[str] = "sasm"

    def __init__(
        self,
        task_id: str,
        search: Any,
        settings: Any,
        allows: Callable[[MemorySource], bool],
        ask_model: AskModel | None,
    ) -> None:
        self.task_id, self.search, self.settings = task_id, search, settings
        self.allows, self.ask_model = allows, ask_model
        self.log = SasmLog()
        self._block = ""
        warn = getattr(settings, "repeat_warning", False)
        self.repeats = RepeatedCode(REPEAT_WARNING) if warn else None

    @property
    def context_choice(self) -> ContextChoice | None:
        """The benchmark's context trim and buffer the settings choose (the AMD
        authors' AppWorld students', in sasm_amd_appworld); None: the benchmark's own."""
        return context_choice(self.settings)

    def model_usage(self) -> tuple[int, Usage]:
        return self.log.llm_calls, self.log.usage

    def record(self) -> dict[str, Any]:
        out = self.log.as_dict()
        if self.repeats is not None:
            out["repeat_warnings"] = self.repeats.fired
        return out

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0 or self.settings.every_turn:
            subtasks = await self._decompose(turn_index, user_text)
            self._block = self._render(await self._retrieve(turn_index, subtasks))
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt

    async def after_step(
        self, turn_index: int, user_text: str, observations: list[ToolResult]
    ) -> list[ToolResult]:
        return observations  # SASM injects proactively only

    async def step_messages(
        self, turn_index: int, steps_done: int, reply: str | None, observations: list[ToolResult]
    ) -> StepMessages | None:
        """The repeated-code warning after a step's output (`repeat_warning`)."""
        if self.repeats is None or reply is None:
            return None
        warning = self.repeats.after_step(observations)
        return StepMessages(appended=(warning,)) if warning else None

    # -- the student's decomposition ------------------------------------------------

    async def _decompose(self, turn: int, request: str) -> list[tuple[str, str]]:
        """One retry naming the problem, then the port's fallback: every category,
        described by the request itself."""
        max_subtasks = self.settings.max_subtasks
        pairs: list[tuple[str, str]] = []
        if self.ask_model is not None:
            prompt = prompts.DECOMPOSE_PROMPT.format(
                categories=prompts.CATEGORY_GUIDE, max_subtasks=max_subtasks, request=request
            )
            messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
            for _ in range(2):
                try:
                    result = await self.ask_model(messages)
                except (RequestRejected, InvalidReply):
                    break  # the model could not answer: fall back, do not fail the episode
                self.log.usage = self.log.usage + result.usage
                self.log.llm_calls += 1
                pairs, problem = parse_decomposition(result.text, max_subtasks)
                if pairs:
                    break
                messages += [
                    {"role": "assistant", "content": result.text or ""},
                    {"role": "user", "content": prompts.RETRY_PROMPT.format(problems=problem)},
                ]
        fallback = not pairs
        if fallback:
            pairs = [(z, request) for z in CATEGORIES]
        self.log.decompositions.append(
            {"turn": turn, "subtasks": [list(p) for p in pairs], "fallback": fallback}
        )
        return pairs

    # -- category-gated retrieval -----------------------------------------------------

    async def _retrieve(self, turn: int, subtasks: list[tuple[str, str]]) -> list[Any]:
        """Each subtask's top-k within its category, in subtask order, each entry once.
        With `one_per_category` only a category's first subtask retrieves (the port)."""
        cfg = self.settings
        if cfg.one_per_category:
            seen: set[str] = set()
            subtasks = [p for p in subtasks if not (p[0] in seen or seen.add(p[0]))]
        by_category: dict[str, list[int]] = {}
        for i, (z, _) in enumerate(subtasks):
            by_category.setdefault(z, []).append(i)
        hits_of: dict[int, list[Any]] = {}
        for z, indices in by_category.items():
            queries = [subtasks[i][1] for i in indices]
            per_query = await self.search.search(
                COLLECTION, queries, self.task_id, cfg.k, cfg.threshold, group=z
            )
            hits_of.update(zip(indices, per_query, strict=True))
        entries, injected = [], set()
        for i, (z, _) in enumerate(subtasks):
            for hit in hits_of.get(i, []):
                entry = hit.entry
                allowed = self._audit(turn, z, hit)
                if allowed and entry.memory_id not in injected:
                    injected.add(entry.memory_id)
                    entries.append(entry)
        return entries

    def _audit(self, turn: int, category: str, hit: Any) -> bool:
        """Re-check the hit's provenance (and its category) against the protocol."""
        source: MemorySource = hit.entry.source
        isolated = self.allows(source)
        in_category = hit.entry.category == category  # the group filter, proven
        allowed = isolated and in_category
        self.log.checked += 1
        self.log.violations += not isolated
        self.log.off_category += not in_category
        self.log.retrievals.append(
            {
                "turn": turn,
                "category": category,
                "memory_id": hit.entry.memory_id,
                "source_task_id": source.task_id,
                "score": round(float(hit.score), 4),
                "allowed": allowed,
            }
        )
        return allowed

    def _render(self, entries: list[Any]) -> str:
        if not entries:
            return ""
        parts = [
            prompts.ENTRY_TEMPLATE.format(
                category=e.category, description=e.description, experience=e.experience
            )
            for e in entries
        ]
        block = "\n\n".join([prompts.MEMORY_HEADER, *parts])
        cap = self.settings.block_max_chars
        if cap is not None and len(block) > cap:
            block = block[: cap - 30].rstrip() + "\n[memory truncated]"
        return block
