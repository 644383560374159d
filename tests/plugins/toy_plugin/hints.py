"""`toy_hint`: an outcome-driven memory method of another package, for tests ("retry
with a hint"), registered only through entry points: the stage kind `toy_retry`
(`distillery.stage_kinds`) and the method `toy_hint` (`distillery.memory_methods`).

The kind plays the memory split's tasks in order with the student, reading the hints
kept so far. A success moves on. A failure asks the teacher for a hint, which is staged
provisionally (only this task's re-plays see it) and the task re-played, up to
`R_MAX` times (the teacher revising the hint from the latest failure between them); a
recovery keeps the hint (committed: the next tasks read it), no recovery rolls it back.
The method reads the kept hints at evaluation, top-k by request similarity, in the
system prompt behind `MARKER`. It uses only distillery's public seams
(`workers.memory.api`, `orchestrator.ordered_stage`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, TaskContext
from distillery.workers.llm.types import Usage
from distillery.workers.memory.api import (
    BaseMemoryMethod,
    CollectionSpec,
    MemorySource,
    allowed_hits,
    audit_log,
)

MARKER = "[Toy hint]"
HEADER = f"{MARKER} Advice from earlier failures:"
TEACHER_PROMPT = (
    "A student failed this task. Task: {task}\nWhat it did: {calls}\n"
    "Write one short hint that would have helped it."
)
REVISE_PROMPT = "Your hint did not help; the student again did: {calls}\nWrite a better hint."
R_MAX = 2  # re-plays of a failed task
COLLECTION = "hints"


@dataclass(frozen=True)
class Hint:
    memory_id: str
    source: MemorySource
    request: str  # the first request of the task it was written for (the key)
    text: str

    @property
    def key_text(self) -> str:
        return self.request


COLLECTIONS = (CollectionSpec(COLLECTION, Hint),)


class HintSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    k: int = Field(2, ge=1, le=5)


@dataclass
class HintHooks:
    """Before the first turn: the kept hints (top-k) and what the stage staged for this
    task join the system prompt."""

    task_id: str
    search: Any
    settings: HintSettings
    allows: Any
    log: dict[str, Any] = field(default_factory=lambda: audit_log(shown=0, attempt=1))
    _block: str = ""

    async def before_turn(self, turn_index: int, user_text: str, system_prompt: str) -> str:
        if turn_index == 0:
            hints: list[Hint] = []
            if self.search.has_bank:
                (hits,) = await self.search.search(
                    COLLECTION, [user_text], self.task_id, self.settings.k, None
                )
                hints = [h.entry for h in allowed_hits(hits, self.allows, self.log)]
            staged = [
                h for h in self.search.staged if h.memory_id not in {x.memory_id for x in hints}
            ]
            shown = [*hints, *staged]
            self.log["shown"] = len(shown)
            self.log["attempt"] = self.search.attempt
            if shown:
                self._block = "\n".join([HEADER, *(f"- {h.text}" for h in shown)])
        return f"{self._block}\n\n{system_prompt}" if self._block else system_prompt

    async def after_step(self, turn_index: int, user_text: str, observations: list) -> list:
        return observations

    def model_usage(self) -> tuple[int, Usage]:
        return 0, Usage()

    def record(self) -> dict[str, Any]:
        return dict(self.log)


class HintMethod(BaseMemoryMethod):
    kind = "toy_hint"
    settings_model = HintSettings
    code_version = "1"
    collections = COLLECTIONS
    store_prefix = "toyhint"

    def bank_stage(self, planner: Any) -> Any:
        # Its bank is written by a stage of its own kind, on the memory split.
        return planner.stage("toy_retry", memory_kind=self.kind)

    def hook_texts(self) -> tuple[str, ...]:
        return (HEADER,)

    def hooks(
        self, task: Any, search: Any, settings: Any, allows: Any, ask_model: Any
    ) -> HintHooks:
        return HintHooks(task.task_id, search, settings, allows)

    def metrics(self, records: Any) -> dict[str, float]:
        from distillery.workers.memory.api import summed_counters

        return summed_counters(records, ("shown", "isolation_checked", "isolation_violations"))


def _calls(play: Any) -> str:
    calls = [c.call for s in play.record.steps for c in s.calls]
    return "; ".join(calls) or "no call at all"


class RetryWithHint:
    """The stage's program (see the module's docstring)."""

    def texts(self) -> tuple[str, ...]:
        return (TEACHER_PROMPT, REVISE_PROMPT, str(R_MAX))

    async def play_task(self, ctx: TaskContext) -> Any:
        play = await ctx.play()
        if play.success:
            return None
        request = ctx.task.turns[0]
        prompt = TEACHER_PROMPT.format(task=request, calls=_calls(play))
        for attempt in range(R_MAX):
            reply = await ctx.ask("teacher", [{"role": "user", "content": prompt}])
            hint = Hint(f"hint:{ctx.task.task_id}", ctx.source(play), request, reply.text.strip())
            ctx.event("drafted", hint=hint.text, attempt=attempt + 1)
            ctx.stage(COLLECTION, [hint])
            play = await ctx.play()
            if play.success:
                ctx.event("validated", hint=hint.text, attempt=play.attempt)
                return {"text": hint.text, "attempt": play.attempt}
            prompt = REVISE_PROMPT.format(calls=_calls(play))
        ctx.rollback()
        ctx.event("rejected", reason=f"no recovery in {R_MAX} re-plays")
        return None

    async def commit_task(self, ctx: TaskContext, result: Any) -> None:
        if result is None:
            return
        request = ctx.task.turns[0]
        source = ctx.source(ctx.plays[-1])
        ctx.commit(COLLECTION, [Hint(f"hint:{ctx.task.task_id}", source, request, result["text"])])


@dataclass(frozen=True, kw_only=True)
class RetryStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "toy_retry"
    code_version: ClassVar[str] = "1"

    def program(self) -> RetryWithHint:
        return RetryWithHint()

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> RetryStage:
        from distillery.workers.memory.registry import memory_method

        cfg, kind = planner.cfg, inputs["memory_kind"]
        settings = cfg.retrieval_for(planner.method_name)
        identity = {
            **planner.episode_identity(cfg.student, 0),
            "teacher": planner.model_identity(cfg.teacher),
            "memory_task_ids": planner.memory_task_ids(),
            "split": planner.split.memory_split,
            "retrieval": memory_method(kind).read_identity(settings),
            "wave_size": 1,
        }
        node = cls(
            identity=identity,
            upstream=(),
            label=f"toy_retry student={cfg.student.name} teacher={cfg.teacher.name}",
            model=planner.served(cfg.student),
            other_models={"teacher": cfg.teacher},
            memory_kind=kind,
            settings=settings,
            split=planner.split.memory_split,
        )
        planner.add(node, planner.split.memory_ids)
        return node
