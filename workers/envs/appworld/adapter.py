"""`benchmark=appworld`: AppWorld (Trivedi et al., 2024) behind the process boundary.

AppWorld 0.1.3.post1 pins pydantic<2 and an old fastapi, so it runs in its own venv
(`env_spec`, built by ``python -m distillery.workers.envs.isolated install appworld``,
which also runs AppWorld's post-install step ``appworld install`` that unpacks its
apps) and its world module (`world.py`) runs there. This file is the distillery side:
the options, how a reply becomes an action, and how the loop plays AppWorld.

- Action: one Python code block a reply (```python fences; in native mode the `execute`
  tool's `code`), run by AppWorld's own interpreter in the worker; a reply without code
  ends the episode, and so does the step that completes the task (``complete_task``),
  as AppWorld's own loop stops there. Its output goes back verbatim: as the next user message in the
  prompt format (AppWorld's own ReAct loop), as the tool's result in native mode.
- At most 40 steps (the paper's budget), counted as AppWorld counts executions.
- Score: AppWorld's evaluator (task goal completion: every test of the task passes).
  Scenario goal completion (every task of a scenario succeeds) is a report-side
  aggregate over `group_id`, the scenario id (the task id before ``_``); the groups
  are scenarios, so cross_split keeps a scenario's tasks on one side.
- Oracle: AppWorld's ground-truth solution code, replayed as one code block.
- Data: the user's AppWorld folder (`root`, the folder that holds ``data``); nothing
  here can download it (``appworld download data --root <folder>`` on a machine with
  internet). Episode identity holds a digest of what defines the split's tasks there
  (`data_digest`), not the folder's path.
- Prompt: the world's own rendering of AppWorld's ReAct instructions, not AppWorld's
  official prompt file (not available here): a known deviation (`known_deviations`),
  recorded with every run.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from distillery.workers.envs.base import (
    BenchmarkUnavailable,
    ParsedAction,
    RejectedCall,
    Task,
    ToolCall,
    ToolResult,
)
from distillery.workers.envs.calls import DEFAULT_LIMITS, CallLimits
from distillery.workers.envs.conventions import AgentConventions
from distillery.workers.envs.isolated.adapter import IsolatedBenchmark, IsolatedOptions
from distillery.workers.envs.isolated.venv import EnvSpec

WORLD = Path(__file__).resolve().parent / "world.py"
APPWORLD = "appworld==0.1.3.post1"
EXECUTE = "execute"  # the one function of an AppWorld task (world.py's EXECUTE)
# A code block longer than this is refused, not run (ground-truth solutions are a few
# KB; the shared call limits are sized for call lists, not programs).
MAX_CODE_CHARS = 64_000
_FENCE = re.compile(r"```[ \t]*(?:python|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
DATA_HELP = (
    "download AppWorld's data on a machine with internet (`pip install "
    "appworld==0.1.3.post1 && appworld install && appworld download data --root "
    "<folder>`), copy <folder> here and set +benchmark.options.root=<folder>"
)


class AppWorldOptions(IsolatedOptions):
    """`benchmark.options` of `appworld`."""

    split: Literal["test_normal", "test_challenge", "dev", "train"] = Field(
        "test_normal", description="AppWorld's dataset split (test_normal: 168 tasks)."
    )
    root: str | None = Field(
        None,
        description="The AppWorld folder holding `data` (default: $APPWORLD_ROOT). Where "
        "the data lives is not part of episode identity; what it holds is (`data`).",
    )

    def identity(self) -> dict[str, Any]:
        """The options off their defaults but `root`, plus `data`: the digest of what
        defines the split's tasks there (`data_digest`), so the same data at two paths
        shares stage keys and two releases (or a synthetic folder and the real one) do
        not. Without a data folder there is no digest, and no run either: planning lists
        the tasks first, and that refuses missing data with the way to get it."""
        out = {k: v for k, v in super().identity().items() if k != "root"}
        try:
            root = data_root(self)
        except BenchmarkUnavailable:
            return out
        return {**out, "data": data_digest(root, self.split)}


def code_of(text: str) -> str | None:
    """The code of a reply: its fenced blocks, joined in order (one execution); None
    when it has none."""
    blocks = [block.strip() for block in _FENCE.findall(text or "")]
    blocks = [block for block in blocks if block]
    return "\n\n".join(blocks) if blocks else None


def code_reply(step: str) -> str:
    """A ground-truth code step as the reply a model writes in the prompt format."""
    return f"```python\n{step}\n```"


def output_message(tool_calls: Any, observations: list[ToolResult] | Any) -> list[dict[str, Any]]:
    """The interpreter's output as the next user message, as AppWorld's loop sends it."""
    text = "\n\n".join(o.content for o in observations)
    return [{"role": "user", "content": text}]


class AppWorld(IsolatedBenchmark):
    name = "appworld"
    max_steps_per_turn = 40
    groups_are_scenarios = True
    options_model = AppWorldOptions
    env_spec = EnvSpec(
        "appworld", requirements=(APPWORLD,), post_install=(("-m", "appworld.cli", "install"),)
    )
    world = WORLD
    # Deviations from AppWorld's own pipeline that no option switches off, recorded with
    # every run (the `deviations` tag, next to those options turn on): the system prompt
    # is this project's rendering of AppWorld's ReAct instructions (world.py's PROMPT),
    # as AppWorld's official prompt (in its repository's experiments folder, not in the
    # package) is not available here.
    known_deviations = ("own_react_prompt",)
    conventions = AgentConventions(
        prompt_results=output_message,
        step_limit="at_most",
        oracle_reply=code_reply,
        world_ends_episode=True,
    )

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        # This file decides what runs (the code a reply holds) and what the model sees
        # of it (the output message): part of the benchmark as much as the world is.
        source = Path(__file__).read_bytes()
        return (*super().fingerprint(), f"adapter:{hashlib.sha256(source).hexdigest()}")

    def __init__(
        self, settings: AppWorldOptions | None = None, limits: CallLimits = DEFAULT_LIMITS
    ) -> None:
        settings = settings or AppWorldOptions()
        self.root = data_root(settings)  # refused before any venv or worker is involved
        super().__init__(settings, limits)

    def worker_environment(self) -> dict[str, str]:
        return {"APPWORLD_ROOT": str(self.root)}

    def parse_text(self, task: Task, text: str) -> ParsedAction:
        return parse_code_reply(text)

    def parse_tool_calls(self, task: Task, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        return parse_execute_calls(tool_calls)


def parse_code_reply(text: str) -> ParsedAction:
    """A prompt-format reply -> one `execute` call of its code; no code block: no
    action (the episode ends, as the prompt says)."""
    code = code_of(text)
    if code is None:
        return ParsedAction()
    return ParsedAction(calls=(_execute(code, None),)) if _fits(code) else _too_long(code)


def parse_execute_calls(tool_calls: list[dict[str, Any]]) -> ParsedAction:
    """Native tool calls -> `execute` calls; any other call (or one without a string
    `code`) is rejected and answered with an error, never run."""
    calls: list[ToolCall] = []
    rejected: list[RejectedCall] = []
    for position, item in enumerate(tool_calls):
        function = item.get("function", item)
        call_id = item.get("id")
        arguments = function.get("arguments")
        raw = str(arguments)[: DEFAULT_LIMITS.max_raw_chars]
        try:
            arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            arguments = None
        code = arguments.get("code") if isinstance(arguments, dict) else None
        if function.get("name") != EXECUTE or not isinstance(code, str):
            reason = f"only {EXECUTE}(code=<Python code>) can be called"
            rejected.append(RejectedCall(raw, reason, call_id, position))
        elif not _fits(code):
            rejected.append(RejectedCall(raw, _TOO_LONG, call_id, position))
        else:
            calls.append(_execute(code, call_id))
    return ParsedAction(calls=tuple(calls), rejected=tuple(rejected))


def data_root(settings: AppWorldOptions) -> Path:
    """The AppWorld folder (the one holding ``data``), checked; a folder that is
    itself ``data`` is accepted too. Missing data is `BenchmarkUnavailable` with the
    way to get it."""
    chosen = settings.root or os.environ.get("APPWORLD_ROOT")
    if not chosen:
        raise BenchmarkUnavailable("AppWorld's data folder is not set", DATA_HELP)
    root = Path(chosen).expanduser().absolute()
    if not (root / "data").is_dir() and (root / "tasks").is_dir():
        root = root.parent  # the user pointed at `data` itself
    data = root / "data"
    if not (data / "tasks").is_dir():
        raise BenchmarkUnavailable(f"no AppWorld data at {data} (no tasks folder)", DATA_HELP)
    if not (data / "datasets" / f"{settings.split}.txt").is_file():
        raise BenchmarkUnavailable(
            f"the AppWorld data at {data} has no split {settings.split!r}", DATA_HELP
        )
    return root


def data_digest(root: Path, split: str) -> str:
    """What defines a split's episodes in an AppWorld folder, hashed: the split's task
    list, the API docs the agent reads, and every file of each listed task (specs,
    starting databases, ground truth and evaluation code), by path relative to ``data``
    and content. Another task's files do not count. Memoized per file signature (path,
    size, mtime), so planning a sweep hashes a folder once, and a changed file is
    hashed again."""
    data = root / "data"
    split_file = data / "datasets" / f"{split}.txt"
    # AppWorld's own reading of a split file (`load_task_ids`): one id a line, `id:tag`.
    lines = split_file.read_text(encoding="utf-8").splitlines()
    task_ids = sorted({line.strip().split(":")[0] for line in lines if line.strip()})
    files = [split_file, *_files(data / "api_docs")]
    for task_id in task_ids:
        files += _files(data / "tasks" / task_id)
    signature = tuple(
        (str(f.relative_to(data)), stat.st_size, stat.st_mtime_ns, stat.st_ino)
        for f in files
        for stat in (f.stat(),)
    )
    key = (str(data.resolve()), signature)
    if key not in _DIGESTS:
        digest = hashlib.sha256()
        for path, *_ in signature:
            with open(data / path, "rb") as handle:
                content = hashlib.file_digest(handle, "sha256").hexdigest()
            digest.update(f"{path}\0{content}\n".encode())
        _DIGESTS[key] = digest.hexdigest()[:16]
    return _DIGESTS[key]


_DIGESTS: dict[tuple[str, tuple[tuple[str, int, int, int], ...]], str] = {}


def _files(folder: Path) -> list[Path]:
    """The files under `folder`, sorted (none when it is missing). Not `__pycache__`:
    AppWorld's evaluator leaves one in a task's ground truth when it imports the
    evaluation code, and an episode must not change the identity of the next."""
    if not folder.is_dir():
        return []
    return sorted(f for f in folder.rglob("*") if f.is_file() and "__pycache__" not in f.parts)


_TOO_LONG = f"the code is longer than {MAX_CODE_CHARS} characters"


def _fits(code: str) -> bool:
    return len(code) <= MAX_CODE_CHARS


def _too_long(code: str) -> ParsedAction:
    return ParsedAction(rejected=(RejectedCall(code[:300], _TOO_LONG, None, 0),))


def _execute(code: str, call_id: str | None) -> ToolCall:
    return ToolCall(EXECUTE, (), {"code": code}, call_id)
