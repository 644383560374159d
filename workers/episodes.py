"""Runs many episodes concurrently (asyncio) and persists each one as it finishes.

`EpisodeRunner` is plain Python so it can be tested without Ray; `EpisodeWorker` is
the same thing as a Ray actor (an async actor: its concurrency is the number of
episodes in flight). An infrastructure failure is retried with a fresh environment
and, if it persists, recorded as `infra_error` / `timeout` with `success=None`:
never scored as a student failure. A `RequestConfigError` (the server refused how the
request was built) is no result at all: it propagates and stops the run.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import traceback
import uuid
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pyarrow as pa

from distillery.workers.agents.loop import EpisodeOutcome, MemoryHooks, run_agent_loop
from distillery.workers.agents.policies import ChatBackend, EpisodePolicy, LlmPolicy, OraclePolicy
from distillery.workers.envs.base import Benchmark, Score, Task
from distillery.workers.envs.conventions import AgentConventions, conventions_of
from distillery.workers.envs.execution import close_in_env_thread, run_in_env_thread
from distillery.workers.envs.registry import make_benchmark
from distillery.workers.llm.compat import PREFLIGHT_PROMPT
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.replies import clean_text
from distillery.workers.llm.types import ChatResult, InfraError, RequestConfigError
from distillery.workers.memory.bounds import BoundedHooks
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory_service import BankSearch, MemoryJob
from distillery.workers.trajectories import (
    EpisodeFile,
    EpisodeRecord,
    EpisodeSummary,
    messages_to_json,
    storable_record,
    write_episode,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentJob:
    """Everything a worker needs to play one agent on a benchmark split."""

    run_id: str
    stage: str  # collect | evaluate
    role: str  # teacher | student
    model: ModelConfig
    benchmark: str
    episodes_dir: str
    # Config benchmark.options, the benchmark's deviations from its own pipeline included.
    benchmark_options: dict[str, Any] = field(default_factory=dict)
    max_steps_per_turn: int | None = None  # None -> the benchmark's official limit
    episode_timeout_s: float = 1800.0
    episode_retries: int = 2
    retry_backoff_s: float = 2.0
    memory: MemoryJob | None = None  # when the student reads memory


@dataclass(frozen=True)
class PlayRequest:
    """One play of a task an outcome-driven stage decided at run time: which play it is
    (recorded in the episode), the memory it reads (its stage's live view and what was
    staged for the task) and where its episode file goes (one folder per play)."""

    attempt: int
    memory: MemoryJob | None
    episodes_dir: str


def make_chat_backend(
    model: ModelConfig,
    endpoints: list[str],
    directory: Any = None,
    share: tuple[int, int] = (0, 1),
) -> ChatBackend:
    from distillery.workers.llm.router import RoutedChat

    return RoutedChat.from_config(model, endpoints, directory, share)


class EpisodeRunner:
    def __init__(
        self,
        job: AgentJob,
        endpoints: list[str] | None = None,
        chat_backend: ChatBackend | None = None,
        directory: Any = None,
        share: tuple[int, int] = (0, 1),
    ) -> None:
        self.job = job
        self.benchmark: Benchmark = make_benchmark(job.benchmark, job.benchmark_options)
        # How this benchmark is played: its own conventions, never another benchmark's
        # (with the observation cut the config chose, if it chose one).
        self.conventions: AgentConventions = conventions_of(self.benchmark).with_observation_chars(
            job.benchmark_options.get("max_observation_chars")
        )
        self._tasks = {t.task_id: t for t in self.benchmark.load_tasks()}
        self._max_steps = job.max_steps_per_turn or self.benchmark.max_steps_per_turn
        # A cap the benchmark's runner would not send, sent for the model's sake.
        self._protective_cap = (
            job.model.cap_every_request
            and job.model.max_tokens is not None
            and self.conventions.sent_sampling(job.model)["max_tokens"] is None
        )
        if job.model.backend == "oracle":
            self._chat = None
        else:
            self._chat = chat_backend or make_chat_backend(
                job.model, endpoints or [], directory, share
            )

    def _policy(self, task: Task, episode_id: str) -> EpisodePolicy:
        if self._chat is None:
            return OraclePolicy(self.benchmark.oracle_turns(task), self.conventions.oracle_reply)
        m = self.job.model
        # Only what the benchmark's own runner sends (BFCL's: the temperature).
        sent = self.conventions.sent_sampling(m)
        if self._protective_cap:
            sent["max_tokens"] = m.max_tokens
        return LlmPolicy(
            self._chat,
            episode_id,
            m.action_format,
            sent["temperature"],
            sent["max_tokens"],
            sent["seed"],
            sent["top_p"],
            context_tokens=m.max_model_len,  # a benchmark that trims to the context reads it
        )

    async def preflight(self) -> str | None:
        """One request shaped exactly like an episode's (the same sampling, token cap,
        reasoning and thinking fields), so a server that refuses how this model's
        requests are built stops the run at its first request (`RequestConfigError`
        propagates) instead of failing every episode.

        Its reply is data like any other: an unreachable server, or a reply of any
        shape or size (`InvalidReply`, a refusal of the conversation, anything else a
        reply can cause), is left to the episodes, which retry the one and score the
        other as the model's; what happened is returned as one line."""
        if self._chat is None or not self._tasks:
            return None
        policy = self._policy(next(iter(self._tasks.values())), f"preflight-{uuid.uuid4().hex}")
        try:
            await policy.respond([{"role": "user", "content": PREFLIGHT_PROMPT}], None)
        except RequestConfigError:
            raise  # how distillery built the request: the run stops here
        except InfraError as exc:
            return _one_line(f"unreachable: {exc}")
        except Exception as exc:  # the reply is the model's (its server's): data, not a stop
            return _one_line(f"unusable reply ({type(exc).__name__}): {exc}")
        finally:
            await policy.close()
        return None

    async def run_task(self, task_id: str, play: PlayRequest | None = None) -> EpisodeSummary:
        """Play one task (retrying infrastructure failures) and persist the record
        (`play`: one play of an outcome-driven stage, else the job's own)."""
        task = self._tasks.get(task_id)
        if task is None:
            raise ValueError(f"task {task_id!r} is not in benchmark {self.job.benchmark!r}")
        started = time.time()
        attempts = 0
        failure = ("infra_error", "")
        while attempts <= self.job.episode_retries:
            attempts += 1
            episode_id = f"{self.job.role}-{task_id}-{uuid.uuid4().hex[:12]}"
            try:
                record = await self._attempt(task, episode_id, started, attempts, play)
                # Inside the handling too: nothing in a record may abort the sweep.
                written = await self._write(record, play)
            except RequestConfigError:
                raise  # not a result: the run stops (never retried, never recorded)
            except InfraError as exc:
                failure = ("infra_error", f"{type(exc).__name__}: {exc}")
            except TimeoutError:
                failure = ("timeout", f"episode exceeded {self.job.episode_timeout_s:.0f} s")
            except Exception as exc:  # a bug in an adapter or policy is not the student's
                failure = ("infra_error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}")
            else:
                return EpisodeSummary.of(record, written)
            log.warning("episode %s attempt %d failed: %s", task_id, attempts, failure[1][:300])
            if attempts <= self.job.episode_retries:
                await asyncio.sleep(self.job.retry_backoff_s * attempts)
        record = self._unscored_record(task, episode_id, started, attempts, *failure)
        if play is not None:
            record = replace(record, attempt=play.attempt)
        return EpisodeSummary.of(record, await self._write(record, play))

    async def _write(self, record: EpisodeRecord, play: PlayRequest | None = None) -> EpisodeFile:
        # In a thread: the write ends in an fsync (milliseconds of waiting) that would
        # otherwise stall every other episode of this worker's event loop.
        directory = play.episodes_dir if play is not None else self.job.episodes_dir
        try:
            return await asyncio.to_thread(write_episode, directory, record)
        except (ValueError, TypeError, OverflowError, pa.ArrowException) as exc:
            # A value Parquet cannot hold (replies are cleaned by the client; this is
            # the net under it): store the record with such values repaired.
            log.warning("episode %s stored repaired: %s", record.task_id, exc)
            repaired = storable_record(record)
            return await asyncio.to_thread(write_episode, directory, repaired)

    async def _attempt(
        self,
        task: Task,
        episode_id: str,
        started: float,
        attempts: int,
        play: PlayRequest | None = None,
    ) -> EpisodeRecord:
        env = self.benchmark.make_env(task, episode_id)
        policy = self._policy(task, episode_id)
        hooks = self._hooks(task, policy, play.memory if play is not None else self.job.memory)
        try:
            # Environment code runs off the event loop (see envs/execution.py), so the
            # timeout ends an episode stuck in a slow call too, scoring included.
            async with asyncio.timeout(self.job.episode_timeout_s):
                outcome = await run_agent_loop(
                    env, policy, self._max_steps, hooks, conventions=self.conventions
                )
                score = await run_in_env_thread(env.score)
        finally:
            await policy.close()
            await close_in_env_thread(env.close)
        if hooks is not None:  # the hooks' calls (e.g. a decomposition) are the student's usage
            calls, usage = hooks.model_usage()
            outcome.n_llm_calls += calls
            outcome.tokens_in += usage.prompt_tokens
            outcome.tokens_out += usage.completion_tokens
            outcome.tokens_reasoning += usage.reasoning_tokens
        record = self._record(task, episode_id, started, attempts, outcome, score)
        if play is not None:
            record = replace(record, attempt=play.attempt)
        extra: dict[str, Any] = hooks.record() if hooks is not None else {}
        extra.update(score.counters)  # the benchmark's own counts (Score.counters)
        if outcome.reply_notes:
            extra["reply_notes"] = outcome.reply_notes
            extra["reply_notes_dropped"] = outcome.reply_notes_dropped
        # How often each protection fired (the loop's and the environment's own).
        fired = outcome.limits_fired + Counter(getattr(env, "limits_fired", None) or {})
        if self._protective_cap and outcome.length_stops:
            fired["generation_cap"] += outcome.length_stops
        if fired:
            extra["limits_fired"] = dict(sorted(fired.items()))
        if extra:
            record = replace(record, extra_json=json.dumps(extra, ensure_ascii=False))
        return record

    def _hooks(
        self, task: Task, policy: EpisodePolicy, memory: MemoryJob | None
    ) -> MemoryHooks | None:
        if memory is None:
            return None

        async def ask(messages: list[dict[str, Any]]) -> ChatResult:
            return await policy.respond(messages, None)

        isolation = memory.isolation
        # The method acts inside the episode only through the hooks it returns; what
        # they inject is bounded (memory/bounds.py), whatever the bank holds.
        hooks = memory_method(memory.kind).hooks(
            task,
            BankSearch(memory),
            memory.retrieval,
            allows=lambda source: isolation.allows(source, task.task_id),
            ask_model=ask,
        )
        return BoundedHooks(hooks, memory.max_injected_chars)

    def _base_fields(self, task: Task, episode_id: str, started: float, attempts: int) -> dict:
        m = self.job.model
        finished = time.time()
        return dict(
            run_id=self.job.run_id,
            stage=self.job.stage,
            role=self.job.role,
            agent=m.name,
            model=m.model or m.name,
            backend=m.backend,
            action_format="prompt" if m.backend == "oracle" else m.action_format,
            benchmark=self.job.benchmark,
            task_id=task.task_id,
            group_id=task.group_id,
            n_turns=len(task.turns),
            wall_s=finished - started,
            started_at=started,
            finished_at=finished,
            attempts=attempts,
            episode_id=episode_id,
        )

    def _record(
        self,
        task: Task,
        episode_id: str,
        started: float,
        attempts: int,
        outcome: EpisodeOutcome,
        score: Score,
    ) -> EpisodeRecord:
        error_message = score.error_message
        if outcome.termination == "invalid_reply":
            error_message = f"invalid reply: {outcome.rejection}"
        elif outcome.rejection:
            error_message = f"request rejected: {outcome.rejection}"
        fields = self._base_fields(task, episode_id, started, attempts)
        # The conversation's user turns: the task's, or more where the benchmark's own
        # user kept talking (ToolSandbox's simulated user answers the closing replies).
        fields["n_turns"] = max(fields["n_turns"], len(outcome.steps_per_turn))
        return EpisodeRecord(
            **fields,
            success=score.success,
            error_type=score.error_type,
            error_message=error_message,
            termination=outcome.termination,
            steps_per_turn=outcome.steps_per_turn,
            total_steps=sum(outcome.steps_per_turn),
            n_llm_calls=outcome.n_llm_calls,
            tokens_in=outcome.tokens_in,
            tokens_out=outcome.tokens_out,
            tokens_reasoning=outcome.tokens_reasoning,
            llm_latency_s=outcome.llm_latency_s,
            steps=outcome.steps,
            messages_json=messages_to_json(outcome.messages),
            model_calls=outcome.model_calls,
            injections=outcome.injections,
        )

    def _unscored_record(
        self,
        task: Task,
        episode_id: str,
        started: float,
        attempts: int,
        termination: str,
        message: str,
    ) -> EpisodeRecord:
        return EpisodeRecord(
            **self._base_fields(task, episode_id, started, attempts),
            success=None,
            error_type=termination,
            error_message=clean_text(message[:4000])[0],
            termination=termination,
            steps_per_turn=[],
            total_steps=0,
            n_llm_calls=0,
            tokens_in=0,
            tokens_out=0,
            llm_latency_s=0.0,
        )


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(clean_text(text)[0].split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


class EpisodeWorkerImpl:
    """Ray actor body: one EpisodeRunner per agent job, many episodes in flight."""

    def __init__(
        self,
        job: AgentJob,
        endpoints: list[str] | None = None,
        directory: Any = None,
        share: tuple[int, int] = (0, 1),
    ) -> None:
        from distillery import redaction

        # Before anything can log: this worker's logs and streams are Ray session logs.
        redaction.protect(job.model)
        logging.basicConfig(level=logging.WARNING)
        self._runner = EpisodeRunner(job, endpoints, directory=directory, share=share)

    async def run_task(self, task_id: str, play: PlayRequest | None = None) -> EpisodeSummary:
        return await self._runner.run_task(task_id, play)

    async def widen(self, per_replica: int) -> None:
        """Its stage's grant grew to `per_replica` request slots on each replica: its
        router takes its share of them (async: on the loop its episodes run on)."""
        widen = getattr(self._runner._chat, "widen", None)
        if callable(widen):
            widen(per_replica)

    def ready(self) -> str:
        """The Ray node this worker runs on."""
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else "local"

    def routing_stats(self) -> dict[str, int]:
        """Requests re-sent to another replica, episodes moved (router.RoutedChat)."""
        stats = getattr(self._runner._chat, "stats", None)
        return cast(dict[str, int], stats()) if callable(stats) else {}

    async def preflight(self) -> str | None:
        return await self._runner.preflight()

    def cpu_time_s(self) -> float:
        """CPU seconds this worker process has used (for overhead accounting)."""
        return time.process_time()
