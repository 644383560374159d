"""The distillery side of an isolated benchmark: the `Benchmark`/`Environment`
protocols implemented by talking to worker processes (`process.py`) that run the
benchmark's world module in its own venv (`venv.py`).

A benchmark adapter that needs its own dependencies is then two files: the world
module (stdlib + the benchmark's library, run inside the venv; see `server.py` for
what it defines) and a subclass of `IsolatedBenchmark` declaring its name, options,
`env_spec` (requirements), `world` (the module's path) and, where its action format
is not the shared call list, `parse_text`/`parse_tool_calls`.

The loop calls `system_prompt` and `end_turn` on the event loop, so neither does I/O:
prompts come with the task listing and turn ends are sent with the next request. Calls
that wait for the worker (`step`, `score`, `close`) run on this module's thread pool
(`env_executor`, read by `execution.run_in_env_thread`), not on the one environment
thread in-process benchmarks share: waiting on another process holds no state of ours,
so episodes wait concurrently.
"""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from distillery.workers.envs.base import (
    BenchmarkOptions,
    BenchmarkUnavailable,
    ParsedAction,
    Score,
    Task,
    ToolCall,
    ToolResult,
    deviation,
)
from distillery.workers.envs.calls import (
    DEFAULT_LIMITS,
    CallLimits,
    parse_native_calls,
    parse_text_calls,
)
from distillery.workers.envs.conventions import conventions_of
from distillery.workers.envs.isolated import server
from distillery.workers.envs.isolated.process import (
    DEFAULT_MAX_REPLY_BYTES,
    MalformedReply,
    WorkerPool,
    WorkerProcess,
)
from distillery.workers.envs.isolated.venv import EnvNotReady, EnvSpec, ReadyEnv, check
from distillery.workers.llm.replies import clean_text
from distillery.workers.sandbox.jail import NO_NAMESPACES_HELP
from distillery.workers.sandbox.netns import network_isolation_unavailable

# Threads that only wait on workers: one per concurrently waiting episode.
ISOLATED_THREADS = ThreadPoolExecutor(max_workers=256, thread_name_prefix="distillery-isolated")
# Options that say where and how to run the worker, not what an episode is: they never
# enter episode identity and are not sent to the world.
OPERATIONAL = frozenset(
    {
        "venv",
        "call_timeout_s",
        "startup_timeout_s",
        "max_reply_bytes",
        "spare_workers",
        "sandbox_without_namespaces",  # a deviation: recorded by name, not sent to the world
    }
)


class IsolatedOptions(BenchmarkOptions):
    """Options every isolated benchmark has; a benchmark's own options subclass it."""

    venv: str | None = Field(
        default=None, description="The benchmark's venv (default: see venv.py)."
    )
    call_timeout_s: float = Field(default=120.0, gt=0, description="Per-call limit of the worker.")
    startup_timeout_s: float = Field(default=120.0, gt=0, description="Limit for a worker to boot.")
    max_reply_bytes: int = Field(
        default=DEFAULT_MAX_REPLY_BYTES, gt=0, description="Reply size cap."
    )
    spare_workers: int = Field(default=1, ge=0, le=64, description="Workers booted ahead of need.")
    sandbox_without_namespaces: bool = deviation(
        "Where network namespaces are unavailable, run a world that needs no network "
        "with the network anyway (it runs model-influenced code)."
    )

    def identity(self) -> dict[str, Any]:
        return {k: v for k, v in super().identity().items() if k not in OPERATIONAL}

    def world_options(self) -> dict[str, Any]:
        """What the world module gets: every option but the operational ones and the
        history's observation cut (the agent loop's, not the world's)."""
        return self.model_dump(mode="json", exclude={*OPERATIONAL, "max_observation_chars"})


