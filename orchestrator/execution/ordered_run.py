"""The runtime of outcome-driven stages (`ordered_stage.OrderedEpisodeStage`): the
memory a stage commits, each task's context (`TaskContext`: plays, answers of other
models, the provisional slot, the event log replayed on resume) and `OrderedRun`,
which plays the tasks in order, in waves, and writes the bank. The contract a kind
writes against is in `ordered_stage`; this module is how the framework keeps it."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from distillery.orchestrator.execution.ordered_stage import (
    OrderedEpisodeStage,
    PlayResult,
    Reply,
    StageStopped,
)
from distillery.orchestrator.stages.stage import digest_of, effective_seed
from distillery.workers.envs.base import Task
from distillery.workers.memory.bank import BuiltBank
from distillery.workers.memory.bounds import bound_entry, delimiter_pattern, memory_delimiters
from distillery.workers.memory.entries import CollectionSpec, MemorySource
from distillery.workers.memory.method import own_embedder
from distillery.workers.memory.store import entry_from_dict, entry_to_dict
from distillery.workers.trajectories import (
    EpisodeSummary,
    read_episode_file_bytes,
)

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep
    from distillery.workers.llm.config import ModelConfig


class _Memory:
    """The entries a stage has committed, by collection (in commit order)."""

    def __init__(self, specs: Sequence[CollectionSpec]) -> None:
        self.specs = {s.name: s for s in specs}
        self.entries: dict[str, dict[str, Any]] = {s.name: {} for s in specs}
        self.version = 0

    def spec(self, collection: str) -> CollectionSpec:
        try:
            return self.specs[collection]
        except KeyError:
            raise ValueError(
                f"no collection {collection!r}; the method has {sorted(self.specs)}"
            ) from None

    def apply(self, collection: str, entries: Sequence[Any]) -> None:
        """Commit: an entry whose memory_id is committed already replaces it (a
        curator's update), others are appended."""
        self.spec(collection)
        for entry in entries:
            self.entries[collection][entry.memory_id] = entry
        self.version += 1

    def snapshot(self) -> dict[str, list[Any]]:
        return {name: list(items.values()) for name, items in self.entries.items()}


def _entries_json(collection: str, entries: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"collection": collection, **entry_to_dict(e)} for e in entries]


