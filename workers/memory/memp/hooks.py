"""MemP's episode hooks: retrieve once, before the first turn, and inject the
procedures where the original does (the first user message by default).

With `loop_hints` (the AMD authors' AppWorld port, memp_amd_appworld) the hooks also
append their student's loop hints after a step's output (`step_messages`,
memory/repeats.py `LoopHints`), counted in the record.

Build-only (the student is evaluated frozen): the original's online Update (adding,
validating, reflecting on or discarding memories after each task, `Memory.update`) is
never run; the bank read is the one built from the teacher's trajectories.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from distillery.workers.agents.hook_messages import StepMessages
from distillery.workers.envs.conventions import ContextChoice
from distillery.workers.llm.types import InvalidReply, RequestRejected, Usage
from distillery.workers.memory.building import strip_reasoning
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.memp import prompts
from distillery.workers.memory.memp.build import (
    MAX_KEYWORDS,
    MIN_KEYWORDS,
    json_object,
    keywords_of,
)
from distillery.workers.memory.memp.records import KEYWORD_COLLECTION, QUERY_COLLECTION
from distillery.workers.memory.memp.settings import MempSettings
from distillery.workers.memory.port_context import context_choice
from distillery.workers.memory.repeats import LoopHints

AskModel = Callable[[list[dict[str, Any]]], Awaitable[Any]]


def render_block(entries: list[Any], content: str, show_outcome: bool = False) -> str:
    """The retrieved procedures as the student reads them (empty: nothing retrieved);
    `show_outcome`: each labelled with its trajectory's verdict (the ports' student)."""
    if not entries:
        return ""
    parts = [prompts.MEMORY_HEADER]
    for entry in entries:
        lines = [f"{prompts.REQUEST_LABEL} {entry.query}"]
        if show_outcome:
            lines.append(f"{prompts.OUTCOME_LABEL} {entry.outcome.upper()}")
        if content in ("script", "both"):
            lines += [prompts.SCRIPT_LABEL, entry.script]
        if content in ("trajectory", "both"):
            lines += [prompts.TRAJECTORY_LABEL, entry.trajectory]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def parse_keywords(text: str) -> tuple[str, ...]:
    """The student's keywords (at most MAX_KEYWORDS, deduplicated), or () if its answer
    holds none."""
    data = json_object(strip_reasoning(text or ""))
    words = data.get("keywords") if isinstance(data, dict) else data
    if not isinstance(words, list):
        return ()
    out: list[str] = []
    for word in words:
        if isinstance(word, str) and " ".join(word.split()):
            word = " ".join(word.split())
            if word.lower() not in (o.lower() for o in out):
                out.append(word)
    return tuple(out[:MAX_KEYWORDS])


@dataclass
class MempHooks:
    task_id: str
    search: Any  # the bank's generic search (memory_service.BankSearch)
    settings: MempSettings
    allows: Callable[[MemorySource], bool]
    ask_model: AskModel | None = None
    show_outcome: bool = False  # the AMD authors' ports label each procedure's verdict
    # The AMD authors' AppWorld student's loop hints after a step's output (`loop_hints`).
    loop_hints: LoopHints | None = None
    log: dict[str, Any] = field(
        default_factory=lambda: {
            "retrieve": None,
            "keywords": None,
            "keywords_fallback": False,
            "retrieved": [],
            "scores": [],
            "isolation_checked": 0,
            "isolation_violations": 0,
            "injected": 0,
            "injected_chars": 0,
        }
    )
    _block: str = ""
    _calls: int = 0
    _usage: Usage = field(default_factory=Usage)

    @property
    def prompt_framing(self) -> str | None:
        """In a benchmark's own opening prompt (AppWorld's), the ports' framing of
        labelled procedures (workers/envs/appworld/framings.py); the original's keeps
        the prompt's own."""
        return "memp" if self.show_outcome else None

    @property
    def context_choice(self) -> ContextChoice | None:
        """The benchmark's context trim and buffer the settings choose (the AMD authors'
        AppWorld student's, in memp_amd_appworld); None: the benchmark's own."""
        return context_choice(self.settings)

    # -- EpisodeHooks -------------------------------------------------------------

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            await self._retrieve(user_text)
        if self._block and self.settings.placement == "system":
            return f"{system_prompt}\n\n{self._block}" if system_prompt else self._block
        return system_prompt

    async def user_message(self, turn_index: int, user_text: str) -> str:
        # The original appends its guidelines to the task's first observation.
        if turn_index == 0 and self._block and self.settings.placement == "user":
            return f"{user_text}\n\n{self._block}"
        return user_text

    async def after_step(self, turn_index: int, user_text: str, observations: list) -> list:
        return observations

    async def step_messages(
        self, turn_index: int, steps_done: int, reply: str | None, observations: list
    ) -> StepMessages | None:
        """The ports' loop hint after a step's output, when one holds (`loop_hints`)."""
        if self.loop_hints is None or reply is None:
            return None
        hint = self.loop_hints.after_step(observations)
        return StepMessages(appended=(hint,)) if hint else None

    def model_usage(self) -> tuple[int, Usage]:
        return self._calls, self._usage

    def record(self) -> dict[str, Any]:
        out = dict(self.log)
        if self.loop_hints is not None:
            out["loop_hints"] = dict(self.loop_hints.fired)
        return out

    # -- retrieval ----------------------------------------------------------------

    async def _retrieve(self, query: str) -> None:
        s = self.settings
        self.log["retrieve"] = s.retrieve
        if s.retrieve == "keywords":
            keywords = await self._keywords(query)
            self.log["keywords"] = list(keywords)
            (hits,) = await self.search.search(
                KEYWORD_COLLECTION, list(keywords), self.task_id, s.k, s.threshold,
                combine="mean",
            )  # fmt: skip
        else:
            (hits,) = await self.search.search(
                QUERY_COLLECTION, [query], self.task_id, s.k, s.threshold
            )
        kept = []
        for hit in hits:  # the method's own audit of what it injects
            self.log["isolation_checked"] += 1
            if self.allows(hit.entry.source):
                kept.append(hit)
            else:
                self.log["isolation_violations"] += 1
        self.log["retrieved"] = [h.entry.memory_id for h in kept]
        self.log["scores"] = [round(h.score, 6) for h in kept]
        self._block = render_block([h.entry for h in kept], s.content, self.show_outcome)
        if self.show_outcome:
            self.log["injected_failures"] = sum(h.entry.outcome != "success" for h in kept)
        self.log["injected"] = len(kept)
        self.log["injected_chars"] = len(self._block)

    async def _keywords(self, query: str) -> tuple[str, ...]:
        """The student's keywords of the query (one request, as the AMD authors' student
        asks its own model), or the deterministic ones (no model, a refused request or
        an answer without keywords; logged as `keywords_fallback`)."""
        if self.ask_model is not None:
            prompt = prompts.KEYWORD_PROMPT.format(
                query=query, min_keywords=MIN_KEYWORDS, max_keywords=MAX_KEYWORDS
            )
            try:
                result = await self.ask_model([{"role": "user", "content": prompt}])
            except (RequestRejected, InvalidReply):
                result = None
            if result is not None:
                self._calls += 1
                self._usage = self._usage + result.usage
                words = parse_keywords(result.text)
                if words:
                    return words
        self.log["keywords_fallback"] = True
        return keywords_of(query) or (query,)