class IsolatedBenchmark:
    """Base of a benchmark whose world runs in its own venv (see the module docstring)."""

    name: ClassVar[str]
    max_steps_per_turn: ClassVar[int]
    groups_are_scenarios: ClassVar[bool] = False
    options_model: ClassVar[type[IsolatedOptions]] = IsolatedOptions
    env_spec: ClassVar[EnvSpec]
    world: ClassVar[Path]  # the world module's file, run by the venv's interpreter
    # What the world module makes of an episode, as a version in its keys (None: the
    # hash of the file). Give it a new value when what an existing episode sends, runs
    # or scores changes; the code lock asks for that decision.
    world_version: ClassVar[str | None] = None

    def __init__(
        self, settings: IsolatedOptions | None = None, limits: CallLimits = DEFAULT_LIMITS
    ) -> None:
        self.settings = settings or self.options_model()
        self.limits = limits
        try:
            self.env: ReadyEnv = check(self.env_spec, self.venv_path(self.settings))
        except EnvNotReady as why:
            raise BenchmarkUnavailable(str(why), self.install_command()) from None
        self._network: bool | None = None  # decided with the first episode's pool
        self._pool: WorkerPool | None = None
        self._pool_lock = threading.Lock()
        self._listing: dict[str, tuple[Task, dict[str, str], list[list[str]]]] | None = None

    # -- class facts -----------------------------------------------------------------

    @classmethod
    def venv_path(cls, settings: IsolatedOptions | None = None) -> Path:
        chosen = settings.venv if settings is not None else None
        return Path(chosen) if chosen else cls.env_spec.default_path()

    @classmethod
    def install_command(cls) -> str:
        return f"python -m distillery.workers.envs.isolated install {cls.name}"

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        # The world module holds the prompts, the executor's wiring and the scoring
        # call; the pinned requirements hold the benchmark's own code. A benchmark that
        # declares its `world_version` (the project's: the world module pinned by the
        # code lock) carries that; one that does not, the hash of the file.
        world = cls.world_version or hashlib.sha256(Path(cls.world).read_bytes()).hexdigest()
        return (
            f"world:{world}",
            f"protocol:{server.PROTOCOL_VERSION}",
            f"requirements:{','.join(cls.env_spec.requirements)}",
        )

    @classmethod
    def versions(cls) -> dict[str, str]:
        """The venv's Python and the versions of the required distributions, as
        installed (read from the default venv's marker; empty when it is not built)."""
        try:
            env = check(cls.env_spec)
        except EnvNotReady:
            return {}
        wanted = {_requirement_name(r) for r in cls.env_spec.requirements}
        found = {
            name: version
            for name, version in env.distributions.items()
            if _canonical(name) in wanted
        }
        return {"python": ".".join(map(str, env.marker["python"])), **found}

    def needs_network(self) -> bool:
        """Whether the world needs the network (a remote user model, an online API);
        one that does not (the default: AppWorld's apps run in the world's own process)
        runs in a network namespace of its own."""
        return False

    @property
    def network(self) -> bool:
        """Whether the episode workers get the network (`_world_network`), decided
        where episodes run (the first pool), not where the sweep is planned: a head
        whose seccomp profile refuses namespaces lists tasks all the same."""
        if self._network is None:
            self._network = self._world_network()
        return self._network

    def _world_network(self) -> bool:
        """Whether the workers get the network: refused before any worker starts when
        the world needs none and this machine cannot take it away (unless the user
        allowed it, a deviation recorded with the run)."""
        if self.needs_network():
            return True
        why = network_isolation_unavailable(str(self.env.python))
        if why is None:
            return False
        if self.settings.sandbox_without_namespaces:
            return True
        raise BenchmarkUnavailable(
            f"{self.name}: its world must run without network, and no network namespace "
            f"can be made here ({why})",
            NO_NAMESPACES_HELP,
        )

    # -- the Benchmark protocol ------------------------------------------------------

    def pool(self) -> WorkerPool:
        with self._pool_lock:
            if self._pool is None:
                self._pool = WorkerPool(
                    self.env.python,
                    str(Path(self.world).resolve()),
                    spares=self.settings.spare_workers,
                    max_reply_bytes=self.settings.max_reply_bytes,
                    extra_env=self.worker_environment(),
                    network=lambda: self.network,  # decided by the first episode
                )
            return self._pool

    def _tasks(self) -> dict[str, tuple[Task, dict[str, str], list[list[str]]]]:
        """The world's task listing, read once. It runs the benchmark's own library over
        its data folder and no model-written code, so its worker is started without the
        network namespace episodes get (and with the same allow-listed environment): a
        planning head on `RuntimeDefault` seccomp, which refuses the `unshare` that
        namespace needs, lists the tasks (k8s/: only the grading pods may unshare)."""
        if self._listing is None:
            worker = self.pool().acquire(refill=False, network=True)
            try:
                timeout = self.settings.startup_timeout_s + self.settings.call_timeout_s
                raw = worker.call(
                    "tasks", {"options": self.settings.world_options()}, timeout=timeout
                )
            finally:
                worker.close()
            if not isinstance(raw, list):
                raise MalformedReply(f"{self.name}: the task listing is not a list")
            listing = [_listed_task(self.name, item) for item in raw]
            self._listing = {task.task_id: (task, p, o) for task, p, o in listing}
        return self._listing

    def load_tasks(self, limit: int | None = None, task_ids: list[str] | None = None) -> list[Task]:
        tasks = [task for task, _, _ in self._tasks().values()]
        if task_ids is not None:
            unknown = [i for i in task_ids if i not in self._tasks()]
            if unknown:
                raise ValueError(f"unknown {self.name} task ids: {unknown}")
            tasks = [t for t in tasks if t.task_id in set(task_ids)]
        return tasks if limit is None else tasks[:limit]

    def make_env(self, task: Task, episode_tag: str) -> IsolatedEnvironment:
        listed = self._tasks().get(task.task_id)
        if listed is None:
            raise ValueError(f"unknown {self.name} task id {task.task_id!r}")
        official, prompts, _ = listed
        return IsolatedEnvironment(self, official, prompts, self.pool().acquire())

    def oracle_turns(self, task: Task) -> list[list[str]]:
        return [list(turn) for turn in self._tasks()[task.task_id][2]]

    def close(self) -> None:
        """Stop the spare workers (live episodes close their own)."""
        if self._pool is not None:
            self._pool.shutdown()

    def worker_environment(self) -> dict[str, str]:
        """The variables the worker needs besides the allow-listed ones (a data folder
        the benchmark's library reads from one, a key it sends): the only variables of
        the driver's that reach the world (`sandbox.environment`)."""
        return {}

    def opening_messages(
        self, task: Task, action_format: str, memory: str, framing: str | None = None
    ) -> list[dict[str, Any]] | None:
        """A benchmark whose own loop opens with a conversation of its own (AppWorld's
        ReAct prompt) returns it here, `memory` placed where that prompt puts it (framed
        as a memory method's port frames it, `framing`, where the benchmark knows that
        framing); None: the system prompt and the task's first turn."""
        return None

    # -- how model output becomes calls (override for another action format) ---------

    def parse_text(self, task: Task, text: str) -> ParsedAction:
        return parse_text_calls(text, _names(task), self.limits)

    def parse_tool_calls(self, task: Task, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        return parse_native_calls(tool_calls, _names(task), self.limits)


class IsolatedEnvironment:
    """One episode: one fresh worker holding one world, closed with the episode."""

    env_executor: ClassVar[ThreadPoolExecutor] = ISOLATED_THREADS

    def __init__(
        self,
        benchmark: IsolatedBenchmark,
        task: Task,
        prompts: dict[str, str],
        worker: WorkerProcess,
    ) -> None:
        self.task = task
        self._benchmark = benchmark
        self._prompts = prompts
        self._worker = worker
        self._settings = benchmark.settings
        self._ended_turns = 0  # end_turn calls not yet sent
        self._task_done = False  # the world said so with the last step (`task_done`)
        self._booting = True  # the first call also waits for the interpreter and reset
        # Sent now, read by the first call: make_env runs on the event loop and must
        # not wait for the worker's interpreter to start.
        args = {"options": self._settings.world_options(), "task_id": task.task_id}
        worker.send("reset", args, timeout=self._settings.call_timeout_s)

    @property
    def worker_pid(self) -> int:
        return self._worker.pid

    def system_prompt(self, action_format: str) -> str:
        if action_format not in self._prompts:
            raise ValueError(f"unknown action format {action_format!r}")
        return self._prompts[action_format]

    def parse_tool_calls(self, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        return self._benchmark.parse_tool_calls(self.task, tool_calls)

    def opening_messages(
        self, action_format: str, memory: str, framing: str | None = None
    ) -> list[dict[str, Any]] | None:
        """The benchmark's own opening of the conversation with `memory` in its place,
        or None (the system prompt and the task's first turn); no I/O."""
        return self._benchmark.opening_messages(self.task, action_format, memory, framing)

    def parse_text(self, text: str) -> ParsedAction:
        return self._benchmark.parse_text(self.task, text)

    def _content_bound(self, n_calls: int) -> int:
        """What one result's content may be when the world sends it: twice the history's
        observation cut (the loop cuts it there, the benchmark's way, and counts it),
        and never so much that the step's reply could pass `max_reply_bytes` (a
        character is at most 6 bytes as JSON)."""
        cut = conventions_of(self._benchmark).with_observation_chars(
            self._settings.max_observation_chars
        )
        budget = (self._settings.max_reply_bytes - 64 * 1024) // (6 * max(1, n_calls))
        return max(1, min(2 * cut.observation_cut.max_chars, budget))

    def _call(self, op: str, args: dict[str, Any] | None = None) -> Any:
        timeout = self._settings.call_timeout_s
        if self._booting:  # the interpreter's start has its own allowance
            self._worker.ready(self._settings.startup_timeout_s)
            self._booting = False
        if self._ended_turns:
            self._worker.send("end_turn", {"count": self._ended_turns}, timeout=timeout)
            self._ended_turns = 0
        return self._worker.call(op, args, timeout=timeout)

    def _malformed(self, message: str) -> MalformedReply:
        self._worker.kill()  # a worker that answers nonsense is not trusted again
        return MalformedReply(f"worker {self._worker.pid}: {message}")

    def step(self, action: ParsedAction) -> list[ToolResult]:
        calls = list(action.calls)
        results: list[ToolResult] = []
        if calls:
            args = {
                "calls": [_wire_call(c) for c in calls],
                "max_content_chars": self._content_bound(len(calls)),
            }
            raw = self._call("step", args)
            if not isinstance(raw, list) or len(raw) != len(calls):
                raise self._malformed(f"step answered {_count(raw)} for {len(calls)} calls")
            if not all(_is_result(item) for item in raw):
                raise self._malformed(f"step answered {str(raw)[:200]}, not [{{content, error}}]")
            # A call that failed inside the world (`"failed": true`, protocol 2) is an
            # observation like any error the world reports: the model's doing.
            results = [
                ToolResult(
                    call.source,
                    clean_text(item["content"])[0],  # escapes of what UTF-8 cannot hold
                    clean_text(item["error"])[0] if item.get("error") is not None else None,
                    call.name,
                    call.call_id,
                    cut_from=item["cut"] if type(item.get("cut")) is int else None,
                )
                for call, item in zip(calls, raw, strict=True)
            ]
            # A world that ends tasks itself marks the result after which it is over.
            self._task_done = any(item.get("task_done") is True for item in raw)
        for rejected in action.rejected:
            results.append(
                ToolResult(
                    rejected.raw,
                    f"Error: {rejected.reason}",
                    rejected.reason,
                    None,
                    rejected.call_id,
                    rejected=True,
                )  # fmt: skip
            )
        return results

    def end_turn(self) -> None:
        self._ended_turns += 1  # sent with the next request (see the module docstring)

    def task_done(self) -> bool:
        return self._task_done

    def next_user_message(self, reply: str) -> str | None:
        """The agent's closing reply to the world's user; its answer (None: the user
        ended the conversation)."""
        answer = self._call("next_user_message", {"reply": reply})
        if answer is not None and not isinstance(answer, str):
            raise self._malformed(f"next_user_message answered {str(answer)[:200]}")
        return answer

    def score(self) -> Score:
        raw = self._call("evaluate")
        if not isinstance(raw, dict) or not isinstance(raw.get("success"), bool):
            raise self._malformed(f"evaluate answered {str(raw)[:200]}")
        error_type, message = raw.get("error_type"), raw.get("error_message")
        if not all(v is None or isinstance(v, str) for v in (error_type, message)):
            raise self._malformed("evaluate: error_type and error_message must be strings")
        return Score(raw["success"], error_type, message)

    def close(self) -> None:
        self._worker.close()


def _listed_task(benchmark: str, item: Any) -> tuple[Task, dict[str, str], list[list[str]]]:
    if not isinstance(item, dict) or not isinstance(item.get("task_id"), str):
        raise MalformedReply(f"{benchmark}: a listed task is {str(item)[:200]}")
    where = f"{benchmark} task {item['task_id']!r}"
    turns = item.get("turns")
    prompts = item.get("system_prompts")
    oracle = item.get("oracle", [])
    if not (isinstance(turns, list) and all(isinstance(t, str) for t in turns)):
        raise MalformedReply(f"{where}: turns must be a list of strings")
    if not (isinstance(prompts, dict) and all(isinstance(v, str) for v in prompts.values())):
        raise MalformedReply(f"{where}: system_prompts must map formats to strings")
    if not (
        isinstance(oracle, list)
        and all(isinstance(t, list) and all(isinstance(s, str) for s in t) for t in oracle)
    ):
        raise MalformedReply(f"{where}: oracle must be a list of lists of strings")
    tools, docs = item.get("tools", []), item.get("function_docs", [])
    group, metadata = item.get("group_id"), item.get("metadata", {})
    if not all(isinstance(x, list) and all(isinstance(d, dict) for d in x) for x in (tools, docs)):
        raise MalformedReply(f"{where}: tools and function_docs must be lists of objects")
    if not (group is None or isinstance(group, str)) or not isinstance(metadata, dict):
        raise MalformedReply(f"{where}: group_id must be a string, metadata an object")
    task = Task(
        task_id=item["task_id"],
        benchmark=benchmark,
        turns=tuple(turns),
        tools=tuple(tools),
        function_docs=tuple(docs),
        group_id=group,
        metadata=metadata,
    )
    return task, dict(prompts), [list(t) for t in oracle]


def _wire_call(call: ToolCall) -> dict[str, Any]:
    return {
        "name": call.name,
        "args": list(call.args),
        "kwargs": dict(call.kwargs),
        "call_id": call.call_id,
        "source": call.source,
    }


def _is_result(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and isinstance(item.get("content"), str)
        and (item.get("error") is None or isinstance(item.get("error"), str))
    )


def _names(task: Task) -> frozenset[str]:
    return frozenset(str(doc.get("name")) for doc in task.function_docs)


def _count(raw: Any) -> str:
    return f"{len(raw)} results" if isinstance(raw, list) else type(raw).__name__


def _canonical(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def _requirement_name(requirement: str) -> str:
    for stop in "<>=!~;[ @":
        requirement = requirement.split(stop, 1)[0]
    return _canonical(requirement.strip())
