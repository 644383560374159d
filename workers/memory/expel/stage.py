"""ExpeL's experience gathering and insight extraction: a stage kind of its own
(`expel`), on the memory split, played by the teacher.

For each training task in order (the original's `train.py`): the teacher plays it; a
failed play is reflected on (Reflexion: the teacher as `reflector`) and the task played
again with the reflections staged for it, up to `max_reflection_depth` times. Nothing
is committed while gathering (the original gathers with its plain ReflectAgent). After
the last task (the original's `create_rules`): for every task with a success, each of
its failed plays is compared with the success ("compare" critique), then the
successful trajectories, shuffled, are critiqued in chunks of at most
`success_critique_num` ("all-success" critique); each critique answers with operations
on the rule list so far (`rules.apply_operations`). Critiques are asked of the builder
model (`memory.builder.model`, the teacher by default; the original extracts with a
stronger model than it gathers with) as `insights`; an answer without a well-formed
operation is retried once, then skipped (counted: `critique_fallback`). The bank: the
final rules (`insights`) and each solved task's first successful trajectory
(`examples`).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, ClassVar

from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, TaskContext
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.expel import prompts
from distillery.workers.memory.expel.records import (
    EXAMPLES,
    INSIGHTS,
    REFLECTIONS,
    Example,
    Insight,
)
from distillery.workers.memory.expel.rules import (
    Operation,
    Rule,
    apply_operations,
    parse_operations,
)
from distillery.workers.memory.expel.settings import ExpelSettings
from distillery.workers.memory.reflexion.records import Reflection
from distillery.workers.memory.reflexion.reflect import TEXTS as REFLECTION_TEXTS
from distillery.workers.memory.reflexion.reflect import ReflectionLimits, reflect
from distillery.workers.memory.transcript import episode_transcript

REFLECTOR = "reflector"
INSIGHT_MODEL = "insights"
REFLECTIONS_SHOWN = 3  # Reflexion's memory size (alfworld_trial.py `memory[-3:]`)


@dataclass
class Experience:
    """What gathering left of one training task."""

    task_id: str
    request: str
    source: MemorySource
    success: str | None = None  # its first successful play, as a transcript
    success_source: MemorySource | None = None
    failures: list[str] = field(default_factory=list)  # its failed plays


def success_chunks(items: list[Any], size: int, seed: int) -> list[list[Any]]:
    """The original's `random_divide_list`: shuffled (seeded here), then divided into
    the fewest chunks of at most `size`, as even as can be."""
    items = list(items)
    random.Random(seed).shuffle(items)
    if len(items) <= size:
        return [items] if items else []
    n_chunks = math.ceil(len(items) / size)
    chunk = math.ceil(len(items) / n_chunks)
    return [items[i * chunk : (i + 1) * chunk] for i in range(n_chunks)]


class ExpelProgram:
    """The stage's program (see the module docstring)."""

    def __init__(self, settings: ExpelSettings, reflects: bool, extracts: bool) -> None:
        self.settings = settings
        self.reflects = reflects  # a model teacher (the oracle writes no reflection)
        self.extracts = extracts  # a builder model (none: no insight, counted)
        self.limits = ReflectionLimits(
            settings.feedback, settings.trajectory_chars, settings.observation_chars
        )
        self.experience: list[Experience] = []

    def texts(self) -> tuple[str, ...]:
        return (*REFLECTION_TEXTS, *prompts.TEXTS)

    async def play_task(self, ctx: TaskContext) -> Any:
        play = await ctx.play()
        reflections: list[Reflection] = []
        while (
            not play.success
            and self.reflects
            and len(reflections) < self.settings.max_reflection_depth
        ):
            shown = reflections[-REFLECTIONS_SHOWN:]
            reflections.append(await reflect(ctx, REFLECTOR, play, shown, self.limits))
            ctx.stage(REFLECTIONS, reflections)
            play = await ctx.play()
        return None

    async def commit_task(self, ctx: TaskContext, result: Any) -> None:
        s = self.settings
        last = ctx.plays[-1]
        task = ctx.task
        experience = Experience(task.task_id, task.turns[0] if task.turns else "", ctx.source(last))
        for play in ctx.plays:
            text = episode_transcript(
                play.record, task.turns, s.trajectory_chars, s.observation_chars
            )
            if play.success and experience.success is None:
                experience.success, experience.success_source = text, ctx.source(play)
            elif not play.success:
                experience.failures.append(text)
        self.experience.append(experience)
        if ctx.index == ctx.total - 1:  # the last task: extract, then write the bank
            await self.extract(ctx)

    async def critique(
        self, ctx: TaskContext, messages: list[dict[str, str]], what: str
    ) -> list[Operation]:
        """The operations of one critique (validated, retried once; none: skipped)."""
        if not self.extracts:
            ctx.event("critique_skipped", critique=what, reason="no builder model")
            return []
        for _ in range(2):
            reply = await ctx.ask(INSIGHT_MODEL, messages)
            operations = parse_operations(reply.text)
            if operations:
                return operations
            ctx.event("critique_invalid", critique=what, refused=reply.refused or "")
            if reply.refused:
                break
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": prompts.RETRY},
            ]
        ctx.event("critique_fallback", critique=what)
        return []

    async def extract(self, ctx: TaskContext) -> None:
        s = self.settings
        rules: list[Rule] = []
        next_id = 1

        async def update(messages: list[dict[str, str]], what: str, source: MemorySource) -> None:
            nonlocal rules, next_id
            operations = await self.critique(ctx, messages, what)
            rules, next_id, counts = apply_operations(
                rules, operations, s.max_num_rules, source, next_id
            )
            ctx.event("rules_updated", critique=what, rules=len(rules), **counts)

        for exp in self.experience:  # compare critiques, in task order
            if exp.success is None:
                continue
            for failure in exp.failures:
                full = len(rules) >= s.max_num_rules
                texts = [r.text for r in rules]
                messages = prompts.compare_messages(exp.request, exp.success, failure, texts, full)
                await update(messages, "compare", exp.source)
        solved = [e for e in self.experience if e.success is not None]
        for chunk in success_chunks(solved, s.success_critique_num, s.shuffle_seed):
            trials = [(e.request, e.success or "") for e in chunk]
            full = len(rules) >= s.max_num_rules
            messages = prompts.success_messages(trials, [r.text for r in rules], full)
            await update(messages, "all_success", chunk[0].source)
        insights = [
            Insight(f"insight:{r.rule_id}", r.source, r.text, r.importance, rank)
            for rank, r in enumerate(rules)
        ]
        examples = [
            Example(
                f"example:{e.task_id}", e.success_source or e.source, e.request, e.success or ""
            )
            for e in solved
        ]
        ctx.commit(INSIGHTS, insights)
        ctx.commit(EXAMPLES, examples)


