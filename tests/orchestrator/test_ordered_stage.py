"""The ordered, stateful episode stage without Ray: plays are faked (a scripted outcome
per task and attempt, written as real episode files), the memory is the framework's.
Checked: tasks in order, a provisional slot seen by the task's re-plays only, commits
seen by the next tasks (B = 1) or by the next wave only (B = 2), a durable event log,
a run that dies mid-task resuming to the same memory and the same log, and probes
(held-out tasks played read-only against the committed memory) choosing the bank."""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from distillery.orchestrator.execution import ordered_stage
from distillery.orchestrator.execution.ordered_run import OrderedRun
from distillery.orchestrator.execution.ordered_stage import OrderedEpisodeStage, stage_events
from distillery.orchestrator.state.ledger import BankOutput, Ledger
from distillery.workers.envs.base import Task
from distillery.workers.memory import registry
from distillery.workers.memory.config import MemoryBounds
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.method import BaseMemoryMethod
from distillery.workers.trajectories import EpisodeSummary, write_episode
from tests.workers.test_trajectories import _record

TASKS = [f"t{i}" for i in range(5)]


@dataclass(frozen=True)
class Note:
    memory_id: str
    source: MemorySource
    text: str

    @property
    def key_text(self) -> str:
        return self.text


class NoSettings(BaseModel):
    pass


class NoteMethod(BaseMemoryMethod):
    kind = "note_test"
    settings_model = NoSettings
    code_version = "1"
    collections = (CollectionSpec("notes", Note),)
    store_prefix = "notetest"

    def hooks(self, *args: Any) -> Any:  # plays are faked here
        raise NotImplementedError


class Program:
    """Play; on failure stage a note and re-play once; commit a note that recovered."""

    def texts(self) -> tuple[str, ...]:
        return ("note prompt",)

    async def play_task(self, ctx: Any) -> Any:
        play = await ctx.play()
        if play.success:
            return None
        reply = await ctx.ask("teacher", [{"role": "user", "content": ctx.task.task_id}])
        note = Note(f"note:{ctx.task.task_id}", ctx.source(play), reply.text)
        ctx.stage("notes", [note])
        play = await ctx.play()
        if play.success:
            ctx.event("validated", attempt=play.attempt)
            return reply.text
        ctx.rollback()
        ctx.event("rejected")
        return None

    async def commit_task(self, ctx: Any, result: Any) -> None:
        if result is not None:
            source = ctx.source(ctx.plays[-1])
            ctx.commit("notes", [Note(f"note:{ctx.task.task_id}", source, result)])


@dataclass(frozen=True, kw_only=True)
class NoteStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "note_stage"
    code_version: ClassVar[str] = "1"

    def program(self) -> Program:
        return Program()


HELD_OUT = ["v0", "v1"]


class ProbingProgram(Program):
    """Program's, plus a note "seen:<task>" committed for every task; after each task
    the held-out tasks are probed with the memory so far, and the memory whose probes
    solved strictly more than the best so far (from none: the empty memory, chosen
    first) becomes the bank."""

    def __init__(self) -> None:
        self.best = 0

    async def commit_task(self, ctx: Any, result: Any) -> None:
        if ctx.index == 0:
            ctx.choose_bank()
        await super().commit_task(ctx, result)
        source = ctx.source(ctx.plays[-1])
        ctx.commit("notes", [Note(f"seen:{ctx.task.task_id}", source, "seen")])
        probes = await ctx.probe(HELD_OUT)
        solved = sum(bool(p.success) for p in probes)
        ctx.event("probes_solved", solved=solved, tasks=[p.summary.task_id for p in probes])
        if solved > self.best:
            self.best = solved
            ctx.choose_bank()


@dataclass(frozen=True, kw_only=True)
class ProbingStage(OrderedEpisodeStage):
    kind: ClassVar[str] = "probing_stage"
    code_version: ClassVar[str] = "1"

    def program(self) -> ProbingProgram:
        return ProbingProgram()