class _Context:
    """One task's `TaskContext`: effects replayed from the journal where it has them."""

    def __init__(
        self,
        run: OrderedRun,
        index: int,
        task: Task,
        snapshot: dict[str, list[Any]],
        total: int,
    ):
        self.run = run
        self.index = index
        self.total = total
        self.task = task
        self.plays: list[PlayResult] = []
        self.snapshot = snapshot  # the memory as of the wave's start (phase 1 reads it)
        self.staged: dict[str, list[Any]] = {}
        self.committing = False
        self.seq = 0

    # -- the journal ---------------------------------------------------------------------

    def _recorded(self, kind: str, request: str, seq: int | None = None) -> dict[str, Any] | None:
        seq = self.seq if seq is None else seq
        record = self.run.journal.get(self.index, seq)
        if record is None:
            return None
        if record.get("kind") != kind or record.get("request") != request:
            raise StageStopped(
                f"{self.run.stage.key}: the event log of task {self.task.task_id!r} differs "
                f"from its program at record {seq} ({record.get('kind')} recorded, "
                f"{kind} asked): the program decides from something else than its context"
            )
        return record

    def _write(self, kind: str, request: str, **data: Any) -> None:
        self._write_at(self.seq, kind, request, data)

    def _write_at(self, seq: int, kind: str, request: str, data: dict[str, Any]) -> None:
        record = {"task": self.task.task_id, "kind": kind, "request": request, **data}
        self.run.journal.write(self.index, seq, record)

    def _next(self) -> None:
        self.seq += 1

    # -- TaskContext --------------------------------------------------------------------

    async def play(self) -> PlayResult:
        attempt = len(self.plays) + 1
        staged = tuple(e for items in self.staged.values() for e in items)
        view = self.run.view_of(self.snapshot, self.staged, self.task.task_id)
        request = digest_of({"attempt": attempt, "view": view})
        recorded = self._recorded("played", request)
        result = None
        if recorded is not None:
            result = self.run.read_play(recorded["summary"])
            if result is None:  # its file is gone or damaged: play it again from here
                self.run.journal.drop_from(self.index, self.seq)
        if result is None:
            summary = await self.run.play(self.task.task_id, attempt, view, staged)
            result = self.run.read_play(asdict(summary))
            if result is None:
                raise StageStopped(f"the episode file {summary.file} cannot be read back")
            self._write("played", request, attempt=attempt, summary=asdict(summary))
        self._next()
        self.plays.append(result)
        return result

    async def probe(self, task_ids: Sequence[str]) -> list[PlayResult]:
        """Play each of `task_ids` once, all at once, reading the committed memory (as
        `committed` returns it: as of the wave's start in `play_task`, as of now in
        `commit_task`) with nothing staged: how that memory does on other tasks (a
        validation split). Each is recorded like a play (kind `probed`, its episode file
        under `episodes/probe-<task index>-<record>`, counted in the cost rows) and
        resumed like one; none is a result of the stage's tasks (the ledger records
        theirs only). The results are in the order of `task_ids`."""
        memory = self.run.memory.snapshot() if self.committing else self.snapshot
        first = self.seq
        views = [self.run.view_of(memory, {}, task_id) for task_id in task_ids]
        requests = [
            digest_of({"probe": task_id, "view": view})
            for task_id, view in zip(task_ids, views, strict=True)
        ]
        results: list[PlayResult | None] = [None] * len(task_ids)
        for i, request in enumerate(requests):
            recorded = self._recorded("probed", request, first + i)
            if recorded is None:
                continue
            results[i] = self.run.read_play(recorded["summary"])
            if results[i] is None:  # its file is gone or damaged: play again from here
                self.run.journal.drop_from(self.index, first + i)
                break

        async def probe_one(i: int) -> None:
            seq = first + i
            folder = f"probe-{self.index:06d}-{seq:04d}"
            summary = await self.run.play(task_ids[i], 1, views[i], (), folder=folder)
            result = self.run.read_play(asdict(summary))
            if result is None:
                raise StageStopped(f"the episode file {summary.file} cannot be read back")
            # Written as each ends (a gap left by a kill is played again).
            self._write_at(
                seq, "probed", requests[i], {"probe": task_ids[i], "summary": asdict(summary)}
            )
            results[i] = result

        missing = [i for i, result in enumerate(results) if result is None]
        # Every probe ends (and is recorded) before the first failure stops the stage.
        outcomes = await asyncio.gather(*(probe_one(i) for i in missing), return_exceptions=True)
        failed = next((o for o in outcomes if isinstance(o, BaseException)), None)
        if failed is not None:
            raise failed
        self.seq = first + len(task_ids)
        return [r for r in results if r is not None]

    async def ask(self, role: str, messages: list[dict[str, Any]]) -> Reply:
        request = digest_of({"role": role, "messages": messages})
        recorded = self._recorded("asked", request)
        if recorded is None:
            reply, model = await self.run.ask(role, messages)
            refused = {"refused": reply.refused} if reply.refused else {}
            self._write(
                "asked",
                request,
                role=role,
                model=model,
                text=reply.text,
                tokens_in=reply.tokens_in,
                tokens_out=reply.tokens_out,
                **refused,
            )
        else:
            reply = Reply(
                recorded["text"],
                recorded["tokens_in"],
                recorded["tokens_out"],
                recorded.get("refused"),
            )
        self._next()
        return reply

    def _memory_event(self, kind: str, collection: str, entries: Sequence[Any]) -> None:
        data = _entries_json(collection, entries)
        request = digest_of({"kind": kind, "entries": data})
        if self._recorded(kind, request) is None:
            self._write(kind, request, entries=data)
        self._next()

    def stage(self, collection: str, entries: Sequence[Any]) -> None:
        """Put `entries` in the task's provisional slot (replacing what was staged in
        that collection): visible to this task's next plays only."""
        self.run.memory.spec(collection)
        self._memory_event("staged", collection, entries)
        self.staged[collection] = self.run.bounded(entries, counted=False)

    def rollback(self) -> None:
        """Empty the provisional slot."""
        request = digest_of({"kind": "rolled_back"})
        if self._recorded("rolled_back", request) is None:
            self._write("rolled_back", request)
        self._next()
        self.staged = {}

    def commit(self, collection: str, entries: Sequence[Any]) -> None:
        if not self.committing:
            raise RuntimeError("ctx.commit belongs in commit_task (tasks commit in order)")
        self._memory_event("committed", collection, entries)
        self.run.memory.apply(collection, self.run.bounded(entries))

    def committed(self, collection: str) -> list[Any]:
        """The committed entries: as of the wave's start in `play_task`, as of now in
        `commit_task`."""
        self.run.memory.spec(collection)
        if self.committing:
            return list(self.run.memory.entries[collection].values())
        return list(self.snapshot.get(collection, []))

    def choose_bank(self) -> None:
        """The memory committed so far becomes the stage's bank (what evaluate stages
        read) unless a later call chooses again; a program that never calls it leaves
        the memory as its last task left it. In `commit_task` (tasks commit in order)."""
        if not self.committing:
            raise RuntimeError("ctx.choose_bank belongs in commit_task (tasks commit in order)")
        chosen = self.run.memory.snapshot()
        counts = {name: len(items) for name, items in chosen.items()}
        content = {n: [entry_to_dict(e) for e in items] for n, items in chosen.items()}
        request = digest_of({"kind": "bank_chosen", "content": content})
        if self._recorded("bank_chosen", request) is None:
            self._write("bank_chosen", request, entries=counts)
        self._next()
        self.run.chosen = (self.index, chosen)

    def event(self, kind: str, **data: Any) -> None:
        self.run.event_counts[kind] += 1
        data = json.loads(json.dumps(data, default=str))
        request = digest_of({"kind": kind, "data": data})
        if self._recorded(kind, request) is None:
            self._write(kind, request, **data)
        self._next()

    async def similarities(self, queries: list[str], keys: list[str]) -> list[list[float]]:
        """The cosine of each query text to each key text under the sweep's embedder
        (a curator's semantic de-duplication), recorded like an answer: a resumed run
        decides from the same numbers."""
        request = digest_of({"queries": queries, "keys": keys})
        recorded = self._recorded("compared", request)
        if recorded is None:
            matrix = await self.run.similarities(queries, keys)
            self._write("compared", request, matrix=matrix)
        else:
            matrix = recorded["matrix"]
        self._next()
        return matrix

    def source(self, play: PlayResult) -> MemorySource:
        """The provenance of an entry written from `play` (its task, split, writer)."""
        return MemorySource(
            self.task.task_id,
            self.task.group_id,
            self.run.stage.split,
            self.run.stage.writer(),
            f"{self.run.stage.key.short}:{self.task.task_id}:{play.attempt}",
        )


