"""Function memory (AMD section 3.2): every successful call, no LLM; on a profile that
builds a reasoning per call (ToolSandbox), the requests for it (`reasoning_prompts`,
answered by `call_reasoning.CallReasoningWriter`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from distillery.workers.memory.amd import call_reasoning, code_builders
from distillery.workers.memory.amd.builder import TrajectoryBuilder
from distillery.workers.memory.amd.code_trajectory import CodeTrajectory
from distillery.workers.memory.amd.masking import sanitise_observation
from distillery.workers.memory.amd.records import FunctionRecord
from distillery.workers.memory.amd.trajectory import TrajectoryStep
from distillery.workers.memory.building import BuildStats
from distillery.workers.trajectories import EpisodeRecord

FUNCTION_RESULT_CHARS = 300


class FunctionBuilder(TrajectoryBuilder):
    """Every successful call of every successful trajectory (no LLM), keyed by name.

    Identical records within one trajectory (same masked call, result and turn) are
    kept once.
    """

    kind = "fn"

    def __init__(
        self,
        *,
        docs_by_function: Mapping[str, Mapping[str, Any]] | None = None,
        class_of_function: Mapping[str, str] | None = None,
        split: str = "all",
        teacher: str | None = None,
        stats: BuildStats | None = None,
        result_chars: int = FUNCTION_RESULT_CHARS,
    ) -> None:
        super().__init__(
            docs_by_function=docs_by_function,
            class_of_function=class_of_function,
            split=split,
            teacher=teacher,
            stats=stats,
        )
        self.result_chars = result_chars
        self.shown_docs: dict[str, dict[str, Any]] = {}

    def build(
        self, episode: EpisodeRecord, turns: Sequence[str] | None = None
    ) -> list[FunctionRecord]:
        trajectory = self.prepare(episode, turns)
        source = trajectory.source(self.split, self.teacher)
        if isinstance(trajectory, CodeTrajectory):
            # AppWorld: keyed by app.api; the schema is the API doc a trajectory of
            # this build printed (`shown_docs`), else the trajectory's own.
            docs = {**self.shown_docs, **trajectory.docs()}
            code_records = code_builders.function_records(
                trajectory, docs, source, self.result_chars, self.stats.skipped
            )
            self.stats.accepted[self.kind] += len(code_records)
            return code_records
        records, seen = [], set()
        for step in trajectory.steps:
            if step.failed:
                self.stats.skipped[f"{self.kind}:failed_call"] += 1
                continue
            result = sanitise_observation(trajectory.mask(step.observation), self.result_chars)
            key = (step.masked, result, step.turn)
            if key in seen:
                self.stats.skipped[f"{self.kind}:duplicate"] += 1
                continue
            seen.add(key)
            records.append(
                FunctionRecord(
                    memory_id=record_id(episode, step),
                    source=source,
                    function=step.function,
                    call=step.masked,
                    result=result,
                    # Shown to the student beside the masked call: masked the same way.
                    instruction=trajectory.mask(trajectory.instruction(step.turn)),
                    schema=dict(self.docs_by_function.get(step.function) or {}),
                )
            )
        self.stats.accepted[self.kind] += len(records)
        return records

    def build_all(
        self,
        episodes: Iterable[EpisodeRecord],
        turns_by_task: Mapping[str, Sequence[str]] | None = None,
    ) -> list[FunctionRecord]:
        turns_by_task = turns_by_task or {}
        kept = self.successful(episodes)
        # The docs any code trajectory of the build printed serve every record of that
        # API (an API's doc is the same whichever task browsed it).
        self.shown_docs = {
            name: doc
            for ep in kept
            if isinstance(t := self.prepare(ep, turns_by_task.get(ep.task_id)), CodeTrajectory)
            for name, doc in t.docs().items()
        }
        try:
            return [r for ep in kept for r in self.build(ep, turns_by_task.get(ep.task_id))]
        finally:
            self.shown_docs = {}

    def reasoning_prompts(
        self,
        episodes: Iterable[EpisodeRecord],
        turns_by_task: Mapping[str, Sequence[str]] | None = None,
    ) -> dict[str, str]:
        """The reasoning request of every successful call of every successful call
        trajectory, by the id its record has (`build`); code trajectories have none."""
        turns_by_task = turns_by_task or {}
        out: dict[str, str] = {}
        for episode in episodes:
            if episode.success is not True:
                continue
            trajectory = self.prepare(episode, turns_by_task.get(episode.task_id))
            if isinstance(trajectory, CodeTrajectory):
                continue
            for position, step in enumerate(trajectory.steps):
                if not step.failed:
                    out[record_id(episode, step)] = call_reasoning.reasoning_prompt(
                        trajectory, position
                    )
        return out


def record_id(episode: EpisodeRecord, step: TrajectoryStep) -> str:
    """A call's Function record id: its episode and its 1-based executed-call index."""
    return f"fn:{episode.episode_id}:{step.index}"
