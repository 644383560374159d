"""The ToolSandbox world: runs INSIDE the ToolSandbox venv (see `server.py` for the
contract), never imported by distillery.

One episode plays one ToolSandbox scenario in ToolSandbox's own execution context, as
its own play loop (`Scenario.play`) does with three roles:

- the agent is distillery's agent loop: its calls become the agent's
  ``AGENT -> EXECUTION_ENVIRONMENT`` messages, written as ToolSandbox's OpenAI agent
  writes them, and ToolSandbox's `ExecutionEnvironment` role executes them; its closing
  reply of a turn becomes the ``AGENT -> USER`` message (`next_user_message`), so
  milestones on that reply can be met;
- the user is ToolSandbox's own OpenAI user role (its system prompt and few-shot
  messages from the scenario, its message conversion, its `end_conversation` tool and
  its retries) with the model and endpoint of the options instead of the GPT-4o at
  api.openai.com it hard-codes; or, option `scripted_user`, a scripted user (tests,
  replays: a deviation) that says its turns and then calls `end_conversation`;
- the episode ends where ToolSandbox's loop ends it: the user ended the conversation,
  or the scenario's `max_messages` new messages were written (then nothing more is
  executed or answered; a step that reaches it says `task_done`).

The score is ToolSandbox's own milestone/minefield evaluation of the context as the
episode left it.

Scenarios are ToolSandbox's `named_scenarios` with the seed its CLI uses (42), since
they shuffle tool lists with `random`; `_build` replays that function but deep-copies
only the scenarios it is asked for (building all ~1000 took most of a worker's start).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import inspect
import json
import os
import random
from collections.abc import Callable

SEED = 42  # tool_sandbox.cli.main seeds `random` so before building the scenarios
# Variants as ToolSandbox names them: the base scenario's name + this suffix.
VARIANTS = {
    "base": "",
    "3_distraction_tools": "_3_distraction_tools",
    "10_distraction_tools": "_10_distraction_tools",
    "all_tools": "_all_tools",
    "tool_description_scrambled": "_3_distraction_tools_tool_description_scrambled",
    "arg_type_scrambled": "_3_distraction_tools_arg_type_scrambled",
    "arg_description_scrambled": "_3_distraction_tools_arg_description_scrambled",
    "tool_name_scrambled": "_3_distraction_tools_tool_name_scrambled",
}
NETWORK_MODULE = "tool_sandbox.tools.rapid_api_search_tools"  # calls RapidAPI over HTTP
# ToolSandbox's CLI default user (`GPT_4_o_2024_05_13_User`) and the endpoint its OpenAI
# roles set explicitly (so that OPENAI_BASE_URL is not picked up).
USER_MODEL = "gpt-4o-2024-05-13"
OPENAI_URL = "https://api.openai.com/v1"
# The source of `tool_sandbox.scenarios.named_scenarios` that `_build` replays; an edited
# checkout's other source is built by that function itself.
NAMED_SCENARIOS_DIGEST = "3d67ec0d80deb0f8"
# Its augmentations of each base scenario, in its order: (suffix, how many of the similar
# tools are added (None: all), category), then the scrambled copies of the 3-distraction
# one: (suffix, category).
DISTRACTIONS = (
    ("_3_distraction_tools", 3, "THREE_DISTRACTION_TOOLS"),
    ("_10_distraction_tools", 10, "TEN_DISTRACTION_TOOLS"),
    ("_all_tools", None, "ALL_TOOLS_AVAILABLE"),
)
SCRAMBLED = (
    ("_tool_description_scrambled", "TOOL_DESCRIPTION_SCRAMBLED"),
    ("_arg_type_scrambled", "ARG_TYPE_SCRAMBLED"),
    ("_arg_description_scrambled", "ARG_DESCRIPTION_SCRAMBLED"),
    ("_tool_name_scrambled", "TOOL_NAME_SCRAMBLED"),
)
NOT_EXECUTED = "Error: not executed: the scenario's message limit was reached."
PROMPT_FORMAT = (
    "\n\nTo call functions, reply with a Python list of calls and nothing else, e.g. "
    "[f(a=1), g(b='x')]. Reply without calls when you are done or need the user.\n"
    "Functions:\n{functions}"
)

Wanted = Callable[[str, str], bool]  # (base scenario name, scenario name) -> build it?


class CallFailed(Exception):
    """Protocol 2 (`isolated/server.py`): ToolSandbox raised while executing the agent's
    calls. Its own runner (`cli/utils.py`, `run_scenario`) scores a scenario whose play
    raised as a failure (similarity 0) and plays no further: the task ends there
    (`ends_task`) and `World.evaluate` scores it so. Never an infrastructure error."""

    ends_task = True

    def __init__(self, message: str, results: list) -> None:
        super().__init__(message)
        self.results = results


def _digest(function) -> str:
    return hashlib.sha256(inspect.getsource(function).encode()).hexdigest()[:16]


def _build(wanted: Wanted) -> tuple[dict[str, frozenset[str]], dict]:
    """(each base scenario's allowed tools, the scenarios `wanted` selects), exactly as
    `named_scenarios` builds them after the CLI's seed.

    That function builds the base scenarios, then for each in turn shuffles its tool
    list and deep-copies it into seven augmented scenarios (three of them shuffled
    again). A shuffle draws from `random` according to the list's length alone, so
    shuffling the same lists without the copies leaves every scenario's tool order as
    it would be; only the wanted scenarios are copied."""
    import tool_sandbox.tools
    from tool_sandbox import scenarios as module
    from tool_sandbox.common.execution_context import ScenarioCategories
    from tool_sandbox.common.tool_discovery import ToolBackend, rank_tools_by_similarity

    backend = ToolBackend.DEFAULT
    random.seed(SEED)
    if _digest(module.named_scenarios) != NAMED_SCENARIOS_DIGEST:
        built = module.named_scenarios(preferred_tool_backend=backend)
        bases = {
            name: frozenset(s.starting_context.tool_allow_list or ())
            for name, s in built.items()
            if ScenarioCategories.NO_DISTRACTION_TOOLS in s.categories
        }
        chosen = {n: s for n, s in built.items() if any(wanted(b, n) for b in bases)}
        return bases, chosen
    scenarios: dict = {}
    for family in (
        module.named_single_tool_call_scenarios,
        module.named_multiple_tool_call_scenarios,
        module.named_multiple_user_turn_scenarios,
        module.named_insufficient_information_scenarios,
    ):
        new = family(preferred_tool_backend=backend)
        if set(scenarios) & set(new):
            raise ValueError(f"conflicting scenario names: {sorted(set(scenarios) & set(new))}")
        scenarios.update(new)
    bases = {n: frozenset(s.starting_context.tool_allow_list or ()) for n, s in scenarios.items()}
    chosen = {}
    for name, base in scenarios.items():
        tools = base.starting_context.tool_allow_list
        similar = rank_tools_by_similarity(
            tools, tool_sandbox.tools, preferred_tool_backend=backend
        )
        random.shuffle(tools)
        three = None  # the 3-distraction copy, which the scrambled ones copy in turn
        for suffix, count, category in DISTRACTIONS:
            variant = name + suffix
            needed = wanted(name, variant) or (
                count == 3 and any(wanted(name, variant + s) for s, _ in SCRAMBLED)
            )
            scenario = copy.deepcopy(base) if needed else None
            extended = scenario.starting_context.tool_allow_list if scenario else list(tools)
            extended.extend(similar if count is None else similar[:count])
            random.shuffle(extended)
            if scenario is not None:
                scenario.categories.append(ScenarioCategories(category))
                three = scenario if count == 3 else three
                if wanted(name, variant):
                    chosen[variant] = scenario
        base.categories.append(ScenarioCategories.NO_DISTRACTION_TOOLS)
        if wanted(name, name):
            chosen[name] = base
        for suffix, category in SCRAMBLED:
            variant = name + DISTRACTIONS[0][0] + suffix
            if wanted(name, variant):
                scenario = copy.deepcopy(three)
                scenario.starting_context.tool_augmentation_list = [ScenarioCategories(category)]
                scenario.categories.append(ScenarioCategories(category))
                chosen[variant] = scenario
    return bases, chosen


def _network_tools() -> frozenset[str]:
    import importlib

    module = importlib.import_module(NETWORK_MODULE)
    return frozenset(
        name
        for name, obj in vars(module).items()
        if inspect.isfunction(obj) and obj.__module__ == NETWORK_MODULE
    )


def _selection(options: dict, bases: dict[str, frozenset[str]]) -> tuple[list[str], list[str]]:
    """(selected scenario names, names excluded for needing the network), in order."""
    variant = options.get("variant", "base")
    network = _network_tools()
    selected, excluded = [], []
    for base in sorted(bases):
        name = base + VARIANTS[variant]
        if bases[base] & network and not options.get("network"):
            excluded.append(name)
        else:
            selected.append(name)
    return selected, excluded


def _suffix(options: dict) -> str:
    variant = options.get("variant", "base")
    if variant not in VARIANTS:
        raise ValueError(f"unknown ToolSandbox variant {variant!r}; one of {sorted(VARIANTS)}")
    return VARIANTS[variant]


def _agent_role():
    from tool_sandbox.common.execution_context import RoleType
    from tool_sandbox.roles.base_role import BaseRole

    class DistilleryAgent(BaseRole):
        """The agent role: its turns are produced by distillery's agent loop."""

        role_type = RoleType.AGENT

    return DistilleryAgent


def _start(scenario):
    """A fresh execution context of `scenario`, its system messages to the execution
    environment processed (as `Scenario.play` does), made current."""
    from tool_sandbox.common.execution_context import (
        DatabaseNamespace,
        RoleType,
        set_current_context,
    )
    from tool_sandbox.roles.execution_environment import ExecutionEnvironment

    context = copy.deepcopy(scenario.starting_context)
    set_current_context(context)
    db = context.get_database(
        DatabaseNamespace.SANDBOX, drop_sandbox_message_index=False, get_all_history_snapshots=True
    )
    environment = ExecutionEnvironment()
    for index in range(context.max_sandbox_message_index + 1):
        if (
            db["recipient"][index] == RoleType.EXECUTION_ENVIRONMENT
            and db["sender"][index] == RoleType.SYSTEM
        ):
            environment.respond(ending_index=index)
    return context


def _task(name: str, scenario, excluded: int) -> dict:
    from tool_sandbox.common.execution_context import RoleType
    from tool_sandbox.common.tool_conversion import convert_to_openai_tools

    _start(scenario)
    agent = _agent_role()
    tools = convert_to_openai_tools(agent.get_available_tools())
    messages = agent.get_messages()
    system = "\n".join(
        m.content for m in messages if m.sender == RoleType.SYSTEM and m.recipient == RoleType.AGENT
    )
    opening = [
        m.content for m in messages if m.sender == RoleType.USER and m.recipient == RoleType.AGENT
    ]
    docs = [tool["function"] for tool in tools]
    # The simulated user's own instruction (its last system message; the earlier ones
    # are few-shot examples), which the agent never sees: metadata for an option of a
    # memory method that retrieves by it, as the AMD authors' ToolSandbox student did.
    briefs = [
        m.content for m in messages if m.sender == RoleType.SYSTEM and m.recipient == RoleType.USER
    ]
    return {
        "task_id": name,
        "turns": opening[-1:],
        "tools": tools,
        "function_docs": docs,
        "group_id": None,
        "metadata": {
            "categories": [str(c) for c in scenario.categories],
            "max_messages": scenario.max_messages,
            "excluded_network_scenarios": excluded,
            "user_instruction": _user_instruction(briefs[-1]) if briefs else None,
        },
        "system_prompts": {
            "native": system,
            "prompt": system + PROMPT_FORMAT.format(functions=json.dumps(docs)),
        },
        "oracle": [],
    }


def _user_instruction(brief: str) -> str:
    """The scenario's part of the user's system message (after ToolSandbox's shared
    USER_INSTRUCTION), as the AMD authors' `extract_task_instruction` reads it."""
    from tool_sandbox.scenarios.user_simulator_few_shot_examples import USER_INSTRUCTION

    content, shared = brief.strip(), USER_INSTRUCTION.strip()
    return content[content.index(shared) + len(shared) :].strip() if shared in content else content


def versions() -> dict:
    import importlib.metadata as metadata
    import platform

    found = {"python": platform.python_version()}
    for name in ("tool_sandbox", "openai", "polars", "langchain"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def list_tasks(options: dict) -> list[dict]:
    suffix = _suffix(options)
    bases, scenarios = _build(lambda base, name: name == base + suffix)
    selected, excluded = _selection(options, bases)
    # The turns are the opening message only: the user's later ones are the world's.
    return [_task(name, scenarios[name], len(excluded)) for name in selected]


def _scripted_user(turns: list[str]):
    from tool_sandbox.common.execution_context import RoleType
    from tool_sandbox.common.message_conversion import Message
    from tool_sandbox.roles.base_role import BaseRole

    class ScriptedUser(BaseRole):
        """A user that says its turns in order, whatever the agent replied, and then
        ends the conversation as ToolSandbox's users do (a call of `end_conversation`)."""

        role_type = RoleType.USER

        def __init__(self) -> None:
            self.turns = list(turns)

        def respond(self, ending_index: int | None = None) -> None:
            if self.turns:
                turn = Message(
                    sender=RoleType.USER, recipient=RoleType.AGENT, content=self.turns.pop(0)
                )
            else:
                turn = Message(
                    sender=RoleType.USER,
                    recipient=RoleType.EXECUTION_ENVIRONMENT,
                    content="end_conversation()",
                )
            self.add_messages([turn])

    return ScriptedUser()


def _llm_user(options: dict):
    """ToolSandbox's OpenAI user role speaking to the options' endpoint and model."""
    from openai import DefaultHttpxClient, OpenAI
    from tool_sandbox.roles.openai_api_user import OpenAIAPIUser

    class ConfiguredUser(OpenAIAPIUser):
        """`OpenAIAPIUser` as it is (prompt, conversion, tools, retries), with a client
        of our choosing: its own `__init__` only builds the hard-coded one."""

        def __init__(self, model: str, client: OpenAI) -> None:
            self.model_name = model
            self.openai_client = client

    base_url = options.get("user_base_url")
    key_env = options.get("user_api_key_env") or "OPENAI_API_KEY"
    key = os.environ.get(key_env)
    if not key and not base_url:
        raise RuntimeError(
            f"ToolSandbox's simulated user calls OpenAI ({OPENAI_URL}): set {key_env}, "
            "or point benchmark.options.user_base_url at another server"
        )
    # A local server wants no key, but the client refuses to start without one. The
    # HTTP client is openai's default one, built here: ToolSandbox leaves httpx unpinned
    # and openai 1.17 builds its own with `proxies`, which httpx 0.28 removed.
    client = OpenAI(
        base_url=base_url or OPENAI_URL, api_key=key or "EMPTY", http_client=DefaultHttpxClient()
    )
    return ConfiguredUser(options.get("user_model") or USER_MODEL, client)


class World:
    """One scenario's execution context, advanced by the agent loop's calls and
    answered by the scenario's user."""

    def __init__(self, options: dict, task_id: str) -> None:
        suffix = _suffix(options)
        bases, scenarios = _build(lambda base, name: name == task_id and name == base + suffix)
        selected, _ = _selection(options, bases)
        if task_id not in selected:
            raise ValueError(f"{task_id!r} is not a selected ToolSandbox scenario")
        self.name = task_id
        self.scenario = scenarios[task_id]
        scripted = options.get("scripted_user") or {}
        # A scripted user (any scenario, listed or not) replaces the LLM one altogether.
        self.user = _scripted_user(scripted.get(task_id, [])) if scripted else _llm_user(options)
        self.user_name = (
            "scripted"
            if scripted
            else f"{self.user.model_name} at {self.user.openai_client.base_url}"
        )
        self.context = _start(self.scenario)
        self.start_index = self.context.max_sandbox_message_index
        self.agent = _agent_role()
        self.calls = 0
        self.raised: str | None = None  # what ToolSandbox raised executing the calls

    def _last(self) -> tuple[bool, object]:
        """(whether ToolSandbox's play loop goes on, the last message's recipient): the
        conversation is active and fewer than `max_messages` messages were written."""
        from tool_sandbox.common.execution_context import DatabaseNamespace, get_current_context

        db = get_current_context().get_database(
            DatabaseNamespace.SANDBOX, drop_sandbox_message_index=False
        )
        limit = self.scenario.max_messages + self.start_index
        going = bool(db["conversation_active"][-1]) and db["sandbox_message_index"][-1] < limit
        return going, db["recipient"][-1]

    def step(self, calls: list[dict]) -> list[dict]:
        from openai.types.chat.chat_completion_message_tool_call import (
            ChatCompletionMessageToolCall,
            Function,
        )
        from tool_sandbox.common.execution_context import RoleType, get_current_context
        from tool_sandbox.common.message_conversion import Message, openai_tool_call_to_python_code
        from tool_sandbox.roles.execution_environment import ExecutionEnvironment

        names = set(self.agent.get_available_tools())
        context = get_current_context()
        results: list[dict | None] = []
        messages, ids = [], []
        for call in calls:
            if call["args"] or call["name"] not in names:
                why = "takes keyword arguments only" if call["args"] else "is not a function"
                error = f"{call['name']}: {why}"  # of the agent's tools
                results.append({"content": f"Error: {error}", "error": error})
                continue
            # The id prefixes variables in the executed code, so it is ours, not the model's.
            self.calls += 1
            call_id = f"call_{self.calls}"
            tool_call = ChatCompletionMessageToolCall(
                id=call_id,
                type="function",
                function=Function(name=call["name"], arguments=json.dumps(call["kwargs"])),
            )
            code = openai_tool_call_to_python_code(
                tool_call, names, context.get_execution_facing_tool_name(call["name"])
            )
            messages.append(
                Message(
                    sender=RoleType.AGENT,
                    recipient=RoleType.EXECUTION_ENVIRONMENT,
                    content=code,
                    openai_tool_call_id=call_id,
                    openai_function_name=call["name"],
                )
            )
            ids.append(call_id)
            results.append(None)
        if messages:
            self.agent.add_messages(messages)
            going, _ = self._last()
            if going:
                try:
                    ExecutionEnvironment().respond()
                except Exception as exc:  # scored 0 by ToolSandbox's runner (CallFailed)
                    self.raised = f"{type(exc).__name__}: {exc}"[:2000]
                    raise CallFailed(f"ToolSandbox raised: {self.raised}", []) from exc
            replies = {
                m.openai_tool_call_id: m
                for m in self.agent.get_messages()
                if m.sender == RoleType.EXECUTION_ENVIRONMENT and m.openai_tool_call_id in ids
            }
            answers = iter(ids)
            for index, result in enumerate(results):
                if result is None:
                    reply = replies.get(next(answers))
                    results[index] = (
                        {"content": reply.content, "error": reply.tool_call_exception}
                        if reply is not None  # ToolSandbox's loop stopped before executing it
                        else {"content": NOT_EXECUTED, "error": NOT_EXECUTED}
                    )
        if not self._last()[0]:  # ToolSandbox's loop ends here: so does the episode
            for result in results:
                result["task_done"] = True  # type: ignore[index]
        return results  # type: ignore[return-value]

    def end_turn(self) -> None:
        pass  # the closing reply comes with `next_user_message`

    def next_user_message(self, reply: str) -> str | None:
        """The agent's closing reply goes to the user (``AGENT -> USER``); the user and
        the execution environment then speak as in ToolSandbox's play loop until a
        message is for the agent (the user's next turn, returned) or the loop would
        stop (the user called `end_conversation`, or `max_messages` was reached: None)."""
        from tool_sandbox.common.execution_context import RoleType
        from tool_sandbox.common.message_conversion import Message
        from tool_sandbox.roles.execution_environment import ExecutionEnvironment

        if not self._last()[0]:
            return None
        self.agent.add_messages(
            [Message(sender=RoleType.AGENT, recipient=RoleType.USER, content=reply)]
        )
        roles = {RoleType.USER: self.user, RoleType.EXECUTION_ENVIRONMENT: ExecutionEnvironment()}
        while True:
            going, recipient = self._last()
            if not going:
                return None
            if recipient == RoleType.AGENT:
                return self.agent.get_messages()[-1].content
            try:
                roles[recipient].respond()
            except Exception as exc:
                if recipient != RoleType.USER:
                    raise
                # The user's endpoint failed or refused (after ToolSandbox's own retries):
                # the episode could not be played, which is no fault of the agent's.
                attempt = getattr(exc, "last_attempt", None)  # tenacity's RetryError
                cause = attempt.exception() if attempt is not None else exc
                raise RuntimeError(
                    f"ToolSandbox's simulated user ({self.user_name}) failed: "
                    f"{type(cause).__name__}: {cause}"
                ) from exc

    def evaluate(self) -> dict:
        from tool_sandbox.common.execution_context import get_current_context

        if self.raised is not None:  # as ToolSandbox's runner scores a scenario that raised
            details = {"similarity": 0.0, "milestone_similarity": 0.0}
            details.update(minefield_similarity=0.0, turn_count=self.scenario.max_messages)
            message = f"ToolSandbox raised: {self.raised}"
            return {
                "success": False,
                "error_type": "toolsandbox:exception",
                "error_message": message,
                "details": details,
            }

        # The context as the episode left it, as ToolSandbox's runner evaluates it.
        result = self.scenario.evaluation.evaluate(
            execution_context=get_current_context(), max_turn_count=self.scenario.max_messages
        )
        details = {
            "similarity": result.similarity,
            "milestone_similarity": result.milestone_similarity,
            "minefield_similarity": result.minefield_similarity,
            "turn_count": result.turn_count,
        }
        summary = ", ".join(
            f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}" for k, v in details.items()
        )
        if result.similarity >= 1.0:
            return {
                "success": True,
                "error_type": None,
                "error_message": summary,
                "details": details,
            }
        kind = "toolsandbox:minefield" if result.minefield_similarity else "toolsandbox:milestones"
        return {"success": False, "error_type": kind, "error_message": summary, "details": details}

    def close(self) -> None:
        self.context = None
