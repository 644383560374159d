"""ACE's offline adaptation: a stage kind of its own (`ace`), on the memory split,
played by the teacher as ACE's generator, reading the playbook as it grows.

For each training task in order (ace.py `_train_single_sample`; the AppWorld harness's
`solve_task_wo_gt` with `max_rounds: 0`): the generator (the teacher) plays it with the
playbook so far. The reflector diagnoses the play against the environment's verdict
(never a ground truth) and tags the playbook's bullets helpful / harmful / neutral; a
failed play is re-played with the reflection (staged for this task only) and
re-reflected, up to `max_rounds` times or until solved. Then, every
`curator_frequency` tasks, the curator reads the latest reflection, the attempt and the
playbook and answers ADD operations: the delta, never a rewrite. The tags' counts and
the new bullets are committed (the next tasks read them); with `dedup_threshold`, a new
bullet that close to another (cosine under the sweep's embedder) is merged into it by
the curator (or dropped: `dedup_merge: false`). Reflector and curator are the builder
model (`memory.builder.model`: the teacher by default; ACE uses one model for all
three); an answer that is not the JSON asked for is retried once, then skipped
(counted: `reflection_fallback`, `curation_fallback`).

Two of ace.py's choices are options (settings.py): `reflector_reads: cited_bullets`,
the plays are asked to name the bullets they use and the reflector reads (and tags)
only those; `playbook_selection: best_on_validation`, part of the memory split is held
out and played after every `eval_steps`-th task with the playbook so far
(`validation.py`), the best playbook becoming the bank.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, TaskContext
from distillery.workers.memory.ace import appworld_prompts, prompts
from distillery.workers.memory.ace.playbook import (
    Addition,
    Reflection,
    SectionSet,
    cited_ids,
    next_number,
    parse_curation,
    parse_curation_as_harness,
    parse_initial,
    parse_reflection,
    render,
    render_lines,
    stats,
)
from distillery.workers.memory.ace.records import BULLETS, REFLECTIONS, Bullet
from distillery.workers.memory.ace.settings import AceSettings, AdaptationPlaySettings
from distillery.workers.memory.ace.validation import Validation, validation_split
from distillery.workers.memory.feedback import failure_detail
from distillery.workers.memory.reflexion.records import Reflection as StagedReflection
from distillery.workers.memory.transcript import TEXTS as TRANSCRIPT_TEXTS
from distillery.workers.memory.transcript import episode_transcript

REFLECTOR = "reflector"
BULLET_ID_SHAPE = re.compile(r"[A-Za-z]+-\d+")  # `<slug>-<n>` (playbook.py)
CURATOR = "curator"


class AceProgram:
    """The stage's program (see the module docstring)."""

    def __init__(
        self,
        settings: AceSettings,
        initial: list[Bullet],
        curates: bool,
        validation_ids: tuple[str, ...] = (),
    ) -> None:
        self.settings = settings
        self.sections = SectionSet.of(settings.sections)
        self.initial = initial
        self.curates = curates  # a builder model (none: the playbook stays as it is)
        self.cited = settings.reflector_reads == "cited_bullets"
        # best_on_validation: the validation tasks and the best accuracy so far (rebuilt
        # on resume: the framework replays every task's program in order).
        self.validation = (
            Validation(settings.eval_steps, validation_ids)
            if settings.playbook_selection == "best_on_validation"
            else None
        )

    def texts(self) -> tuple[str, ...]:
        cited = prompts.CITED_TEXTS if self.cited else ()  # set only: the old keys stay
        if self.settings.prompts == "appworld":
            return (*prompts.TEXTS, *TRANSCRIPT_TEXTS, *appworld_prompts.TEXTS, *cited)
        return (*prompts.TEXTS, *TRANSCRIPT_TEXTS, *cited)

    def _messages(self, play: Any) -> list[dict[str, Any]]:
        """The play's conversation as the AppWorld harness's reflector and curator read
        it (its messages), each content cut at `observation_chars` (ours)."""
        limit = self.settings.observation_chars
        out = []
        for message in json.loads(play.record.messages_json or "[]"):
            content = message.get("content")
            text = content if isinstance(content, str) else json.dumps(content)
            if len(text or "") > limit:
                text = text[:limit] + " …"
            out.append({"role": message.get("role", "unknown"), "content": text or ""})
        return out

    def _cited(self, ctx: TaskContext, play: Any, playbook: list[Bullet]) -> list[Bullet] | None:
        """The playbook's bullets the play cited (`[id]` in its own messages); None: it
        cited no id at all (ace.py tells the two apart to its reflector)."""
        texts = []
        for message in json.loads(play.record.messages_json or "[]"):
            content = message.get("content")
            if message.get("role") == "assistant" and content:
                texts.append(content if isinstance(content, str) else json.dumps(content))
        by_id = {b.memory_id: b for b in playbook}
        # Bracketed words that name no bullet: ids shaped like ours count as cited ones
        # that are not in the playbook (ace.py's "none found"); code's `x[i]` does not.
        ids = [i for i in cited_ids(texts) if i in by_id or BULLET_ID_SHAPE.fullmatch(i)]
        cited = [by_id[i] for i in ids if i in by_id]
        unknown = len(ids) - len(cited)
        ctx.event("bullets_cited", cited=[b.memory_id for b in cited], unknown_ids=unknown)
        return cited if ids else None

    def _playbook_text(
        self, ctx: TaskContext, play: Any, playbook: list[Bullet]
    ) -> tuple[str, list[Bullet]]:
        """What the reflector reads of the playbook, and the bullets it may tag: the
        playbook (`reflector_reads: playbook`) or the bullets the play cited, one a line
        (ace.py `extract_playbook_bullets`)."""
        counts = self.settings.prompts == "ours"  # the harness's reflector reads none
        if not self.cited:
            if not playbook:
                return (prompts.NO_PLAYBOOK if counts else ""), []
            return render(playbook, self.sections, counts), playbook
        cited = self._cited(ctx, play, playbook)
        if cited is None:
            return prompts.NONE_CITED, []
        if not cited:
            return prompts.CITED_NOT_FOUND, []
        return render_lines(cited, self.sections, counts), cited

    def _playbook(self, ctx: TaskContext) -> list[Bullet]:
        committed = ctx.committed(BULLETS)
        return committed if committed or not self.initial else list(self.initial)

    async def _ask_valid(
        self, ctx: TaskContext, role: str, prompt: str, retry: str, parse: Any, what: str
    ) -> Any:
        """A parsed answer of `role`, retried once naming the problem; None: skipped."""
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        for _ in range(2):
            reply = await ctx.ask(role, messages)
            value, problems = parse(reply.text)
            if not problems and value is not None:
                return value
            problem = reply.refused or "; ".join(p.message for p in problems) or "empty"
            ctx.event(f"{what}_invalid", problem=problem[:300])
            if reply.refused:
                break
            messages = [
                *messages,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": retry.format(problem=problem[:300])},
            ]
        ctx.event(f"{what}_fallback")
        return None

    async def reflect(
        self, ctx: TaskContext, play: Any, playbook: list[Bullet]
    ) -> Reflection | None:
        s = self.settings
        if s.feedback == "none":
            feedback = prompts.FEEDBACK_NONE
        elif play.success:
            feedback = prompts.FEEDBACK_SOLVED
        else:
            detail = failure_detail(play.record, s.feedback)  # "" when binary
            feedback = prompts.FEEDBACK_FAILED.removesuffix(".") + (
                f" ({detail})." if detail else "."
            )
        shown, taggable = self._playbook_text(ctx, play, playbook)
        if s.prompts == "appworld":  # the harness's own no-GT reflector, verbatim
            prompt = appworld_prompts.fill_reflector(shown, self._messages(play))
        else:
            prompt = self._reflector_prompt(ctx, play, shown, feedback)
        known = {b.memory_id for b in taggable}  # a tag of another bullet is not applied
        return await self._ask_valid(
            ctx, REFLECTOR, prompt, prompts.REFLECTION_RETRY,
            lambda text: parse_reflection(text, known), "reflection",
        )  # fmt: skip

    def _reflector_prompt(self, ctx: TaskContext, play: Any, shown: str, feedback: str) -> str:
        s = self.settings
        template = prompts.REFLECTOR_PROMPT_CITED if self.cited else prompts.REFLECTOR_PROMPT
        return template.format(
            task=ctx.task.turns[0] if ctx.task.turns else "",
            attempt=episode_transcript(
                play.record, ctx.task.turns, s.trajectory_chars, s.observation_chars
            ),
            feedback=feedback,
            playbook=shown,
        )

    async def play_task(self, ctx: TaskContext) -> Any:
        if self.initial and not ctx.committed(BULLETS):
            ctx.stage(BULLETS, self.initial)  # the playbook starts from the file's bullets
        playbook = self._playbook(ctx)
        play = await ctx.play()
        if not self.curates:
            return {"reflection": None, "tags": []}
        tags: list[list[str]] = []
        reflection = await self.reflect(ctx, play, playbook)
        tags += [list(t) for t in (reflection.tags if reflection else ())]
        rounds = 0
        while reflection is not None and not play.success and rounds < self.settings.max_rounds:
            rounds += 1
            staged = StagedReflection(
                f"ace-reflection:{ctx.task.task_id}:{play.attempt}",
                ctx.source(play),
                ctx.task.turns[0] if ctx.task.turns else "",
                reflection.text,
                play.attempt,
            )
            ctx.stage(REFLECTIONS, [staged])  # the generator's reflection input
            play = await ctx.play()
            # As ace.py's rounds: a re-play that succeeds, or the last one, is not
            # reflected on; the curator reads the latest reflection.
            if play.success or rounds == self.settings.max_rounds:
                break
            reflection = await self.reflect(ctx, play, playbook)
            tags += [list(t) for t in (reflection.tags if reflection else ())]
        ctx.event("adapted", plays=play.attempt, success=bool(play.success), tags=len(tags))
        return {"reflection": reflection.text if reflection else None, "tags": tags}

    async def curate(
        self, ctx: TaskContext, reflection: str, playbook: list[Bullet]
    ) -> list[Addition]:
        s = self.settings
        last = ctx.plays[-1]
        if s.prompts == "appworld":  # the harness's own curator, verbatim
            task = ctx.task.turns[0] if ctx.task.turns else ""
            shown = render(playbook, self.sections, False) if playbook else ""
            prompt = appworld_prompts.fill_curator(shown, reflection, task, self._messages(last))
        else:
            prompt = self._curator_prompt(ctx, reflection, playbook)
        if s.curator_answer == "as_harness":  # one answer, applied whole or not at all
            reply = await ctx.ask(CURATOR, [{"role": "user", "content": prompt}])
            additions, problems = parse_curation_as_harness(reply.text, self.sections)
            if reply.refused or problems:
                why = reply.refused or "; ".join(p.message for p in problems)
                ctx.event("curation_discarded", problem=why[:300])
        else:
            additions = await self._ask_valid(
                ctx, CURATOR, prompt, prompts.CURATOR_RETRY,
                lambda text: parse_curation(text, self.sections), "curation",
            )  # fmt: skip
        kept = []
        for addition in additions or []:
            if addition.known_section:
                kept.append(addition)
            elif s.prompts == "appworld":  # the harness's update skips it
                ctx.event("curation_unknown_section_skipped")
            else:
                ctx.event("curation_unknown_section")  # filed under OTHERS, as ace.py
                kept.append(addition)
        return kept

    def _curator_prompt(self, ctx: TaskContext, reflection: str, playbook: list[Bullet]) -> str:
        s = self.settings
        last = ctx.plays[-1]
        return prompts.CURATOR_PROMPT.format(
            step=ctx.index + 1,
            total=ctx.total,
            budget=s.playbook_token_budget,
            stats=stats(playbook),
            task=ctx.task.turns[0] if ctx.task.turns else "",
            attempt=episode_transcript(
                last.record, ctx.task.turns, s.trajectory_chars, s.observation_chars
            ),
            reflection=reflection,
            playbook=render(playbook, self.sections, True) if playbook else prompts.NO_PLAYBOOK,
            sections=", ".join(self.sections.keys),
        )

    async def dedup(
        self, ctx: TaskContext, new: list[Bullet], playbook: dict[str, Bullet]
    ) -> tuple[list[Bullet], list[Bullet]]:
        """(the new bullets kept, the existing bullets a duplicate was merged into)."""
        threshold = self.settings.dedup_threshold
        assert threshold is not None
        existing = list(playbook.values())
        keys = [b.content for b in existing] + [b.content for b in new]
        matrix = await ctx.similarities([b.content for b in new], keys)
        kept: list[Bullet] = []
        merged: dict[str, Bullet] = {}
        for i, bullet in enumerate(new):
            row = matrix[i][: len(existing) + i]  # earlier bullets only
            best = max(range(len(row)), key=lambda j: row[j], default=None)
            if best is None or row[best] < threshold or best >= len(existing):
                if best is not None and best >= len(existing) and row[best] >= threshold:
                    ctx.event("dedup_dropped", bullet=bullet.memory_id)  # a new-new duplicate
                    continue
                kept.append(bullet)
                continue
            target = merged.get(existing[best].memory_id, existing[best])
            content = target.content
            if self.settings.dedup_merge:
                lines = "\n".join(f"{n}. {b.content}" for n, b in enumerate([target, bullet], 1))
                reply = await ctx.ask(
                    CURATOR,
                    [{"role": "user", "content": prompts.MERGE_PROMPT.format(bullets=lines)}],
                )
                content = reply.text.strip() or target.content
                if not reply.text.strip():
                    ctx.event("dedup_merge_fallback", bullet=target.memory_id)
            merged[target.memory_id] = replace(
                target,
                content=content,
                helpful=target.helpful + bullet.helpful,
                harmful=target.harmful + bullet.harmful,
            )
            ctx.event("dedup_merged", into=target.memory_id, score=round(row[best], 4))
        return kept, list(merged.values())

    async def commit_task(self, ctx: TaskContext, result: Any) -> None:
        if self.validation is not None and ctx.index == 0:
            self.validation.start(ctx, self.initial)
        await self._commit_adaptation(ctx, result)
        if self.validation is not None:
            await self.validation.after_task(ctx)

    async def _commit_adaptation(self, ctx: TaskContext, result: Any) -> None:
        committed = ctx.committed(BULLETS)
        first = not committed and bool(self.initial)
        playbook = {b.memory_id: b for b in (committed or self.initial)}
        changed: dict[str, Bullet] = {b.memory_id: b for b in self.initial} if first else {}
        for bullet_id, tag in result["tags"]:  # the reflector's tags: the counter layer
            bullet = changed.get(bullet_id) or playbook.get(bullet_id)
            if bullet is None or tag == "neutral":
                continue
            field = "helpful" if tag == "helpful" else "harmful"
            changed[bullet_id] = replace(bullet, **{field: getattr(bullet, field) + 1})
        current = {**playbook, **changed}
        new: list[Bullet] = []
        due = (ctx.index + 1) % self.settings.curator_frequency == 0
        if result["reflection"] and due:
            additions = await self.curate(ctx, result["reflection"], list(current.values()))
            number = next_number(current.values())
            source = ctx.source(ctx.plays[-1])
            for addition in additions:
                slug = self.sections.slugs.get(addition.section, "misc")
                new.append(
                    Bullet(
                        f"{slug}-{number:05d}",
                        source,
                        addition.section,
                        addition.content,
                        order=number,
                    )  # fmt: skip
                )
                number += 1
            if new and self.settings.dedup_threshold is not None:
                new, merged = await self.dedup(ctx, new, current)
                changed.update({b.memory_id: b for b in merged})
        if changed or new:
            ctx.commit(BULLETS, [*changed.values(), *new])
        ctx.event("curated", added=len(new), updated=len(changed), bullets=len(current) + len(new))


