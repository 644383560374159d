"""The AMD authors' baseline ports and AMD's ToolSandbox profile, as the read side plays
them: ReasoningBank's AppWorld port withdraws its items after the first step (in the
system prompt, and in the memory slot of a benchmark that opens the conversation
itself), its ToolSandbox port reads top-3; AMD on ToolSandbox reads as the authors'
code sets it, and the simulated user's hidden instruction is only a named option."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.envs.appworld.adapter import BUNDLED_PROMPTS
from distillery.workers.envs.appworld.react import PromptTemplate
from distillery.workers.envs.base import ParsedAction, Task, ToolCall, ToolResult
from distillery.workers.envs.conventions import AgentConventions
from distillery.workers.llm.types import ChatResult
from distillery.workers.memory.amd.hooks import AmdHooks
from distillery.workers.memory.amd.settings import TOOLSANDBOX, RetrievalConfig, profile_for
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.reasoning_bank.hooks import ReasoningBankHooks
from distillery.workers.memory.reasoning_bank.prompts import WITHDRAWN
from distillery.workers.memory.reasoning_bank.records import MemoryItem
from distillery.workers.memory.registry import memory_method


@dataclass
class _Hit:
    entry: Any
    score: float = 0.9


@dataclass
class _Record:
    items: tuple[MemoryItem, ...]
    outcome: str = "success"
    memory_id: str = "rb:1"
    source: MemorySource = MemorySource("other", None, "all", "teacher", "e1")


class _Search:
    """One past task's items, whatever is asked."""

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    async def search(self, collection, queries, task_id, k, threshold, **kwargs):
        self.asked.append((collection, tuple(queries), k, threshold))
        item = MemoryItem("Check first", "When state matters.", "List before acting.")
        return ([_Hit(_Record((item,)))],)


@dataclass
class _World:
    """Two steps of one turn; it opens the conversation itself when `opening` is set
    (as AppWorld's ReAct prompt does), memory in its slot."""

    opening: bool
    task: Task = field(default_factory=lambda: Task("t1", "w", ("Do it.",), (), ()))

    def system_prompt(self, action_format: str) -> str:
        return "SYSTEM PROMPT"

    framings: list = field(default_factory=list)

    def opening_messages(self, action_format: str, memory: str, framing: str | None = None):
        if not self.opening:
            return None
        self.framings.append(framing)  # the memory method's port framing (AppWorld's)
        return [
            {"role": "user", "content": f"Demo. MEMORY[{memory}]"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "Task: Do it."},
        ]

    def parse_text(self, text: str) -> ParsedAction:
        return ParsedAction(calls=(ToolCall("run", (), {}),)) if text else ParsedAction()

    def parse_tool_calls(self, calls):
        return ParsedAction()

    def step(self, action: ParsedAction) -> list[ToolResult]:
        return [ToolResult("run()", "done")]

    def end_turn(self) -> None:
        return None


class _Policy:
    action_format = "prompt"

    def __init__(self) -> None:
        self.seen: list[list[dict]] = []

    async def respond(self, messages, tools):
        self.seen.append([dict(m) for m in messages])
        return ChatResult(text="act" if len(self.seen) < 3 else "")


def _play(opening: bool, remove: bool):
    settings = memory_method("reasoning_bank").settings(
        {}, {"top_k": 3, "remove_after_first_step": remove}, None
    )
    hooks = ReasoningBankHooks("t1", _Search(), settings, lambda source: True)
    policy = _Policy()
    world = _World(opening)
    asyncio.run(run_agent_loop(world, policy, 10, hooks, conventions=AgentConventions()))
    _play.framings = world.framings  # type: ignore[attr-defined]
    return policy.seen, hooks.record()


def test_the_appworld_port_withdraws_its_items_after_the_first_step():
    seen, log = _play(opening=False, remove=True)
    assert "List before acting." in seen[0][0]["content"]
    for request in seen[1:]:  # from the second request on, the system prompt says none
        assert request[0]["content"] == f"SYSTEM PROMPT\n\n{WITHDRAWN}"
    assert log["removed_after_step"] == 1
    kept, _ = _play(opening=False, remove=False)  # the original keeps them throughout
    assert all("List before acting." in request[0]["content"] for request in kept)


def test_in_a_benchmarks_own_opening_the_slot_is_rendered_again_without_them():
    seen, _ = _play(opening=True, remove=True)
    assert "MEMORY[Below are memory items" in seen[0][0]["content"]
    assert seen[1][0]["content"] == f"Demo. MEMORY[{WITHDRAWN}]"
    assert [m["content"] for m in seen[1][1:3]] == ["ok", "Task: Do it."]  # the rest as is
    # Both renderings framed as the authors' ReasoningBank port frames its items.
    framed = [f for f in _play.framings if f is not None]  # type: ignore[attr-defined]
    assert framed == ["reasoning_bank", "reasoning_bank"]  # (None: the loop probing)