class World:
    """The fake plays and answers: a task succeeds on its first play when it is t0, or
    when a committed note is visible; on a re-play when its own note is staged (not t3,
    whom nothing helps). Records what each play saw."""

    stage: OrderedEpisodeStage
    sweep: Any
    banks: list[dict[str, list[str]]]
    snapshots: dict[str, dict[str, list[Note]]]

    def __init__(self, ledger: Ledger, key: Any, crash_at: int | None = None) -> None:
        self.ledger, self.key, self.crash_at = ledger, key, crash_at
        self.plays: list[tuple[str, int, int, int]] = []  # task, attempt, committed, staged
        self.asks = 0

    async def play(self, run: OrderedRun, task_id, attempt, view, staged, folder=None):
        if self.crash_at is not None and len(self.plays) == self.crash_at:
            raise KeyboardInterrupt("killed")  # the run dies here, nothing recorded
        committed = len(self.snapshots[view]["notes"]) - len(staged)
        self.plays.append((task_id, attempt, committed, len(staged)))
        success = task_id == "t0" or (task_id != "t3" and (committed > 0 or len(staged) > 0))
        if task_id in HELD_OUT:  # by the memory's size: v0 with 2 notes, v1 with 2 or 3
            size = len(self.snapshots[view]["notes"])
            success = size == 2 if task_id == "v0" else size in (2, 3)
        record = replace(_record(task_id, success), attempt=attempt, stage="note_stage")
        where = self.ledger.episodes_dir(self.key) / (folder or f"attempt-{attempt}")
        return EpisodeSummary.of(record, write_episode(where, record))

    async def ask(self, run, role, messages):
        self.asks += 1
        return ordered_stage.Reply(f"hint for {messages[0]['content']}", 3, 2), "teacher-model"


def _run(
    tmp_path, monkeypatch, wave_size: int = 1, crash_at: int | None = None, kind: Any = NoteStage
) -> World:
    ledger = Ledger(tmp_path)
    stage = kind(
        identity={"benchmark": "bfcl_multi_turn_base", "wave_size": wave_size},
        upstream=(),
        label="note stage",
        model=None,
        memory_kind="note_test",
        settings=NoSettings(),
        wave_size=wave_size,
    )
    world = World(ledger, stage.key, crash_at)
    world.snapshots = {}

    def view_of(self, snapshot, staged, task_id):
        # Named by content, as the real views are: the same memory is the same view.
        notes = [*snapshot.get("notes", []), *staged.get("notes", [])]
        view = ",".join(n.memory_id for n in notes) or "empty"
        world.snapshots[view] = {"notes": notes}
        return view

    monkeypatch.setattr(OrderedRun, "view_of", view_of)
    monkeypatch.setattr(OrderedRun, "play", lambda self, *a, **k: world.play(self, *a, **k))
    monkeypatch.setattr(OrderedRun, "ask", lambda self, *a: world.ask(self, *a))
    banks: list[dict] = []

    def written(bank_id, bank, embedder=None):
        banks.append({n: [e.memory_id for e in v] for n, v in bank.collections.items()})
        return BankOutput(bank_id, bank.counts())

    tasks = {t: Task(t, "bfcl_multi_turn_base", (t,), (), ()) for t in TASKS}
    sweep = SimpleNamespace(
        graph=SimpleNamespace(needs={stage.key: set(TASKS)}, tasks=tasks),
        ledger=ledger,
        say=lambda text: None,
        line=lambda s: s.label,
        names=SimpleNamespace(stage=lambda key: ""),
        progress=False,
        infra=Counter(),
        cfg=SimpleNamespace(memory=SimpleNamespace(embedder=NoSettings(), bounds=MemoryBounds())),
        memory=SimpleNamespace(reused=lambda bank_id: None, written=written, drop_views=print),
    )
    world.stage, world.sweep, world.banks = stage, sweep, banks
    with contextlib.suppress(KeyboardInterrupt):  # a run killed mid-task (crash_at)
        stage.run(sweep, "[1/1]")  # type: ignore[arg-type]
    return world