def initial_bullets(settings: AceSettings) -> tuple[list[Bullet], str | None]:
    """The initial playbook's bullets and the digest of its file (None: no file)."""
    if settings.initial_playbook is None:
        return [], None
    if settings.initial_playbook == "appworld":  # the harness's file, as vendored
        text = appworld_prompts.INITIAL_PLAYBOOK
        bullets = parse_initial(text, SectionSet.of(settings.sections))
        return bullets, hashlib.sha256(text.encode()).hexdigest()
    path = Path(settings.initial_playbook).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"invalid config at retrieval.initial_playbook: cannot read {path} ({exc}); "
            "point it at a playbook file (e.g. ACE's playbooks/appworld_initial_playbook.txt)"
        ) from None
    bullets = parse_initial(text, SectionSet.of(settings.sections))
    return bullets, hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class AceStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "ace"
    code_version: ClassVar[str] = "1"
    role: ClassVar[str] = "teacher"

    # best_on_validation: the memory split's tasks held out, played after every
    # `eval_steps`-th task (they follow from the split and the settings, in identity).
    validation_ids: tuple[str, ...] = field(default=())

    def program(self) -> AceProgram:
        assert isinstance(self.settings, AceSettings)
        initial, _ = initial_bullets(self.settings)
        curates = CURATOR in self.other_models
        return AceProgram(self.settings, initial, curates, self.validation_ids)

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> AceStage:
        cfg = planner.cfg
        teacher = cfg.teacher
        settings = cfg.retrieval_for(planner.method_name)
        assert isinstance(settings, AceSettings)
        _, digest = initial_bullets(settings)
        builder = cfg.builder_model()
        others = {REFLECTOR: builder, CURATOR: builder} if builder is not None else {}
        training, validation = validation_split(planner.split.memory_ids, settings)
        cited = settings.reflector_reads == "cited_bullets"
        held_out = f", validated on {len(validation)}" if validation else ""
        return cls.plan_on_memory_split(
            planner,
            teacher,
            {
                "method": inputs["memory_kind"],
                "models": {role: planner.model_identity(m) for role, m in sorted(others.items())},
                "build": {**settings.build_identity(), "initial_playbook": digest},
            },
            f"ace teacher={teacher.name} {cfg.benchmark.name}{held_out}",
            plays=training,
            other_models=others,
            memory_kind=inputs["memory_kind"],
            # What its plays read: the student's settings; with cited_bullets, also the
            # request to name the bullets used (the generator's only).
            settings=AdaptationPlaySettings.of(settings) if cited else settings,
            validation_ids=validation,
        )