@dataclass(frozen=True, kw_only=True)
class ExpelStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "expel"
    code_version: ClassVar[str] = "1"
    role: ClassVar[str] = "teacher"
    # Gathering reads no bank (the original gathers with its plain ReflectAgent): a
    # play reads only the reflections staged for its task.
    searches_live_bank: ClassVar[bool] = False

    def program(self) -> ExpelProgram:
        assert isinstance(self.settings, ExpelSettings)
        models = self.other_models
        return ExpelProgram(self.settings, REFLECTOR in models, INSIGHT_MODEL in models)

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> ExpelStage:
        cfg = planner.cfg
        teacher = cfg.teacher
        settings = cfg.retrieval_for(planner.method_name)
        assert isinstance(settings, ExpelSettings)
        builder = cfg.builder_model()
        others = {}
        if teacher.backend != "oracle":
            others[REFLECTOR] = teacher
        if builder is not None:
            others[INSIGHT_MODEL] = builder
        return cls.plan_on_memory_split(
            planner,
            teacher,
            {
                "method": inputs["memory_kind"],
                "models": {role: planner.model_identity(m) for role, m in sorted(others.items())},
                "build": settings.build_identity(),
            },
            f"expel teacher={teacher.name} {cfg.benchmark.name}",
            embedder=settings.embedder,
            other_models=others,
            memory_kind=inputs["memory_kind"],
            settings=settings,
        )