@pytest.fixture(autouse=True)
def note_method(monkeypatch):
    monkeypatch.setitem(registry.MEMORY_METHODS, "note_test", f"{__name__}:NoteMethod")
    yield
    registry._load.cache_clear()


def test_tasks_in_order_a_provisional_slot_and_commits_the_next_tasks_read(tmp_path, monkeypatch):
    world = _run(tmp_path, monkeypatch)
    # t1 fails, is re-played with its own note staged and recovers; t2, t4 read that
    # committed note on their first play; t3 is helped by nothing: rolled back.
    assert world.plays == [
        ("t0", 1, 0, 0),
        ("t1", 1, 0, 0),
        ("t1", 2, 0, 1),
        ("t2", 1, 1, 0),
        ("t3", 1, 1, 0),
        ("t3", 2, 1, 1),
        ("t4", 1, 1, 0),
    ]
    assert world.asks == 2 and world.banks == [{"notes": ["note:t1"]}]
    kinds = [(r["task"], r["kind"]) for r in stage_events(world.sweep.ledger, world.stage.key)]
    assert kinds == [
        ("t0", "played"), ("t1", "played"), ("t1", "asked"), ("t1", "staged"),
        ("t1", "played"), ("t1", "validated"), ("t1", "committed"), ("t2", "played"),
        ("t3", "played"), ("t3", "asked"), ("t3", "staged"), ("t3", "played"),
        ("t3", "rolled_back"), ("t3", "rejected"), ("t4", "played"),
    ]  # fmt: skip
    # Each task's result: its first successful play, every play's tokens, how many.
    done = world.sweep.ledger.episodes(world.stage.key)
    assert (done["t1"].success, done["t1"].attempt, done["t1"].n_llm_calls) == (True, 2, 4)
    assert (done["t3"].success, done["t3"].attempt) == (False, 2)
    # --plan: cached now; the cost rows: the student's plays and the teacher's calls.
    status = world.stage.status(world.sweep.ledger, set(TASKS))
    assert status.cached and status.state.startswith("cached (5 tasks")
    rows = world.stage.cost_rows(world.sweep.ledger, set(TASKS))
    assert [(r.role, r.model, r.n_llm_calls, r.tokens_in) for r in rows] == [
        ("student", "oracle", 14, 35),
        ("teacher", "teacher-model", 2, 6),
    ]


def test_a_wave_reads_the_memory_as_of_its_start(tmp_path, monkeypatch):
    world = _run(tmp_path, monkeypatch, wave_size=2)
    # Waves (t0, t1), (t2, t3), (t4): t2 reads t1's note (committed after wave 1).
    first_plays = {t: c for t, a, c, s in world.plays if a == 1}
    assert first_plays == {"t0": 0, "t1": 0, "t2": 1, "t3": 1, "t4": 1}


def _log(world: World, root) -> list[dict]:
    """The event log, its episode files named relative to the output root."""
    text = json.dumps(stage_events(world.sweep.ledger, world.stage.key))
    return json.loads(text.replace(str(root), "<root>"))


def test_a_run_killed_mid_task_resumes_to_the_same_memory_and_log(tmp_path, monkeypatch):
    whole = _run(tmp_path / "whole", monkeypatch)
    expected = _log(whole, tmp_path / "whole")
    for crash_at in (2, 5):  # before t1's re-play; before t3's re-play
        root = tmp_path / f"killed{crash_at}"
        killed = _run(root, monkeypatch, crash_at=crash_at)
        assert killed.banks == []  # nothing written before the end
        partial = _log(killed, root)
        assert partial == expected[: len(partial)]
        status = killed.stage.status(killed.sweep.ledger, set(TASKS))
        assert not status.cached and status.state.startswith("run ")
        resumed = _run(root, monkeypatch)
        assert _log(resumed, root) == expected
        assert resumed.banks == whole.banks
        # Nothing recorded was played or asked again.
        assert len(killed.plays) + len(resumed.plays) == len(whole.plays)
        assert killed.asks + resumed.asks == whole.asks
    assert json.dumps(expected)  # the log is plain JSON