class OrderedRun:
    """One run of an `OrderedEpisodeStage` on a sweep (resuming from its journal)."""

    def __init__(self, sweep: Sweep, stage: OrderedEpisodeStage, prefix: str) -> None:
        from distillery.workers.memory.registry import memory_method

        self.sweep = sweep
        self.stage = stage
        self.prefix = prefix
        self.ledger = sweep.ledger
        self.journal = stage.journal(self.ledger)
        self.method = memory_method(stage.memory_kind)
        self.memory = _Memory(self.method.collections)
        self.isolation = stage.isolation()
        self.program = stage.program()
        # Entries are model output read back into prompts: within the memory bounds
        # (memory/bounds.py), as a build stage's bank is; counted in the bank's stats.
        self.bounds = sweep.cfg.memory.bounds
        pattern = memory_delimiters(stage.memory_kind) if self.bounds.neutralise_markers else ()
        self._delimiters = delimiter_pattern(pattern)
        self.bound_counts: Counter[str] = Counter()
        # The program's events by kind (a resumed run replays every task: totals).
        self.event_counts: Counter[str] = Counter()
        # What a program chose as the bank (`choose_bank`): the choosing task's place
        # in the order and the memory then; None: the memory at the end.
        self.chosen: tuple[int, dict[str, list[Any]]] | None = None
        self._pool: Any = None
        self._views: set[str] = set()
        self._llms: dict[str, Any] = {}

    def run(self) -> bool:
        stage, ledger = self.stage, self.ledger
        needs = set(self.sweep.graph.needs.get(stage.key, set()))
        status = stage.status(ledger, needs)
        if status.cached:
            self.sweep.say(f"{self.prefix} {stage.key} {status.state}  {self.sweep.line(stage)}")
            return False
        order = stage.order(needs, self.sweep.graph.tasks)
        self.sweep.say(f"{self.prefix} {stage.key} {status.state}  {self.sweep.line(stage)}")
        try:
            asyncio.run(self._run(order))
        finally:
            if self._pool is not None:
                self._pool.close()
                self.sweep.infra.update(self._pool.infra)
            if self._views and self.method.collections:
                self.sweep.memory.drop_views(self.stage.key.short)
        if stage.writes_bank:
            self.ledger.record_output(stage.key, self._bank_output())
        return True

    async def _run(self, order: list[str]) -> None:
        tasks = self.sweep.graph.tasks
        done = set(self.ledger.episodes(self.stage.key))
        bar = tqdm(
            total=len(order),
            desc=self.stage.progress_line(self.sweep.names.stage(self.stage.key)),
            unit="task",
            disable=not self.sweep.progress,
        )
        try:
            size = max(1, self.stage.wave_size)
            for start in range(0, len(order), size):
                wave = list(enumerate(order))[start : start + size]
                snapshot = self.memory.snapshot()
                contexts = [_Context(self, i, tasks[t], snapshot, len(order)) for i, t in wave]
                results = await asyncio.gather(*(self.program.play_task(c) for c in contexts))
                for ctx, result in zip(contexts, results, strict=True):
                    ctx.committing = True
                    await self.program.commit_task(ctx, result)
                    if ctx.task.task_id not in done:
                        self._record_task(ctx)
                    bar.update(1)
                # The wave's views are read no more (the next wave reads its commits):
                # the memory service keeps the live views of one wave at a time.
                self._drop_views()
        finally:
            bar.close()

    def _drop_views(self) -> None:
        for view in sorted(self._views):
            self.sweep.memory.drop_views(view)
        self._views.clear()

    def _record_task(self, ctx: _Context) -> None:
        """The task's result in the ledger: its first successful play (else its last),
        with the tokens and calls of all its plays and `attempt` = how many."""
        if not ctx.plays:
            return
        chosen = next((p for p in ctx.plays if p.success), ctx.plays[-1]).summary
        summary = replace(
            chosen,
            tokens_in=sum(p.summary.tokens_in for p in ctx.plays),
            tokens_out=sum(p.summary.tokens_out for p in ctx.plays),
            n_llm_calls=sum(p.summary.n_llm_calls for p in ctx.plays),
            attempt=len(ctx.plays),
        )
        self.ledger.record_episode(self.stage.key, summary)

    def bounded(self, entries: Sequence[Any], counted: bool = True) -> list[Any]:
        """`entries` within the memory bounds (what was cut or made inert is counted in
        the bank's stats when `counted`: commits, not the staged copies)."""
        counts = self.bound_counts if counted else Counter()
        return [bound_entry(e, self.bounds, self._delimiters, counts) for e in entries]

    # -- effects ------------------------------------------------------------------------

    def view_of(
        self, snapshot: dict[str, list[Any]], staged: dict[str, list[Any]], task_id: str
    ) -> str | None:
        """The id of the memory a play reads (committed as of its wave + its task's
        slot), made searchable in the memory service; None: the method has no bank."""
        if not self.method.collections or not self.stage.searches_live_bank:
            return None
        collections = {
            name: [*snapshot.get(name, []), *staged.get(name, [])] for name in self.memory.specs
        }
        content = digest_of(
            {n: [entry_to_dict(e) for e in items] for n, items in collections.items()}
        )
        view = f"{self.stage.key.short}-{content[:24]}"
        if view not in self._views:
            bank = BuiltBank(self.method.store_prefix, self.method.collections, collections)
            own = own_embedder(self.method, self.stage.settings)  # None: the sweep's
            self.sweep.memory.put_view(view, bank, self.isolation, own)
            self._views.add(view)
        return view

    def _player(self) -> ModelConfig:
        """The model its plays are played by (the stage's own, else its role's)."""
        return self.sweep.episode_model(self.stage)

    def _episodes_pool(self) -> Any:
        if self._pool is None:
            from distillery.orchestrator.execution.episode_pool import EpisodePool

            # The stage's own model (a brew may play another model than the point's
            # student), sampling with the stage's own seed; the oracle has no server.
            model = self._player()
            endpoints = self.sweep.servers.endpoints(model)
            directory = self.sweep.servers.directory(model)
            cluster, share = self.sweep.granted(self.stage, model)  # its part of the slots
            job = self.sweep.agent_job(self.stage, share, None)
            seed = effective_seed(model, self.stage.sweep_seed)
            job = replace(job, model=job.model.model_copy(update={"seed": seed}))
            self._pool = EpisodePool(job, endpoints, cluster, directory)
            self._pool.start()
        return self._pool

    async def play(
        self,
        task_id: str,
        attempt: int,
        view: str | None,
        staged: tuple[Any, ...],
        folder: str | None = None,
    ) -> EpisodeSummary:
        """One play of `task_id` reading `view` and `staged`, its episode file under the
        stage's episodes in `folder` (None: `attempt-<attempt>`, the task's plays)."""
        from distillery.workers.episodes import PlayRequest
        from distillery.workers.memory_service import MemoryJob

        service = self.sweep.memory.service if view is not None else None
        memory = MemoryJob(
            service,
            view,
            self.isolation,
            self.stage.settings,
            self.stage.memory_kind,
            self.sweep.cfg.memory.bounds.max_injected_chars,
            attempt=attempt,
            staged=staged,
        )
        where = self.ledger.episodes_dir(self.stage.key) / (folder or f"attempt-{attempt}")
        request = PlayRequest(attempt, memory, where.uri)
        pool = self._episodes_pool()
        with self.sweep.servers.calling(self._player(), self.stage.key):
            summary = await pool.play(task_id, request)
        if summary.success is None:
            raise StageStopped(
                f"{self.stage.key}: task {task_id!r} play {attempt} failed on infrastructure "
                f"after its retries ({(summary.error_message or '')[:300]}); re-run the same "
                "command to resume the stage there"
            )
        return summary

    def read_play(self, data: dict[str, Any]) -> PlayResult | None:
        """A recorded play's summary and full record (None: its file is gone or no
        longer the one recorded)."""
        summary = EpisodeSummary(**data)
        if not self.ledger.intact(summary):
            return None
        from distillery.workers.storage import Location

        try:
            (record,) = read_episode_file_bytes(Location.of(summary.file).read_bytes())
        except (OSError, ValueError):
            return None
        return PlayResult(summary, record)

    async def similarities(self, queries: list[str], keys: list[str]) -> list[list[float]]:
        if not queries or not keys:
            return [[] for _ in queries]
        return await asyncio.to_thread(self.sweep.memory.call, "similarities", queries, keys)

    async def ask(self, role: str, messages: list[dict[str, Any]]) -> tuple[Reply, str]:
        model = self.stage.models.get(role)
        if model is None:
            raise ValueError(
                f"{self.stage.key}: its program asks the {role!r} model, which the stage "
                f"does not call (its models: {sorted(self.stage.models)})"
            )
        if role not in self._llms:
            from distillery.workers.memory_service import builder_llm

            self._llms[role] = builder_llm(model, self.sweep.servers.endpoints(model))
        from distillery.workers.llm.types import (
            ContextOverflow,
            InfraError,
            InvalidReply,
            RequestRejected,
        )

        try:
            with self.sweep.servers.calling(model, self.stage.key):
                result = await self._llms[role].chat(messages)
        except InfraError as exc:
            raise StageStopped(
                f"{self.stage.key}: the {role} model {model.name} failed ({exc}); re-run the "
                "same command to resume the stage there"
            ) from exc
        except RequestRejected as exc:  # a RequestConfigError is no refusal: it stops
            why = "context_overflow" if isinstance(exc, ContextOverflow) else "rejected"
            return Reply("", refused=why), model.name
        except InvalidReply:
            return Reply("", refused="invalid_reply"), model.name
        usage = result.usage
        return Reply(result.text, usage.prompt_tokens, usage.completion_tokens), model.name

    # -- the bank -------------------------------------------------------------------------

    def _bank_output(self) -> Any:
        # The memory the program chose (its counts are the bank's), else the last.
        collections = self.chosen[1] if self.chosen is not None else self.memory.snapshot()
        chosen = {"chosen_in_task": self.chosen[0] + 1} if self.chosen is not None else {}
        bank = BuiltBank(
            self.method.store_prefix,
            self.method.collections,
            collections,
            {
                **{f"{n}.committed": len(v) for n, v in collections.items()},
                **chosen,
                **dict(self.bound_counts),
                # What the program logged (fallbacks, rejections...): the build's counts.
                **{f"events.{k}": n for k, n in sorted(self.event_counts.items())},
            },
        )
        own = own_embedder(self.method, self.stage.settings)  # None: the sweep's
        embedder = (own or self.sweep.cfg.memory.embedder).model_dump(
            mode="json", include={"kind", "model"}
        )
        content = {n: [entry_to_dict(e) for e in items] for n, items in collections.items()}
        bank_id = digest_of(
            {"content": content, "stage": self.stage.key.digest, "embedder": embedder}
        )
        reused = self.sweep.memory.reused(bank_id)
        return reused if reused is not None else self.sweep.memory.written(bank_id, bank, own)


def entries_of(record: dict[str, Any], specs: dict[str, CollectionSpec]) -> list[Any]:
    """The entries of a journal record (staged or committed), rebuilt as dataclasses."""
    out = []
    for item in record.get("entries", []):
        data = {k: v for k, v in item.items() if k != "collection"}
        out.append(entry_from_dict(specs[item["collection"]].entry_type, data))
    return out
