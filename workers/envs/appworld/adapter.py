"""`benchmark=appworld`: AppWorld (Trivedi et al., 2024) behind the process boundary.

AppWorld 0.1.3.post1 pins pydantic<2 and an old fastapi, so it runs in its own venv
(`env_spec`, built by ``python -m distillery.workers.envs.isolated install appworld``,
which also runs AppWorld's post-install step ``appworld install`` that unpacks its
apps) and its world module (`world.py`) runs there. This file is the distillery side:
the options, how a reply becomes an action, and how the loop plays AppWorld.

By default an episode is played as the AMD authors played their students: the text
ReAct loop of ACE's fork of AppWorld's agent (`react.py` has each of its behaviours,
cited; docs/fidelity/appworld.md lists them and the tests that prove them):

- Prompt: the authors' generator prompt, a Jinja2 template of a conversation, read
  from `prompt_file` (`ace_generator`: ACE's `experiments/prompts/
  appworld_react_generator_prompt.txt`, shipped in `prompts/` with its licence and set
  by every paper experiment; its digest, not its name, is in episode identity); a memory method's memory goes
  into its memory slot (``{{ playbook }}``). Without a prompt file the adapter's own
  short ReAct prompt is used instead (world.py's PROMPT): the deviation
  `own_react_prompt`, recorded with the run and announced before it starts.
- Action: a reply's first ```python block (an unclosed last fence counts) is one
  execution in AppWorld's own interpreter (in native mode, the `execute` tool's
  `code`); a reply without code executes nothing (AppWorld's "No code available to
  execute.") and the episode goes on; the reply is kept in the history cut after its
  first block.
- Output: a user message ``Output:`` in a fence, cut at 20,000 characters.
- At most 40 steps (executions), ended at once by the step that completes the task
  (``complete_task``), as AppWorld's loop stops there.
- Context: before each request the oldest step pairs are dropped until the
  conversation fits the student's context (its max_model_len less its max_tokens and
  256), counted by the serving model's own tokenizer (`policies.LlmPolicy`). A memory
  method's port may choose the MemP and SASM students' trim instead (old outputs
  blanked first, then messages dropped: `react.blank_then_trim`) and its own buffer.
- Score: AppWorld's evaluator (task goal completion: every test of the task passes).
  Scenario goal completion (every task of a scenario succeeds) is a report-side
  aggregate over `group_id`, the scenario id (the task id before ``_``); the groups
  are scenarios, so cross_split keeps a scenario's tasks on one side.
- Native function calling (a model with `action_format: native`): the `execute` tool
  and the adapter's own prompt: the deviation `native_function_calling`, recorded.
- Oracle: AppWorld's ground-truth solution code, replayed as one code block.
- Data: the user's AppWorld folder (`root`, the folder that holds ``data``); nothing
  here can download it (``appworld download data --root <folder>`` on a machine with
  internet). Episode identity holds a digest of what defines the split's tasks there
  (`data_digest`), not the folder's path.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from distillery.workers.envs.appworld import framings, react
from distillery.workers.envs.base import (
    BenchmarkUnavailable,
    ParsedAction,
    RejectedCall,
    Task,
    ToolCall,
    ToolResult,
)
from distillery.workers.envs.calls import DEFAULT_LIMITS, CallLimits
from distillery.workers.envs.conventions import AgentConventions, ContextTrim, tool_messages
from distillery.workers.envs.isolated.adapter import IsolatedBenchmark, IsolatedOptions
from distillery.workers.envs.isolated.venv import EnvSpec

WORLD = Path(__file__).resolve().parent / "world.py"
APPWORLD = "appworld==0.1.3.post1"
EXECUTE = "execute"  # the one function of an AppWorld task (world.py's EXECUTE)
# A code block longer than this is refused, not run: a limit of ours that protects the
# worker (ground-truth solutions are a few KB); recorded with every run
# (`known_deviations`) and counted where it fires (a rejected call of the step).
MAX_CODE_CHARS = 64_000
DATA_HELP = (
    "download AppWorld's data on a machine with internet (`pip install "
    "appworld==0.1.3.post1 && appworld install && appworld download data --root "
    "<folder>`), copy <folder> here and set +benchmark.options.root=<folder>"
)
PROMPT_HELP = (
    "+benchmark.options.prompt_file=ace_generator (ACE's AppWorld generator prompt, "
    "shipped in workers/envs/appworld/prompts/ under its Apache-2.0 licence: the prompt "
    "the AMD authors' students were given; every appworld_* paper experiment sets it)"
)
# Prompts shipped with the adapter, selected by name in `prompt_file` (a name, not a
# path: the config says which prompt, wherever the package is installed).
PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
BUNDLED_PROMPTS = {"ace_generator": PROMPTS_DIR / "appworld_react_generator_prompt.txt"}
# What this file and react.py make of an episode, as a version in every AppWorld key.
# It was the sha256 of both files' bytes, so a comment or a trim that no episode
# chooses moved every AppWorld key (issue 42 (f)); their code is now pinned by the code
# lock (tests/orchestrator/code_lock.json, benchmark:appworld), which fails when it
# changes until renewed with a decision: give this a new value when what an existing
# episode sends or runs changes, keep it when not. This value is that sha256 as of
# commit 4c11f76, so no key moved with the change.
HARNESS_VERSION = "59f0c09bf003adde6e55f7a76b4bf19c5afeba1035e70e4d2e40db986ebc8556"
# AppWorld's `random_seed` (AppWorld(...) default 100): ACE's configs and every AMD
# authors' AppWorld config set 123 (`appworld_config: {random_seed: 123}`, e.g.
# ace-appworld experiments/configs/ACE_offline_no_GT_evaluation.jsonnet line 32). It
# seeds the world's randomness, e.g. the expiry of the tokens a login returns.
ACE_RANDOM_SEED = 123


def prompt_path(prompt_file: str) -> Path:
    """The file `prompt_file` names: a bundled prompt's name, or a path."""
    return BUNDLED_PROMPTS.get(prompt_file) or Path(prompt_file)