def test_probes_play_held_out_tasks_read_only_and_the_chosen_memory_is_the_bank(
    tmp_path, monkeypatch
):
    world = _run(tmp_path, monkeypatch, kind=ProbingStage)
    probes = [(t, c) for t, a, c, s in world.plays if t in HELD_OUT]
    # After each task both held-out tasks read the memory committed so far, nothing
    # staged: one "seen" note per task (t3's staged note is rolled back, never read).
    assert probes == [("v0", 1), ("v1", 1), ("v0", 2), ("v1", 2), ("v0", 3), ("v1", 3),
                      ("v0", 4), ("v1", 4), ("v0", 5), ("v1", 5)]  # fmt: skip
    assert all(s == 0 for t, a, c, s in world.plays if t in HELD_OUT)
    # Solved: 0 after t0, 2 after t1 (chosen), 1 after t2, then 0: the bank is the
    # memory after t1, not the last one.
    assert world.banks == [{"notes": ["seen:t0", "seen:t1"]}]
    log = stage_events(world.sweep.ledger, world.stage.key)
    solved = [r["solved"] for r in log if r["kind"] == "probes_solved"]
    assert solved == [0, 2, 1, 0, 0]
    assert [(r["task"], r["entries"]) for r in log if r["kind"] == "bank_chosen"] == [
        ("t0", {"notes": 0}), ("t1", {"notes": 2})
    ]  # fmt: skip
    probed = [r for r in log if r["kind"] == "probed"]
    assert [r["probe"] for r in probed] == HELD_OUT * 5
    assert all("/probe-" in r["summary"]["file"] for r in probed)  # files of their own
    # The held-out tasks are no result of the stage; their plays are in its cost.
    ledger = world.sweep.ledger
    assert sorted(ledger.episodes(world.stage.key)) == TASKS
    (student, _) = world.stage.cost_rows(ledger, set(TASKS))
    plays = [r for r in log if r["kind"] == "played"]
    assert student.n_llm_calls == sum(r["summary"]["n_llm_calls"] for r in plays + probed)
    assert len(probed) == 10 and student.n_llm_calls > sum(
        r["summary"]["n_llm_calls"] for r in plays
    )


def test_a_run_killed_among_its_probes_resumes_to_the_same_bank_and_log(tmp_path, monkeypatch):
    whole = _run(tmp_path / "whole", monkeypatch, kind=ProbingStage)
    expected = _log(whole, tmp_path / "whole")
    for crash_at in (2, 3, 4):  # t0's second probe; t1's play; t1's first probe
        root = tmp_path / f"killed{crash_at}"
        killed = _run(root, monkeypatch, crash_at=crash_at, kind=ProbingStage)
        partial = _log(killed, root)
        assert killed.banks == [] and partial == expected[: len(partial)]
        resumed = _run(root, monkeypatch, kind=ProbingStage)
        assert _log(resumed, root) == expected
        assert resumed.banks == whole.banks
        assert len(killed.plays) + len(resumed.plays) == len(whole.plays)


def test_an_ordered_stages_pool_runs_every_play_its_workers_and_servers_take():
    from distillery.orchestrator.execution.episode_pool import pool_size

    assert pool_size(8, 1, None) == (8, 8)  # a grant of 8 plays on 8 workers of 1
    assert pool_size(2, 4, None) == (2, 8)
    assert pool_size(8, 16, 4) == (4, 4)  # one replica of 4 slots: 4 in flight, 4 workers
    assert pool_size(1, 1, 64) == (1, 1)
