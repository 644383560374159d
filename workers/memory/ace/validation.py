"""ACE's best playbook on validation (`playbook_selection: best_on_validation`), as
ace.py's `_offline_train` keeps it: the best playbook starts as the initial one with
accuracy 0.0 (`self.best_playbook = self.playbook`, `best_accuracy = 0.0`); after every
`eval_steps`-th training task (`step % eval_steps == 0`, steps from 1) every validation
task is played once with the playbook as that task's curation left it, and a playbook
whose accuracy is strictly above the best so far becomes the best; the final test reads
the best (`run`: `playbook=self.best_playbook`). Here the validation plays are the
stage's probes (`ctx.probe`: real episodes of the teacher, recorded, counted in the
stage's cost, resumed like its plays) and the best playbook is the bank the student
reads (`ctx.choose_bank`).

ace.py reads a validation split of its own (finance/data/sample_config.json
`val_data`); the protocol's memory split has none, so the validation tasks are held out
of it (`validation_split`): a fixed draw, the tasks with the smallest sha256 of their
ids, which ACE then does not learn from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from distillery.orchestrator.core.config import ConfigError
from distillery.orchestrator.execution.ordered_stage import TaskContext
from distillery.workers.memory.ace.records import BULLETS, Bullet
from distillery.workers.memory.ace.settings import AceSettings


def validation_split(
    memory_ids: Sequence[str], settings: AceSettings
) -> tuple[list[str], tuple[str, ...]]:
    """(the tasks ACE learns from, the validation tasks), each in the split's order;
    no validation tasks unless `playbook_selection: best_on_validation`."""
    if settings.playbook_selection != "best_on_validation":
        return list(memory_ids), ()
    count = int(len(memory_ids) * settings.validation_fraction)
    drawn = set(sorted(memory_ids, key=lambda t: hashlib.sha256(t.encode()).hexdigest())[:count])
    training = [t for t in memory_ids if t not in drawn]
    if not drawn or len(training) < settings.eval_steps:
        raise ConfigError(
            "invalid config at retrieval.playbook_selection: best_on_validation holds "
            f"{count} of the memory split's {len(memory_ids)} tasks out for validation "
            f"(validation_fraction {settings.validation_fraction:.3g}) and validates "
            f"after every {settings.eval_steps}th of the {len(training)} left, so "
            + ("nothing is validated" if drawn else "there is no validation task")
            + " and the student would read the initial playbook; lower eval_steps, raise "
            "validation_fraction or use a larger memory split"
        )
    return training, tuple(t for t in memory_ids if t in drawn)


class Validation:
    """The validation passes of one run of the program and the best accuracy so far
    (rebuilt on resume: the framework replays every task's program in order)."""

    def __init__(self, eval_steps: int, task_ids: tuple[str, ...]) -> None:
        self.eval_steps = eval_steps
        self.task_ids = task_ids
        self.best_accuracy = 0.0

    def start(self, ctx: TaskContext, initial: list[Bullet]) -> None:
        """Before the first task's commits: the initial playbook is the best so far."""
        if initial and not ctx.committed(BULLETS):
            ctx.commit(BULLETS, initial)  # the bank it would be (adaptation adds to it)
        ctx.choose_bank()

    async def after_task(self, ctx: TaskContext) -> None:
        """After a task's commits: every `eval_steps`-th task, a validation pass."""
        step = ctx.index + 1
        if step % self.eval_steps:
            return
        plays = await ctx.probe(self.task_ids)
        solved = sum(1 for play in plays if play.success)
        accuracy = solved / len(plays)
        best = accuracy > self.best_accuracy
        ctx.event("validated", step=step, solved=solved, tasks=len(plays), best=best)
        if best:
            self.best_accuracy = accuracy
            ctx.choose_bank()
