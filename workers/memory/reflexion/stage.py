"""Reflexion's test-time re-plays: a stage kind of its own (`reflexion`), which scores
the method's points in place of the ordinary evaluate stage.

For each evaluated task (in the benchmark's order; tasks are independent, so waves of B
run at once): the student plays it; while the play failed and fewer than k plays were
made, the student (as `reflector`: the same model) reads the failed play and the
verdict and writes a reflection, which is staged for this task's next play, and the
task is played again. The ledger's result of the task is its first successful play
(else its last), with the tokens and calls of all its plays and `attempt` = how many;
the reflections' own calls and tokens are the `reflector` cost row. Nothing is
committed: no reflection is ever read by another task.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, TaskContext
from distillery.workers.memory.reflexion.records import COLLECTION, Reflection
from distillery.workers.memory.reflexion.reflect import TEXTS as REFLECTION_TEXTS
from distillery.workers.memory.reflexion.reflect import ReflectionLimits, reflect
from distillery.workers.memory.reflexion.settings import ReflexionSettings

ROLE = "reflector"


class ReflexionProgram:
    """The stage's program (see the module docstring)."""

    def __init__(self, settings: ReflexionSettings) -> None:
        self.settings = settings
        self.limits = ReflectionLimits(
            settings.feedback,
            settings.trajectory_chars,
            settings.observation_chars,
            settings.reflection_chars,
        )

    def texts(self) -> tuple[str, ...]:
        return REFLECTION_TEXTS

    async def play_task(self, ctx: TaskContext) -> Any:
        play = await ctx.play()
        reflections: list[Reflection] = []
        while not play.success and play.attempt < self.settings.max_attempts:
            shown = reflections[-self.settings.memory_size :]
            reflection = await reflect(ctx, ROLE, play, shown, self.limits)
            reflections.append(reflection)
            ctx.event("reflected", attempt=play.attempt, fallback=reflection.fallback)
            ctx.stage(COLLECTION, reflections)  # this task's next plays only
            play = await ctx.play()
        ctx.event("finished", plays=play.attempt, success=bool(play.success))
        return None

    async def commit_task(self, ctx: TaskContext, result: Any) -> None:
        return None  # a test-time protocol: nothing crosses to another task


@dataclass(frozen=True, kw_only=True)
class ReflexionStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "reflexion"
    code_version: ClassVar[str] = "1"
    writes_bank: ClassVar[bool] = False
    searches_live_bank: ClassVar[bool] = False  # a play reads its task's reflections only

    def program(self) -> ReflexionProgram:
        assert isinstance(self.settings, ReflexionSettings)
        return ReflexionProgram(self.settings)

    def test_time(self) -> tuple[int, bool]:
        """(plays per task at most, whether the environment's verdict is fed back)."""
        assert isinstance(self.settings, ReflexionSettings)
        return self.settings.max_attempts, self.settings.max_attempts > 1

    @classmethod
    def plan(cls, planner: Any, **inputs: Any) -> ReflexionStage:
        read = inputs["read"]
        cfg = planner.cfg
        student = cfg.student
        if student.backend == "oracle":
            raise ConfigError(
                f"invalid config at student: the {read.kind} method re-plays the student after "
                "its own reflection, which the oracle (a replay of the ground truth) cannot "
                "write; set student= a model"
            )
        settings = read.settings
        identity = {
            # What an ordinary evaluate stage of the point would hold (the student, the
            # benchmark, the method's settings, the protocol), plus who reflects.
            **planner.evaluate_identity,
            "reflector": planner.model_identity(student, cfg.seed),
        }
        node = cls(
            identity=identity,
            upstream=(),
            label=(
                f"reflexion student={student.name} k={settings.max_attempts} "
                f"feedback={settings.feedback}"
            ),
            model=planner.served(student),
            other_models={ROLE: student},
            memory_kind=read.kind,
            settings=settings,
            split="test-time",
            # Tasks are independent (nothing is committed), so how many are in flight
            # changes no result: a runtime knob, left out of the identity; the episode
            # pool caps the plays in flight to the cluster's and the servers' slots.
            wave_size=max(1, cfg.cluster.num_workers * cfg.cluster.episodes_per_worker),
        )
        planner.add(node)
        return node
