"""What the answer benchmarks share (GSM8K, MATH, MBPP/MBPP+, HumanEval): a task is one
question, the model answers it in one reply, and a grader scores the answer.

How the agent loop plays them (`AgentConventions(user_turns="environment")`): the
task's question is the user's first message; the model's reply is the answer (a reply
with no call ends the turn); the loop hands that closing reply to the environment
(`next_user_message`), which grades it and answers None: the episode ends, as the
official harnesses generate once and score. With ``attempts`` > 1 (the protocol of
Reflexion and AgentBrew's re-plays, not the official one), a wrong answer is answered
with the grader's feedback instead, and the model answers again, up to that many
times; the episode's score is its last answer's. A benchmark may also give the model
tools (the code benchmarks' ``run_tests``): its calls are steps of the turn, and the
reply without a call is the answer.

Grading waits on other processes (math-verify's, the sandbox's), so it runs on this
module's threads (`GRADING_THREADS`), not on the environment thread in-process
benchmarks share: episodes grade concurrently.
"""

from __future__ import annotations

import hashlib
import inspect
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version
from typing import Any, ClassVar

from pydantic import Field

from distillery.workers.envs.answer_data import DataProblem, records_digest
from distillery.workers.envs.base import (
    BenchmarkOptions,
    ParsedAction,
    RejectedCall,
    Score,
    Task,
    ToolResult,
    deviation,
)
from distillery.workers.envs.conventions import AgentConventions

GRADING_THREADS = ThreadPoolExecutor(max_workers=128, thread_name_prefix="distillery-grading")
# Where the data is, not what it is: never in episode identity (its digest is).
LOCATION_OPTIONS = frozenset({"data_path", "hub_id", "hub_revision"})
NO_TOOLS = "this task offers no tools: answer in plain text"


class AnswerOptions(BenchmarkOptions):
    """Options every answer benchmark has; each benchmark's options subclass it and
    define `records` (the split's records, checked) and their split."""

    data_path: str | None = Field(
        default=None,
        description="A folder holding the official release's files (see the benchmark's "
        "docs page for the layout). Unset: the hub, through the datasets library.",
    )
    hub_id: str | None = Field(
        default=None,
        description="What `datasets.load_dataset` loads when no data_path is set (default: "
        "the benchmark's official hub id); a local folder laid out as the hub repository "
        "works too.",
    )
    hub_revision: str | None = Field(default=None, description="The hub revision (default: main).")
    attempts: int = Field(
        default=1,
        ge=1,
        le=10,
        description="Answers per episode: after a wrong one the environment returns the "
        "grader's feedback and the model answers again (Reflexion's protocol). 1: the "
        "official single answer.",
    )
    sandbox_without_namespaces: bool = deviation(
        "Where Linux namespaces are unavailable, grade without network and filesystem "
        "isolation (resource limits and a private working directory only), counted "
        "as `sandbox_unisolated` in every episode it fires in."
    )

    def records(self) -> list[dict[str, Any]]:
        """The chosen split's records in task order, each with its ``task_id``
        (`DataProblem` when the data is missing or malformed)."""
        raise NotImplementedError

    def identity(self) -> dict[str, Any]:
        """Options off their defaults but where the data lives, plus ``data``: the
        digest of the split's records. Without data there is no digest, and no run
        either (building the benchmark refuses it, naming what is missing)."""
        out = {k: v for k, v in super().identity().items() if k not in LOCATION_OPTIONS}
        try:
            return {**out, "data": records_digest(self.records())}
        except DataProblem:
            return out


@dataclass(frozen=True)
class Attempt:
    """One graded answer."""

    correct: bool
    answer: str = ""  # what was graded (the extracted answer, the program)
    reason: str = ""  # why it is wrong (empty when correct)
    error_type: str | None = None
    counters: dict[str, int] = field(default_factory=dict)