def test_the_ports_framings_replace_aces_playbook_framing_in_the_shipped_prompt():
    from distillery.workers.envs.appworld import framings
    from distillery.workers.envs.appworld.adapter import AppWorld, AppWorldOptions

    task = Task("a1_1", "appworld", ("Count my playlists.",), (), ())
    env = AppWorld.__new__(AppWorld)  # the opening needs no data or worker
    env.template = PromptTemplate.read(BUNDLED_PROMPTS["ace_generator"])
    env._framings = {}
    ace = env.opening_messages(task, "prompt", "ITEMS")
    rb = env.opening_messages(task, "prompt", "ITEMS", "reasoning_bank")
    memp = env.opening_messages(task, "prompt", "ITEMS", "memp")
    assert ace and rb and memp and len(ace) == len(rb)
    assert len(memp) < len(ace)  # the MemP port drops ACE's second and third examples
    assert "### PLAYBOOK BEGIN\nITEMS\n### PLAYBOOK END" in ace[0]["content"]
    assert "### MEMORY ITEMS BEGIN\nITEMS\n### MEMORY ITEMS END" in rb[0]["content"]
    assert "### MEMORY BEGIN\nITEMS\n### MEMORY END" in memp[0]["content"]
    assert "[FAILURE] memories" in memp[0]["content"] and "playbook" not in rb[0]["content"][:3000]
    assert any(framings.PORT_CLOSING in m["content"] for m in rb)
    assert not any(framings.PORT_CLOSING in m["content"] for m in ace)
    assert AppWorldOptions(prompt_file="ace_generator").prompt_file == "ace_generator"
    with pytest.raises(ValueError, match="unknown AppWorld memory framing"):
        env.opening_messages(task, "prompt", "ITEMS", "nope")


def test_the_catalog_entries_are_the_ports():
    from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
    from distillery.orchestrator.core.config import to_config

    methods = "[reasoning_bank,reasoning_bank_amd_appworld,reasoning_bank_amd_toolsandbox]"
    cfg = to_config(compose(rewrite_role_overrides([f"methods={methods}"])))
    appworld = cfg.retrieval_for("reasoning_bank_amd_appworld")
    toolsandbox = cfg.retrieval_for("reasoning_bank_amd_toolsandbox")
    assert (appworld.top_k, appworld.remove_after_first_step) == (3, True)
    assert (toolsandbox.top_k, toolsandbox.remove_after_first_step) == (3, False)
    method = memory_method("reasoning_bank")
    original = cfg.retrieval_for("reasoning_bank")
    assert "remove_after_first_step" not in method.read_identity(original)  # keys kept
    assert method.read_identity(appworld)["remove_after_first_step"] is True
    assert "preamble_ours" in method.tags(appworld, "x")["differences"]


class _AmdLookup:
    def __init__(self) -> None:
        self.asked: list[tuple] = []

    async def workflow(self, query, task_id, k, threshold):
        self.asked.append(("wf", query, k, threshold))
        return []

    async def subtasks(self, queries, task_id, k, threshold):
        self.asked.append(("st", tuple(queries), k, threshold))
        return []

    async def functions(self, function, instruction, task_id, k, threshold):
        self.asked.append(("fn", function, k, threshold))
        return []


def test_amd_on_toolsandbox_reads_as_the_authors_code_sets_it():
    assert profile_for("toolsandbox") is TOOLSANDBOX
    config = TOOLSANDBOX.label(RetrievalConfig.model_validate(TOOLSANDBOX.retrieval))
    assert (config.threshold_wf, config.subtask_query, config.k_fn) == (0.5, "decompose", 2)
    # The authors' query (the simulated user's hidden instruction) and their Function
    # hint's tool description are what ToolSandbox composes.
    assert config.threshold_st == 0.45 and config.query == "hidden_user_instruction"
    assert config.fn_description and config.read_settings()["fn_description"] == "task_tools"
    assert config.read_settings()["fn_ranking"] == "call_ngrams"  # their example ranking
    # Builds as on BFCL but for each Function record's reasoning (their think model,
    # builder.py:250): the profile's digest is the build's identity.
    assert memory_method("amd").build_profile("toolsandbox") == (
        f"toolsandbox:{TOOLSANDBOX.version()}"
    )

    async def decompose(messages):
        return ChatResult(text='["find the contact", "send the message"]')

    def play(config: RetrievalConfig) -> list[tuple]:
        lookup = _AmdLookup()
        hooks = AmdHooks(
            "t1", lookup, config, lambda source: True, decompose,
            ["Text Bob."], TOOLSANDBOX, hidden_query="Ask the agent to text Bob 'hi'.",
        )  # fmt: skip
        asyncio.run(hooks.before_turn(0, "Text Bob.", "SYSTEM"))
        return lookup.asked

    asked = play(config)
    assert asked[0] == ("wf", "Ask the agent to text Bob 'hi'.", 1, 0.5)  # the authors'
    assert asked[1] == ("st", ("find the contact", "send the message"), 1, 0.45)
    # The user's turn (what the agent is given) is ours, a named option in identity.
    own = TOOLSANDBOX.label(
        RetrievalConfig.model_validate({**TOOLSANDBOX.retrieval, "query": "user_turn"})
    )
    assert play(own)[0] == ("wf", "Text Bob.", 1, 0.5)
    assert own.read_settings()["query"] == "user_turn"
    assert config.read_settings()["query"] == "hidden_user_instruction"
    hidden = config
    assert memory_method("amd").tags(hidden, "x")["amd_query"] == "hidden_user_instruction"
