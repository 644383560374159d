"""What every benchmark adapter offers the agent loop.

A benchmark adapter knows its benchmark and nothing of memory, models or Ray: it loads
tasks, gives each episode an isolated environment, turns model output into validated
tool calls, executes them and scores the finished episode with the benchmark's own
checker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel, ConfigDict, Field


@dataclass(frozen=True)
class ToolCall:
    """One validated call: a function of the task with literal arguments only.

    `args` are positional literals, `kwargs` keyword literals. `source` is the canonical
    Python rendering (``name(a, b=1)``) rebuilt from the parsed values, never the
    model's raw text.
    """

    name: str
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    call_id: str | None = None

    @property
    def source(self) -> str:
        parts = [repr(a) for a in self.args]
        parts += [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class RejectedCall:
    """A call the benchmark's decoder accepts but that is not allowed to run here.

    It still counts as a call of its step, as the benchmark counts it (its own
    executor would run it and get an error): it is answered with an error and scored
    as a call that changed nothing. `position` is its index in the response, so
    results keep the response's order. `counted` is False for output the benchmark's
    decoder rejects but an option chose to report (it never reaches the checker).
    `limit` names the protection that refused it, when one did (a size limit, an
    argument the benchmark would `eval`): such refusals are deviations from the
    benchmark's own runner, recorded with every run and counted when they fire.
    """

    raw: str
    reason: str
    call_id: str | None = None
    position: int = -1
    counted: bool = True
    limit: str | None = None


@dataclass(frozen=True)
class ParsedAction:
    """What one model response asks the environment to do.

    `decode_error` is set when the response could not be decoded as calls at all
    (the benchmark's decoder fails on it): nothing runs and, as in the benchmark's
    own loop, the turn ends.
    """

    calls: tuple[ToolCall, ...] = ()
    rejected: tuple[RejectedCall, ...] = ()
    decode_error: str | None = None

    @property
    def empty(self) -> bool:
        return not self.calls and not self.rejected


@dataclass(frozen=True)
class ToolResult:
    """The observation for one call (executed or rejected)."""

    call: str  # canonical source, or the raw text of a rejected call
    content: str
    error: str | None = None  # set when the call was rejected or failed
    function: str | None = None  # function name, when known
    call_id: str | None = None
    rejected: bool = False  # never reached the executor (failed validation)
    # The content's length before the world's side cut it (an isolated world's server
    # bounds what it sends); None: not cut there. The loop counts such cuts too.
    cut_from: int | None = None


@dataclass(frozen=True)
class Task:
    """One benchmark task as the agent sees it."""

    task_id: str
    benchmark: str
    turns: tuple[str, ...]  # the user message of each turn, in order
    tools: tuple[dict[str, Any], ...]  # OpenAI `tools` entries for native tool calling
    function_docs: tuple[dict[str, Any], ...]  # the benchmark's own docs (prompt format)
    group_id: str | None = None  # scenario/group used for group-aware splits
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Score:
    success: bool
    error_type: str | None = None
    error_message: str | None = None
    # What the benchmark counted in this episode (e.g. `grader_timeouts`): kept in the
    # episode record's `extra_json` and summed per evaluation point for the names the
    # benchmark class lists in `counters`.
    counters: dict[str, int] = field(default_factory=dict)


class Environment(Protocol):
    """One isolated episode of one task."""

    task: Task

    def system_prompt(self, action_format: str) -> str:
        """The benchmark's system prompt for `native` tool calling or the `prompt` format."""
        ...

    def parse_tool_calls(self, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        """OpenAI-style `tool_calls` (name + JSON arguments) -> validated calls."""
        ...

    def parse_text(self, text: str) -> ParsedAction:
        """The benchmark's prompt format (e.g. ``[f(a=1), g()]``) -> validated calls."""
        ...

    def step(self, action: ParsedAction) -> list[ToolResult]:
        """Execute the validated calls in order; rejected ones come back as errors."""
        ...

    def end_turn(self) -> None:
        """The current user turn is over (the model stopped calling functions)."""
        ...

    # Asked only of a benchmark whose conventions say so (`conventions.py`):
    #
    # `def next_user_message(self, reply: str) -> str | None` (user_turns="environment"):
    # the agent's closing reply of the turn reaches the world (the benchmark's user reads
    # it); the answer is the user's next message, or None when the user has ended the
    # conversation. Called on the environment's thread after `end_turn`.
    #
    # `def task_done(self) -> bool` (world_ends_episode=True): whether the world
    # considers the task over after the last step (no I/O: learnt with that step).
    #
    # Looked up with getattr by the loop, for a benchmark whose own loop opens the
    # conversation itself (AppWorld's ReAct prompt): `def opening_messages(self,
    # action_format: str, memory: str) -> list[dict] | None`, the messages before the
    # first reply (the task in the last) with `memory` where that prompt puts it; None
    # for the system prompt and the task's first turn. No I/O.

    def score(self) -> Score:
        """Score the episode with the benchmark's own checker."""
        ...

    def close(self) -> None:
        """Release every resource of this episode (instances, caches)."""
        ...


# What a benchmark's episodes hold for memory methods to build from
# (`Benchmark.trajectory_contents`): TOOL_CALLS, steps of executed calls with their
# observations (every tool-use benchmark's); ANSWER, a closing reply that is the graded
# answer (the answer benchmarks': a reasoning trace, a program).
TOOL_CALLS = "tool_calls"
ANSWER = "answer"
TRAJECTORY_CONTENTS: tuple[str, ...] = (TOOL_CALLS, ANSWER)


def deviation(description: str) -> Any:
    """A boolean option, off by default, that deviates from the benchmark's own
    pipeline: off, an episode sees what the benchmark's own runner shows the model and
    is scored as its checker scores it. One that is on is recorded with the run (its
    `deviations`) and, by name, in the identity of the episodes it plays."""
    return Field(default=False, description=description, json_schema_extra={"deviation": True})


class BenchmarkOptions(BaseModel):
    """A benchmark's typed options (config `benchmark.options`), one subclass per
    benchmark (its `options_model`): frozen, unknown keys refused, every field with a
    default. Only the fields that differ from their defaults enter episode identity, so
    a new option with a default keeps every existing stage key. Fields declared with
    `deviation(...)` are the benchmark's deviations from its own pipeline."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Every benchmark has it: the safety limit on what one observation adds to the
    # history (see `conventions.ObservationCut`). None: the benchmark's own cut where
    # its runner has one, else distillery's documented default cap.
    max_observation_chars: int | None = Field(
        default=None,
        gt=0,
        description="Longest observation kept in the history, in characters (None: the "
        "benchmark's own cut, else distillery's default of 100,000); a cut is counted.",
    )

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        for name in cls.deviation_names():
            info = cls.model_fields[name]
            if info.annotation is not bool or info.default is not False:
                # Identity records a deviation by its name alone: only on/off fits.
                raise TypeError(f"{cls.__name__}.{name}: a deviation is a bool, False by default")

    @classmethod
    def deviation_names(cls) -> tuple[str, ...]:
        """The deviation options, in declaration order."""
        return tuple(
            name
            for name, info in cls.model_fields.items()
            if isinstance(info.json_schema_extra, dict) and info.json_schema_extra.get("deviation")
        )

    def deviations(self) -> tuple[str, ...]:
        """The deviation options that are on, in declaration order."""
        return tuple(name for name in self.deviation_names() if getattr(self, name))

    def identity(self) -> dict[str, Any]:
        """The options off their defaults, deviations excepted (they are identified by
        name, `deviations`), as JSON."""
        return self.model_dump(
            mode="json", exclude_defaults=True, exclude=set(self.deviation_names())
        )

    def required_environment(self) -> dict[str, str]:
        """Environment variables a run with these options reads (a key of a service the
        benchmark's tools or user call), each with what needs it: a run stops before it
        starts when one is unset. None by default."""
        return {}

    def notices(self) -> tuple[str, ...]:
        """What a user must know before a run with these options starts (e.g. that it
        is played off the benchmark's own harness), one sentence each. None by default."""
        return ()


class BenchmarkUnavailable(ImportError):
    """The adapter cannot load because something it needs is not installed.

    `what` says what is missing, `fix` the one line that installs it; the requirements
    check prints them before a run starts.
    """

    def __init__(self, what: str, fix: str) -> None:
        self.what = what
        self.fix = fix
        super().__init__(f"{what}: {fix}")


class Benchmark(Protocol):
    """A benchmark adapter: its tasks, a fresh environment per episode and its facts.

    The class is registered by name (`registry.py`, or the `distillery.benchmarks`
    entry-point group for a benchmark in another package) and built as
    ``cls(settings=<options_model instance>, **runtime)``; runtime keywords are
    whatever else the adapter takes with defaults. The facts the orchestrator needs are
    read from the class, without an instance.

    How the agent loop plays it (tool results fed back, step limit counted, oracle
    replies written) is the class attribute ``conventions``, an `AgentConventions`
    (`conventions.py`); a benchmark that declares none gets the defaults.
    """

    name: str
    max_steps_per_turn: int
    # Tasks sharing a group (`Task.group_id`) are variations of one scenario: splits
    # keep a group on one side by default (AppWorld scenarios), not BFCL's classes.
    groups_are_scenarios: ClassVar[bool]
    options_model: ClassVar[type[BenchmarkOptions]]

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        """The texts and code facts that change what a model sees or how an episode is
        scored (prompt templates, hints, error wording, a scoring version), in a fixed
        order. The orchestrator hashes them into every episode stage's identity, so a
        change re-runs the benchmark's episodes. Read them at call time (not at import),
        and list a hash of anything long rather than leaving it out."""
        ...

    @classmethod
    def versions(cls) -> dict[str, str]:
        """The benchmark's own packages and their installed versions (provenance)."""
        ...

    def load_tasks(self, limit: int | None = None, task_ids: list[str] | None = None) -> list[Task]:
        """Tasks in the benchmark's canonical order, optionally restricted."""
        ...

    def make_env(self, task: Task, episode_tag: str) -> Environment:
        """A new isolated environment; `episode_tag` is unique per episode attempt."""
        ...

    # Optional, read from the class: `trajectory_contents(options) -> frozenset[str]`,
    # what its episodes hold for memory methods (of TRAJECTORY_CONTENTS); a benchmark
    # that does not say has TOOL_CALLS. A memory method that needs what a benchmark's
    # episodes lack is refused before a run starts (memory/applicability.py).
    #
    # Optional, read from the class: `ground_truth_texts(options, task_ids) -> dict[str,
    # tuple[str, ...]]`, per task the texts of its hidden ground truth (its gold answer,
    # its test cases) that memory written from the task must not contain (AgentBrew's
    # leakage guard, `registry.ground_truth_texts`); a benchmark that does not say has
    # none to check.

    def oracle_turns(self, task: Task) -> list[list[str]]:
        """The ground-truth call strings per turn (for the labelled oracle teacher).

        One string is one step: the oracle writes it as a prompt-format reply with the
        benchmark's `conventions.oracle_reply` (by default ``[call]``) and sends it
        through `parse_text`, so every string must make a reply `parse_text` accepts
        (by default one call of the shared `calls.parse_text_calls`:
        ``name(key=literal, ...)``)."""
        ...