class AnswerBenchmark:
    """Base of the answer benchmarks (see the module docstring). A subclass defines
    `name`, `options_model`, `task`, `system_prompt`, `grade`, `feedback`,
    `oracle_answer`, `prompt_texts` and, for tools, `parse_text`/`parse_tool_calls`/
    `run_tool`."""

    name: ClassVar[str]
    options_model: ClassVar[type[AnswerOptions]] = AnswerOptions
    max_steps_per_turn: ClassVar[int] = 1
    groups_are_scenarios: ClassVar[bool] = False
    known_deviations: ClassVar[tuple[str, ...]] = ()
    # Counters the episodes record (`Score.counters`), summed per evaluation point.
    counters: ClassVar[tuple[str, ...]] = ()
    # Packages whose versions are recorded with every run.
    packages: ClassVar[tuple[str, ...]] = ()
    conventions = AgentConventions(user_turns="environment", oracle_reply=lambda step: step)

    def __init__(self, settings: AnswerOptions | None = None) -> None:
        self.settings = settings or self.options_model()
        records = self.settings.records()  # refused here, before any worker starts
        self._records = {str(r["task_id"]): r for r in records}
        self._tasks = {task_id: self.task(r) for task_id, r in self._records.items()}
        self.prepare()

    # -- class facts -----------------------------------------------------------------

    @classmethod
    def prompt_texts(cls) -> tuple[str, ...]:
        """Every text the model is shown besides the task's data."""
        return ()

    # What the grading code decides, as a version in every episode key of the benchmark
    # (None: the hash of `grading_modules`' source). Give it a new value when a verdict
    # an existing episode would get changes; the code lock asks for that decision.
    grading_version: ClassVar[str | None] = None

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        # The prompts, and the code that reads and grades answers: a change re-runs
        # the benchmark's episodes. A family that declares its `grading_version` (the
        # project's: its code pinned by the code lock, tests/orchestrator/code_lock.json)
        # carries that; one that does not (a plugin's) the hash of its grading modules'
        # source, which never misses a change.
        code = cls.grading_version
        if code is None:
            sources = [inspect.getsource(module) for module in cls.grading_modules()]
            code = hashlib.sha256("\n".join(sources).encode()).hexdigest()
        return (*cls.prompt_texts(), f"grading:{code}")

    @classmethod
    def trajectory_contents(cls, options: AnswerOptions) -> frozenset[str]:
        """A single reply: no tool calls for memory methods to build from."""
        return frozenset()

    @classmethod
    def grading_modules(cls) -> tuple[Any, ...]:
        """The modules whose code decides a verdict (hashed into the fingerprint)."""
        return (inspect.getmodule(cls),)

    @classmethod
    def ground_truth_texts(
        cls, options: AnswerOptions, task_ids: Sequence[str]
    ) -> dict[str, tuple[str, ...]]:
        """Per task, its hidden ground truth as texts (`truth_texts` of its record):
        what memory written from the task must not contain (registry.ground_truth_texts)."""
        records = {str(r["task_id"]): r for r in options.records()}
        return {t: cls.truth_texts(options, records[t]) for t in task_ids if t in records}

    @classmethod
    def truth_texts(cls, options: AnswerOptions, record: dict[str, Any]) -> tuple[str, ...]:
        """The texts of one record's ground truth (its gold answer, its tests)."""
        return ()

    @classmethod
    def versions(cls) -> dict[str, str]:
        found = {}
        for package in cls.packages:
            try:
                found[package] = version(package)
            except PackageNotFoundError:
                found[package] = "absent"
        return found

    # -- the Benchmark protocol ------------------------------------------------------

    def prepare(self) -> None:
        """Check what grading needs (a grader, a sandbox) before any episode:
        `BenchmarkUnavailable` with the fix when it is missing."""

    def load_tasks(self, limit: int | None = None, task_ids: list[str] | None = None) -> list[Task]:
        tasks = list(self._tasks.values())
        if task_ids is not None:
            unknown = [i for i in task_ids if i not in self._tasks]
            if unknown:
                raise ValueError(f"unknown {self.name} task ids: {unknown[:10]}")
            wanted = set(task_ids)
            tasks = [t for t in tasks if t.task_id in wanted]
        if limit is not None:
            if limit < 0:
                raise ValueError(f"limit must be >= 0, got {limit}")
            tasks = tasks[:limit]
        return tasks

    def make_env(self, task: Task, episode_tag: str) -> AnswerEnvironment:
        record = self._records.get(task.task_id)
        if record is None:
            raise ValueError(f"unknown {self.name} task id {task.task_id!r}")
        return AnswerEnvironment(self, self._tasks[task.task_id], record)

    def oracle_turns(self, task: Task) -> list[list[str]]:
        return [[self.oracle_answer(self._records[task.task_id])]]

    def record(self, task_id: str) -> dict[str, Any]:
        return self._records[task_id]

    # -- what a subclass defines ----------------------------------------------------

    def task(self, record: dict[str, Any]) -> Task:
        raise NotImplementedError

    def system_prompt(self, action_format: str) -> str:
        raise NotImplementedError

    def grade(self, record: dict[str, Any], reply: str) -> Attempt:
        raise NotImplementedError

    def feedback(self, attempt: Attempt) -> str:
        """The user's next message after a wrong answer (``attempts`` > 1)."""
        return f"Your answer is not correct ({attempt.reason}). Please try again."

    def oracle_answer(self, record: dict[str, Any]) -> str:
        raise NotImplementedError

    def parse_text(self, record: dict[str, Any], text: str) -> ParsedAction:
        return ParsedAction()  # the reply is the answer

    def parse_tool_calls(
        self, record: dict[str, Any], tool_calls: list[dict[str, Any]]
    ) -> ParsedAction:
        rejected = tuple(
            RejectedCall(str(call.get("name", ""))[:100], NO_TOOLS, call.get("id"), position)
            for position, call in enumerate(tool_calls)
        )
        return ParsedAction(rejected=rejected)

    def run_tool(self, record: dict[str, Any], action: ParsedAction) -> list[ToolResult]:
        return []


