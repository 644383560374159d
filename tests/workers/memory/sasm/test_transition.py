"""SASM's transition student (the AMD authors' default AppWorld student) through the agent
loop on AppWorld's opening and conventions, with scripted replies and a scripted world
(no data, no model, no service): explore at the start, a valid tag moves the experience
message (the old one withdrawn), anything else changes nothing; what the model receives
at each request; the repeated-code warning; the paper runs' defaults."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field, replace
from typing import Any, cast

import pytest

from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.agents.policies import wire_messages
from distillery.workers.envs.appworld.adapter import (
    BUNDLED_PROMPTS,
    AppWorld,
    parse_code_reply,
)
from distillery.workers.envs.appworld.react import PromptTemplate
from distillery.workers.envs.base import ParsedAction, Task, ToolResult
from distillery.workers.llm.types import ChatResult
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory.repeats import RepeatedCode
from distillery.workers.memory.sasm.hooks import REPEAT_WARNING, SasmHooks
from distillery.workers.memory.sasm.method import SasmSettings
from distillery.workers.memory.sasm.records import SubtaskExperience
from distillery.workers.memory.sasm.transition import (
    TRANSITION_MESSAGE,
    SasmTransitionHooks,
    parse_transition,
)

INSTRUCTION = "Send my roommate the money I owe for the electricity bill, split evenly " * 2
OTHER = MemorySource("other_task", None, "all", "teacher", "e1")


def _experience(category: str) -> SubtaskExperience:
    return SubtaskExperience(
        f"sa:{category}", OTHER, category, f"{category} things", f"- ✓ {category.upper()}-TIP",
        (), True, 1, 1,
    )  # fmt: skip


@dataclass
class _Hit:
    entry: Any
    score: float = 0.8


class _Search:
    """One experience per category but `execute`; every question recorded."""

    def __init__(self) -> None:
        self.asked: list[tuple[list[str], str | None, int]] = []

    async def search(self, collection, queries, task_id, k, threshold, group=None):
        self.asked.append((list(queries), group, k))
        hits = [] if group in (None, "execute") else [_Hit(_experience(str(group)))]
        return tuple(list(hits) for _ in queries)


@dataclass
class _World:
    """AppWorld's opening (ACE's shipped prompt) and a REPL that answers every code with
    its output; complete_task ends the task."""

    task: Task = field(
        default_factory=lambda: Task(
            "t_1", "appworld", (INSTRUCTION,), (), (),
            metadata={"supervisor": {"first_name": "Ada", "last_name": "L"}},
        )
    )  # fmt: skip
    done: bool = False

    def __post_init__(self) -> None:
        self.appworld = AppWorld.__new__(AppWorld)  # the opening needs no data or worker
        self.appworld.template = PromptTemplate.read(BUNDLED_PROMPTS["ace_generator"])
        self.appworld._framings = {}

    def system_prompt(self, action_format: str) -> str:
        return "unused"

    def opening_messages(self, action_format: str, memory: str, framing: str | None = None):
        return self.appworld.opening_messages(self.task, action_format, memory, framing)

    def parse_text(self, text: str) -> ParsedAction:
        return parse_code_reply(text)

    def step(self, action: ParsedAction) -> list[ToolResult]:
        (call,) = action.calls
        code = call.kwargs["code"]
        self.done = "complete_task" in code
        return [ToolResult(call=f"execute(code={code!r})", content=f"ran {code}")]

    def task_done(self) -> bool:
        return self.done

    def end_turn(self) -> None:
        return None


class _Policy:
    action_format = "prompt"

    def __init__(self, replies: list[str]) -> None:
        self.replies, self.seen = list(replies), []

    async def respond(self, messages, tools):
        self.seen.append(wire_messages([dict(m) for m in messages]))
        return ChatResult(text=self.replies.pop(0))


def _reply(code: str, tag: str = "") -> str:
    return f"{tag}\nCode:\n```python\n{code}\n```"


def _tag(z: Any, d: Any = None, raw: str | None = None) -> str:
    body = raw if raw is not None else json.dumps({"next_z": z, **({"next_d": d} if d else {})})
    return f"<subtask_transition>{body}</subtask_transition>"


def _play(hooks: Any, replies: list[str]):
    world, policy = _World(), _Policy([*replies, _reply("apis.supervisor.complete_task()")])
    conventions = replace(AppWorld.conventions, context_trim=None)
    outcome = asyncio.run(
        run_agent_loop(cast(Any, world), cast(Any, policy), 40, hooks, conventions=conventions)
    )
    return outcome, policy.seen


def _transition_hooks(**settings: Any) -> tuple[SasmTransitionHooks, _Search]:
    search = _Search()
    hooks = SasmTransitionHooks(
        "t_1", INSTRUCTION, search, SasmSettings(student="transition", **settings), lambda s: True
    )
    return hooks, search


async def _no_model(messages: list[dict[str, Any]]) -> Any:
    raise AssertionError("no model is asked here")


def _message(category: str) -> str:
    return TRANSITION_MESSAGE.format(category=category, experience=f"- ✓ {category.upper()}-TIP")


def test_parse_transition():
    default = "the task"
    assert parse_transition(_tag("query", "Find the bill"), default) == ("query", "Find the bill")
    assert parse_transition(_tag("verify"), default) == ("verify", "the task")  # d defaults
    assert parse_transition(_tag("", raw='```json\n{"next_z": "execute"}\n```'), default) == (
        "execute",
        "the task",
    )
    assert parse_transition(_tag("", raw='so {"next_z": "query", "next_d": "x"} ok'), default)
    for ignored in (
        "no tag at all",
        _tag("deploy", "not a category"),
        _tag("", raw='{"next_z": "query",'),  # invalid JSON
        _tag("", raw='["query"]'),  # not an object
        _tag("", raw='{"next_z": "query", "next_d": 3}'),
    ):
        assert parse_transition(ignored, default) is None, ignored


def test_the_experience_message_moves_at_each_announced_transition():
    hooks, search = _transition_hooks()
    replies = [
        _reply("print(apis.api_docs.show_app_descriptions())"),  # no tag: explore stays
        _reply("pw = apis.supervisor.show_account_passwords()", _tag("authenticate", "Log in")),
        _reply("print(pw)", _tag("authenticate", "Log in again")),  # same category: nothing
        _reply("x = 1", _tag("", raw='{"next_z": "query"')),  # invalid JSON: ignored
        _reply("y = 2", _tag("pay", "unknown")),  # unknown category: ignored
        _reply("z = 3", _tag("execute", "Pay the roommate")),  # nothing retrieved
    ]
    outcome, seen = _play(hooks, replies)
    first = seen[0]
    # The port's prompt: no experience slot, the tracking section, the experience after
    # the task as a message of its own.
    assert "## Tracking your subtasks" in first[-3]["content"]
    assert "<subtask_transition>" in first[-3]["content"]
    assert "Past Experience References" not in "".join(m["content"] for m in first)
    assert first[-2]["content"].startswith("Using these APIs, generate code")
    assert first[-1] == {"role": "user", "content": _message("explore")}
    opening = len(first) - 1

    def after_opening(request: list[dict]) -> list[str]:
        return [m["content"][:40] for m in request[opening:]]

    explore, auth = _message("explore")[:40], _message("authenticate")[:40]
    r = [reply[:40] for reply in replies]
    assert after_opening(seen[1])[:2] == [explore, r[0]] and len(seen[1]) == opening + 3
    assert after_opening(seen[1])[2].startswith("Output:\n```\nran print(")
    # The tag moved it: explore withdrawn, authenticate right after the reply that said so.
    assert after_opening(seen[2])[:2] == [r[0], after_opening(seen[1])[2]]
    assert after_opening(seen[2])[2:4] == [r[1], auth]
    for n in (2, 3, 4, 5):  # then same category, invalid, unknown: nothing moves
        assert sum(m["content"].startswith("[Subtask experience]") for m in seen[n]) == 1
        assert _message("authenticate") in [m["content"] for m in seen[n]]
    # execute has no experience: the shown one is withdrawn, none replaces it.
    assert not any(m["content"].startswith("[Subtask experience]") for m in seen[6])
    assert [(q, g) for q, g, _ in search.asked] == [
        ([INSTRUCTION[:100]], "explore"),
        (["Log in"], "authenticate"),
        (["Pay the roommate"], "execute"),
    ]
    assert all(k == 1 for _, _, k in search.asked)  # the port's top-1
    assert [(i.step, i.where, i.text[:30]) for i in outcome.injections] == [
        (-1, "message", _message("explore").strip()[:30]),
        (1, "message_withdrawn", _message("explore").strip()[:30]),
        (1, "message", _message("authenticate").strip()[:30]),
        (5, "message_withdrawn", _message("authenticate").strip()[:30]),
    ]
    record = hooks.record()
    moves = [(t["z"], t["moved"]) for t in record["transitions"]]
    assert moves == [("explore", True), ("authenticate", True), ("authenticate", False),
                     ("execute", True)]  # fmt: skip
    assert "repeat_warnings" not in record and record["isolation_violations"] == 0


def test_the_repeated_code_warning_fires_on_the_third_identical_code():
    hooks, _ = _transition_hooks(repeat_warning=True)
    same = _reply("print(1)")
    _, seen = _play(hooks, [same, same, same, same, _reply("print(2)"), same])
    warned = [
        sum(m["content"] == REPEAT_WARNING for m in request) for request in seen
    ]  # requests 1..7: after steps 0..6
    assert warned == [0, 0, 0, 1, 2, 2, 2]
    assert seen[3][-1]["content"] == REPEAT_WARNING  # after the third identical output
    assert seen[3][-2]["content"].startswith("Output:")
    assert hooks.record()["repeat_warnings"] == 2


def test_repeated_code_counts_what_ran():
    watch = RepeatedCode("warn")
    ran = [ToolResult(call=c, content="") for c in ("a", " a ", "b", "b", "b", "b", "")]
    fired = [watch.after_step([o]) is not None for o in ran]
    assert fired == [False, False, False, False, True, True, False]
    assert watch.fired == 2


def test_the_paper_runs_play_the_ports_default_student_and_the_upfront_one_is_an_option():
    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config

    cfg = to_config(compose(["experiment=appworld_table1"]))
    assert "sasm_amd_appworld" in cfg.methods and "sasm" not in cfg.methods
    method = memory_method("sasm")

    def hooks_of(entry: str, **overrides: Any) -> Any:
        spec = cfg.method_catalog[entry]
        settings = method.settings({}, {**dict(spec.retrieval or {}), **overrides}, None)
        hooks = method.hooks(_World().task, _Search(), settings, lambda s: True, _no_model)
        return settings, hooks

    settings, hooks = hooks_of("sasm_amd_appworld")
    assert isinstance(hooks, SasmTransitionHooks) and hooks.prompt_framing == "sasm_transition"
    assert (settings.student, settings.repeat_warning, settings.k) == ("transition", True, 1)
    assert method.tags(settings, "e")["sasm_student"] == "transition"
    upfront, hooks = hooks_of("sasm_amd_appworld", student="upfront")
    assert type(hooks) is SasmHooks and hooks.prompt_framing == "sasm"
    assert method.tags(upfront, "e")["sasm_student"] == "upfront"  # recorded with the run
    plain, _ = hooks_of("sasm")  # BFCL's and ToolSandbox's: as before
    assert (plain.student, plain.repeat_warning) == ("upfront", False)
    # The upfront student's identity is what it was; the others' name what they show.
    identity = method.read_identity(plain)
    assert "student" not in identity and "repeat_warning" not in identity
    assert method.read_identity(settings) != method.read_identity(upfront) != identity


@pytest.mark.parametrize("student", ["upfront", "transition"])
def test_either_student_warns_only_when_asked(student):
    settings = SasmSettings(student=student)
    hooks: Any = memory_method("sasm").hooks(
        _World().task, _Search(), settings, lambda s: True, _no_model
    )
    ran = [ToolResult(call="execute(code='x')", content="")]
    got = [asyncio.run(hooks.step_messages(0, n, "r", ran)) for n in (1, 2, 3)]
    assert all(g is None or not g.appended for g in got)
