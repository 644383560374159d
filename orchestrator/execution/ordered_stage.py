"""Outcome-driven episode stages: tasks played in order, re-plays decided at run time.

A kind whose plays depend on outcomes (AgentBrew's `brew`, a "retry with a hint",
Reflexion's test-time re-plays) subclasses `OrderedEpisodeStage` and writes its
`program()`: a `TaskProgram` that, for each task in the stage's order, plays it
(`ctx.play()`), asks other models (`ctx.ask(role, messages)`: the teacher, a curator),
stages entries provisionally for the task's own re-plays (`ctx.stage`), logs what
happened (`ctx.event`) and finally commits entries to the memory the next tasks read
(`ctx.commit`). The framework (this module, its runtime in `ordered_run`) owns
everything else:

- order: the benchmark's order of the tasks the stage needs, or a seeded shuffle
  (`order_seed`, in identity);
- memory: each play reads the entries committed so far plus what was staged for its
  task (a live view in the memory service, searched by the method's own hooks: the
  provisional slot is visible only to re-plays of that task); at the end the committed
  entries are an ordinary bank, which evaluate stages read;
- waves: `wave_size` B > 1 plays B tasks at once, each reading the memory as of its
  wave's start; their commits are applied in task order after the wave (B = 1, the
  default, is strictly sequential);
- the event log (`journal.Journal`), written as it happens: every play (with its
  attempt number, also in its episode record), every answer of a model, every
  staged / committed / rolled-back entry and every event of the program; a run killed
  at any moment resumes by replaying each task's program over its records, so the
  memory and the event log equal an uninterrupted run's (the program must decide only
  from what its context returns);
- probes: a program may play other tasks once each, read-only, against the memory
  committed so far (`ctx.probe`: a validation split), recorded and resumed like plays;
- the bank: the memory as the last task left it, or the committed memory as of the
  program's last `ctx.choose_bank()` (the best of several states, as judged by probes);
- cost: one row per model and role (the student's plays and probes, each asked role's
  calls).

A play that ends in an infrastructure failure after its retries, or a model that
cannot be reached, stops the stage with a message: nothing of it is recorded, and
re-running the command resumes at that effect.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from pydantic import BaseModel

from distillery.orchestrator.stages.stage import (
    CostRow,
    EpisodeStage,
    StageKey,
    StageStatus,
    digest_of,
)
from distillery.orchestrator.state.journal import Journal
from distillery.workers.envs.base import Task
from distillery.workers.llm.config import ModelConfig
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.retrieval import Isolation
from distillery.workers.trajectories import (
    EpisodeRecord,
    EpisodeSummary,
)

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep
    from distillery.orchestrator.state.ledger import Ledger
    from distillery.workers.memory.config import EmbedderConfig


# What a stage kind of another package may use (with `stages.CostRow`, `StageStatus`).
__all__ = [
    "OrderedEpisodeStage",
    "PlayResult",
    "Reply",
    "StageStopped",
    "TaskContext",
    "TaskProgram",
    "stage_events",
]


class StageStopped(RuntimeError):
    """An outcome-driven stage stopped at an effect it could not complete (an
    infrastructure failure that persisted): re-running resumes there."""


@dataclass(frozen=True)
class PlayResult:
    """One play of the task: its summary (`attempt`: which play) and its full record
    (the trajectory a teacher reads)."""

    summary: EpisodeSummary
    record: EpisodeRecord

    @property
    def success(self) -> bool | None:
        return self.summary.success

    @property
    def attempt(self) -> int:
        return self.summary.attempt


@dataclass(frozen=True)
class Reply:
    """A model's answer to `ctx.ask`. A request the server refused because of what it
    holds (a context overflow, a reply that cannot be used) is the model's doing, not
    the stage's: it comes back as an empty answer with `refused` naming why, for the
    program to count and fall back from (an unreachable model stops the stage)."""

    text: str
    tokens_in: int = 0
    tokens_out: int = 0
    refused: str | None = None  # context_overflow | rejected | invalid_reply


class TaskContext(Protocol):
    """What a program sees of one task (see `OrderedRun`'s implementation)."""

    task: Task
    index: int  # the task's place in the stage's order
    total: int  # how many tasks the stage plays (the last one's index is total - 1)
    plays: list[PlayResult]  # the task's plays so far, in order

    async def play(self) -> PlayResult: ...
    async def probe(self, task_ids: Sequence[str]) -> list[PlayResult]: ...
    async def ask(self, role: str, messages: list[dict[str, Any]]) -> Reply: ...
    def stage(self, collection: str, entries: Sequence[Any]) -> None: ...
    def rollback(self) -> None: ...
    def commit(self, collection: str, entries: Sequence[Any]) -> None: ...
    def committed(self, collection: str) -> list[Any]: ...
    def choose_bank(self) -> None: ...
    def event(self, kind: str, **data: Any) -> None: ...
    def source(self, play: PlayResult) -> MemorySource: ...
    async def similarities(self, queries: list[str], keys: list[str]) -> list[list[float]]: ...


class TaskProgram(Protocol):
    """What an outcome-driven kind does with each task. It decides only from what its
    context returns (plays, answers, committed entries), so a resumed run replays it
    exactly."""

    def texts(self) -> tuple[str, ...]:
        """Every text it sends a model (prompts, templates): part of the stage's key."""
        ...

    async def play_task(self, ctx: TaskContext) -> Any:
        """The task's own work (plays, re-plays, other models, the provisional slot);
        what it returns (JSON-able) is handed to `commit_task`. Runs concurrently with
        the other tasks of its wave, reading the memory as of the wave's start."""
        ...

    async def commit_task(self, ctx: TaskContext, result: Any) -> None:
        """Writes to the memory the next tasks read (`ctx.commit`), in task order."""
        ...


@dataclass(frozen=True, kw_only=True)
class OrderedEpisodeStage(EpisodeStage):
    """The base of outcome-driven kinds: a subclass sets `kind`, `code_version` and
    writes `program()` (and `plan`, to be asked for by a method)."""

    writes_bank: ClassVar[bool] = True
    role: ClassVar[str] = "student"
    # Whether plays search the live bank (the committed entries plus the task's staged
    # ones, embedded in the memory service). False: a play reads only what its task
    # staged (`search.staged`), and no memory service is needed (Reflexion).
    searches_live_bank: ClassVar[bool] = True

    memory_kind: str  # the memory method whose hooks its plays run and collections it writes
    settings: BaseModel  # that method's read settings during the stage's plays
    wave_size: int = 1  # B tasks in flight, each reading the memory as of its wave's start
    order_seed: int | None = None  # None: the benchmark's order
    # The sweep seed its plays sample with (added to `model`'s own seed): the one its
    # identity holds (`planner.episode_identity(model, sweep_seed)`), whichever point of
    # the sweep (of whatever seed) shares the stage.
    sweep_seed: int = 0
    split: str = "all"  # the memory split label stored with every entry
    extra: dict[str, Any] = field(default_factory=dict)  # the kind's own inputs

    def program(self) -> TaskProgram:
        raise NotImplementedError(f"{type(self).__name__} has no program")

    @classmethod
    def plan_on_memory_split(
        cls,
        planner: Any,
        player: ModelConfig,
        identity: dict[str, Any],
        label: str,
        *,
        bounds_key: str = "bounds",
        embedder: EmbedderConfig | None = None,
        plays: Sequence[str] | None = None,
        **fields: Any,
    ) -> Self:
        """A node of this kind that `player` plays on the point's memory split, added to
        the plan with the split's tasks to play: the `plan` of a kind that learns from
        the memory split (ACE's and ExpeL's teacher, AgentBrew's brew).

        Its identity: what decides the split's episodes (`planner.episode_identity` of
        `player` under the memory split's options), the split's task digest and label,
        the kind's own entries (`identity`: its models, its settings), the embedder
        (`embedder`, a method's own, else the sweep's) and, off their defaults, the
        memory bounds (under `bounds_key`: the brew's pinned keys name them
        `memory_bounds`). `label` gets the task count appended; `fields` are the node's
        own fields (`memory_kind`, `settings`, `other_models`, `wave_size`, ...).
        `plays`: the split's tasks it plays in order (None: all; a kind that holds some
        out, e.g. to probe them, names the rest: what it holds out must follow from its
        identity).
        """
        cfg, split = planner.cfg, planner.split
        full = {
            **planner.episode_identity(player, 0, memory=True),
            "memory_task_ids": planner.memory_task_ids(),
            "split": split.memory_split,
            **identity,
            "embedder": (embedder or cfg.memory.embedder).model_dump(
                mode="json", include={"kind", "model"}
            ),
        }
        if cfg.memory.bounds.identity():  # off their defaults: other entries
            full[bounds_key] = cfg.memory.bounds.identity()
        played = list(split.memory_ids) if plays is None else list(plays)
        node = cls(
            identity=full,
            upstream=(),
            label=f"{label} ({len(played)} tasks)",
            model=planner.served(player),
            split=split.memory_split,
            options=planner.memory_options,
            **fields,
        )
        planner.add(node, played)
        return node

    def code(self) -> dict[str, str]:
        return {**super().code(), "program": digest_of(list(self.program().texts()))}

    def episode_demand(self, ledger: Ledger, needs: set[str]) -> int:
        """A wave's plays at once (re-plays of a task follow each other), unless the
        stage is whole in the ledger."""
        if self.status(ledger, needs).cached:
            return 0
        return max(1, min(self.wave_size, len(needs)))

    def writer(self) -> str:
        model = self.other_models.get("teacher") or self.model
        return model.name if model is not None else "deterministic"

    def journal(self, ledger: Ledger) -> Journal:
        return Journal(ledger.stage_dir(self.key) / "journal")

    def status(self, ledger: Ledger, needs: set[str]) -> StageStatus:
        done = len(needs & set(ledger.episodes(self.key)))
        output = ledger.output(self.key) if self.writes_bank else None
        finished = done == len(needs) and (output is not None or not self.writes_bank)
        if finished:
            state = f"cached ({len(needs)} tasks" + (
                f", bank {output.bank_id[:16]})" if output is not None else ")"
            )
        else:
            state = f"run {len(needs) - done} of {len(needs)} tasks in order ({done} done)"
            state += ", build" if self.writes_bank else ""
        return StageStatus(finished, state, len(needs), done)

    def cost_rows(self, ledger: Ledger, needs: set[str]) -> list[CostRow]:
        """The student's plays (probes too), then each asked role's calls, from the
        event log."""
        rows: dict[str, list[int]] = {}
        names: dict[str, str] = {}
        student = self.model.name if self.model is not None else "oracle"
        rows[self.role], names[self.role] = [0, 0, 0], student
        for record in self.journal(ledger).ordered():
            if record.get("kind") in ("played", "probed"):
                s = record["summary"]
                row = rows[self.role]
                row[0] += s.get("tokens_in", 0)
                row[1] += s.get("tokens_out", 0)
                row[2] += s.get("n_llm_calls", 0)
            elif record.get("kind") == "asked":
                role = record["role"]
                row = rows.setdefault(role, [0, 0, 0])
                names[role] = record.get("model", role)
                row[0] += record.get("tokens_in", 0)
                row[1] += record.get("tokens_out", 0)
                row[2] += 1
        return [CostRow(role, names[role], *counts) for role, counts in rows.items()]

    def run(self, sweep: Sweep, prefix: str) -> bool:
        from distillery.orchestrator.execution.ordered_run import (  # the runtime needs this
            OrderedRun,
        )

        return OrderedRun(sweep, self, prefix).run()

    # -- what the runner needs of the node ----------------------------------------------

    def order(self, needs: set[str], tasks: dict[str, Task]) -> list[str]:
        """The tasks in the stage's order: the benchmark's, or a seeded shuffle."""
        position = {task_id: i for i, task_id in enumerate(tasks)}
        ordered = sorted(needs, key=lambda t: (position.get(t, len(position)), t))
        if self.order_seed is not None:
            random.Random(self.order_seed).shuffle(ordered)
        return ordered

    def isolation(self) -> Isolation:
        """What the stage's own plays may read: everything it committed (their tasks are
        the memory split; a task reads what its own re-plays staged)."""
        return Isolation("main")


def stage_events(ledger: Ledger, key: StageKey) -> list[dict[str, Any]]:
    """The event log of an outcome-driven stage, in order (for people and reports)."""
    return Journal(ledger.stage_dir(key) / "journal").ordered()