class AppWorldOptions(IsolatedOptions):
    """`benchmark.options` of `appworld`."""

    split: Literal["test_normal", "test_challenge", "dev", "train"] = Field(
        default="test_normal", description="AppWorld's dataset split (test_normal: 168 tasks)."
    )
    root: str | None = Field(
        default=None,
        description="The AppWorld folder holding `data` (default: $APPWORLD_ROOT). Where "
        "the data lives is not part of episode identity; what it holds is (`data`).",
    )
    prompt_file: str | None = Field(
        default=None,
        description="The ReAct generator prompt (a Jinja2 template of USER:/ASSISTANT: "
        "messages with a memory slot): `ace_generator` (ACE's, shipped: the AMD "
        "authors' students' prompt; the paper experiments' setting) or a path to one. "
        "Its digest, not its name, is in episode identity. None: the adapter's own "
        "prompt (deviation own_react_prompt).",
    )
    random_seed: int = Field(
        default=ACE_RANDOM_SEED,
        description="AppWorld's random_seed (AppWorld's own default is 100; ACE's and the "
        "AMD authors' configs set 123). Another value is recorded as the deviation "
        "appworld_random_seed_not_aces.",
    )

    @field_validator("prompt_file")
    @classmethod
    def _readable_template(cls, value: str | None) -> str | None:
        if value is not None:
            react.PromptTemplate.read(
                prompt_path(value)
            )  # a clear refusal now, not in every episode
        return value

    def identity(self) -> dict[str, Any]:
        """The options off their defaults but `root` and `prompt_file`, plus `data`: the
        digest of what defines the split's tasks there (`data_digest`), so the same data
        at two paths shares stage keys and two releases (or a synthetic folder and the
        real one) do not; and `prompt`: the prompt file's digest. Without a data folder
        there is no digest, and no run either: planning lists the tasks first, and that
        refuses missing data with the way to get it."""
        out = {k: v for k, v in super().identity().items() if k not in ("root", "prompt_file")}
        if self.prompt_file is not None:
            out["prompt"] = react.PromptTemplate.read(prompt_path(self.prompt_file)).digest
        try:
            root = data_root(self)
        except BenchmarkUnavailable:
            return out
        return {**out, "data": data_digest(root, self.split)}

    def deviations(self) -> tuple[str, ...]:
        # Not a bool option, so not a declared deviation; recorded as one all the same.
        found = super().deviations()
        if self.random_seed != ACE_RANDOM_SEED:
            found = (*found, "appworld_random_seed_not_aces")
        return (*found, "own_react_prompt") if self.prompt_file is None else found

    def notices(self) -> tuple[str, ...]:
        if self.prompt_file is not None:
            return ()
        return (
            "benchmark.options.prompt_file is not set: AppWorld is played with the "
            "adapter's own short ReAct prompt, not the authors' (recorded as the deviation "
            f"own_react_prompt); for the paper's prompt set {PROMPT_HELP}",
        )


def code_of(text: str) -> str | None:
    """The code a reply runs (the authors' extraction, `react.extract_code`); None when
    it has none."""
    code, _ = react.extract_code(text)
    return code or None


def code_reply(step: str) -> str:
    """A ground-truth code step as the reply a model writes in the prompt format."""
    return f"```python\n{step}\n```"