class AnswerEnvironment:
    """One episode of an answer benchmark (see the module docstring)."""

    env_executor: ClassVar[ThreadPoolExecutor] = GRADING_THREADS

    def __init__(self, benchmark: AnswerBenchmark, task: Task, record: dict[str, Any]) -> None:
        self.task = task
        self._benchmark = benchmark
        self._record = record
        self._attempts: list[Attempt] = []
        self._lock = threading.Lock()

    def system_prompt(self, action_format: str) -> str:
        if action_format not in ("prompt", "native"):
            raise ValueError(f"unknown action format {action_format!r}")
        return self._benchmark.system_prompt(action_format)

    def parse_text(self, text: str) -> ParsedAction:
        return self._benchmark.parse_text(self._record, text)

    def parse_tool_calls(self, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        return self._benchmark.parse_tool_calls(self._record, tool_calls)

    def step(self, action: ParsedAction) -> list[ToolResult]:
        results = self._benchmark.run_tool(self._record, action)
        for rejected in action.rejected:
            results.append(
                ToolResult(
                    rejected.raw,
                    f"Error: {rejected.reason}",
                    rejected.reason,
                    None,
                    rejected.call_id,
                    rejected=True,
                )
            )
        return results

    def end_turn(self) -> None:
        return None

    def next_user_message(self, reply: str) -> str | None:
        """Grade the closing reply; None ends the episode (right, or out of attempts),
        else the grader's feedback is the user's next message."""
        attempt = self._benchmark.grade(self._record, reply or "")
        with self._lock:
            self._attempts.append(attempt)
            done = attempt.correct or len(self._attempts) >= self._benchmark.settings.attempts
        return None if done else self._benchmark.feedback(attempt)

    def score(self) -> Score:
        with self._lock:
            attempts = list(self._attempts)
        counters: dict[str, int] = {}
        for attempt in attempts:
            for key, value in attempt.counters.items():
                counters[key] = counters.get(key, 0) + value
        if not attempts:  # the episode ended before any answer (a step limit, a bad reply)
            return Score(False, "no_answer", "the episode ended without an answer", counters)
        last = attempts[-1]
        if len(attempts) > 1:
            counters["answers"] = len(attempts)
        return Score(last.correct, last.error_type, last.reason or None, counters)

    def attempts(self) -> Sequence[Attempt]:
        with self._lock:
            return tuple(self._attempts)

    def close(self) -> None:
        return None