def output_message(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """An execution's output as the next user message, as the authors' loop sends it:
    ``Output:`` in a fence, cut at 20,000 characters (one execution a reply)."""
    return [react.output_message(o.content) for o in observations]


def cut_tool_messages(
    tool_calls: Sequence[Mapping[str, Any]], observations: Sequence[ToolResult]
) -> list[dict[str, Any]]:
    """Native mode: OpenAI tool messages, each output cut as the text loop cuts it."""
    cut = [
        ToolResult(o.call, react.cut_output(o.content), o.error, o.function, o.call_id, o.rejected)
        for o in observations
    ]
    return tool_messages(tool_calls, cut)


class AppWorld(IsolatedBenchmark):
    name = "appworld"
    # world.py's sha256 when the code lock came (every key as it was); pinned by it since.
    world_version = "d8482fb1cd8a7ed9329d820b9b25e88f2afdd353829cbcf72eb7e493883a756c"
    max_steps_per_turn = 40
    groups_are_scenarios = True
    options_model = AppWorldOptions
    env_spec = EnvSpec(
        "appworld", requirements=(APPWORLD,), post_install=(("-m", "appworld.cli", "install"),)
    )
    world = WORLD
    # Deviations from the authors' loop that no option switches off, recorded with every
    # run (the `deviations` tag, next to those options turn on): code over
    # MAX_CODE_CHARS is refused, not run.
    known_deviations = ("code_over_64000_chars_refused",)
    # The authors played their students in text ReAct: a model that calls the `execute`
    # tool natively is played off their harness (recorded by this name).
    action_format_deviations = {"native": "native_function_calling"}
    conventions = AgentConventions(
        prompt_results=output_message,
        native_results=cut_tool_messages,
        step_limit="at_most",
        oracle_reply=code_reply,
        world_ends_episode=True,
        kept_reply=react.kept_reply,
        # The authors' ReasoningBank copy of ACE's loop drops the oldest steps (the
        # default); their MemP and SASM students blank old outputs first
        # (`blank_then_trim`), chosen by those ports' catalog entries.
        context_trim=ContextTrim(
            buffer_tokens=react.CONTEXT_BUFFER,
            trim=react.trim_to_budget,
            name=react.DROP_OLDEST_STEPS,
            alternatives={react.BLANK_THEN_TRIM: react.blank_then_trim},
        ),
    )

    @classmethod
    def fingerprint(cls) -> tuple[str, ...]:
        # This file and react.py decide what runs (the code a reply holds) and what the
        # model sees of it (messages, outputs, the context): part of the benchmark as
        # much as the world is, carried as `HARNESS_VERSION`. A memory port's framing
        # of the prompt is not: it is in the identity of that port's evaluate stages
        # alone (`framing_texts`), as a port's choice of context trim is in its
        # settings.
        return (*super().fingerprint(), f"adapter:{HARNESS_VERSION}")

    @classmethod
    def framing_texts(cls, framing: str) -> tuple[str, ...]:
        """What an episode framed by port `framing` reads: ACE's shipped generator
        prompt as the port edits it (framings.py; a prompt file without ACE's framing
        is used as it is, whatever the port)."""
        ace = BUNDLED_PROMPTS["ace_generator"].read_text(encoding="utf-8")
        return (framing, framings.framed(ace, framing))

    def __init__(
        self, settings: AppWorldOptions | None = None, limits: CallLimits = DEFAULT_LIMITS
    ) -> None:
        settings = settings or AppWorldOptions()
        self.root = data_root(settings)  # refused before any venv or worker is involved
        self.template = (
            react.PromptTemplate.read(prompt_path(settings.prompt_file))
            if settings.prompt_file
            else None
        )
        self._framings: dict[str, react.PromptTemplate] = {}
        super().__init__(settings, limits)

    def worker_environment(self) -> dict[str, str]:
        return {"APPWORLD_ROOT": str(self.root)}

    def opening_messages(
        self, task: Task, action_format: str, memory: str, framing: str | None = None
    ) -> list[dict] | None:
        """The authors' prompt for `task` with `memory` in its slot (prompt format with a
        prompt file), framed as the memory method's port frames it (`framing`, see
        framings.py); None: the system prompt and the task as its user message."""
        if self.template is None or action_format != "prompt":
            return None
        return self._framed(framing).messages(prompt_variables(task), memory)

    def _framed(self, framing: str | None) -> react.PromptTemplate:
        assert self.template is not None
        if framing is None:
            return self.template
        cached = self._framings.get(framing)
        if cached is None:
            text = framings.framed(self.template.text, framing)
            cached = react.PromptTemplate(text, f"{self.template.source} [{framing}]")
            self._framings[framing] = cached
        return cached

    def parse_text(self, task: Task, text: str) -> ParsedAction:
        return parse_code_reply(text)

    def parse_tool_calls(self, task: Task, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        return parse_execute_calls(tool_calls)


def prompt_variables(task: Task) -> dict[str, Any]:
    """The template's variables for `task`, as evaluation_react.py `initialize` passes
    them (`main_user` read by attribute, which Jinja2 reads from the supervisor's dict)."""
    variables = task.metadata.get("prompt_variables") or {}
    return {
        "input_str": task.turns[0] if task.turns else "",
        "main_user": task.metadata.get("supervisor") or {},
        "app_descriptions": variables.get("app_descriptions", ""),
        "relevant_apis": variables.get("relevant_apis", ""),
    }


def parse_code_reply(text: str) -> ParsedAction:
    """A prompt-format reply -> one `execute` call of its code (the authors'
    extraction); a reply without code executes no code (the episode goes on)."""
    code, _ = react.extract_code(text)
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
