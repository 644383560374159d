"""The baselines' AppWorld prompts are the AMD authors' ports' prompts, memory where
each port put it (workers/envs/appworld/framings.py).

Their files carry no licence, so neither they nor their text are in this repository;
what is, per port, are facts about the file: its line count, the line of its memory
slot, the lines that hold the port's own wording (which we render in ours), and the
sha256 of the file with those lines blanked and its slot variable named as ACE's
(`{{ playbook }}`). Our rendering, blanked the same way, must hash the same: every
other line is the authors' byte for byte. With a checkout of their repository at
$DISTILLERY_AMD_REPO the facts themselves are checked against their files.

The episode test plays each method's own hooks through the loop on AppWorld's opening
and checks the first request: the method's memory in the port's slot, in the message
the port put it in.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from distillery.workers.agents.loop import run_agent_loop
from distillery.workers.envs.appworld import framings
from distillery.workers.envs.appworld.adapter import BUNDLED_PROMPTS, AppWorld
from distillery.workers.envs.appworld.react import PromptTemplate
from distillery.workers.envs.base import ParsedAction, Task, ToolResult
from distillery.workers.envs.conventions import AgentConventions, conventions_of
from distillery.workers.llm.types import ChatResult
from distillery.workers.memory.entries import MemorySource
from distillery.workers.memory.registry import memory_method

ACE = PromptTemplate.read(BUNDLED_PROMPTS["ace_generator"]).text


@dataclass(frozen=True)
class PortFile:
    path: str  # in taeilkim2465/agentic_memory_distillation
    slot: str | None  # the port's memory variable (None: its prompt has no memory slot)
    lines: int
    slot_line: int | None  # 1-based, in the file read as the authors read it (lstrip)
    wording: tuple[int, ...]  # the lines where our wording stands for theirs
    blanked_sha256: str
    file_sha256: str


PORT_FILES = {
    "reasoning_bank": PortFile(
        "appworld/rb/experiments/prompts/appworld_react_generator_prompt.txt",
        "memories",
        971,
        31,
        (28, 948),
        "e33f387bebfb2a43336d2f4c7d5bec2418df295adf4dee8cf47ba39a2c522fe1",
        "373ecdf3290f0c3c6801c4f051459f4bad0f0c808e0fe98265fabb7ac665823e",
    ),
    "memp": PortFile(
        "appworld/memp/experiments/prompts/memp_generator_prompt.txt",
        "memory_context",
        283,
        32,
        (28, 36, 37, 272, 276),
        "254da7b597224a1c9ff2c87b4fdf532f03d378b8db08442ce2879e3ad3a41790",
        "1a33382fe8b5e6b391dc5f41f73faf151bdfc2b617cd88a7010852f2acb867e8",
    ),
    "sasm": PortFile(
        "appworld/sasm/experiments/prompts/sasm_upfront_generator_prompt.txt",
        "sasm_experiences",
        264,
        257,
        (194, 254, 255),
        "1450f3686cf809cf6b3835e964546ac9b0d725b9a513a3664175d5c32bc8b408",
        "9735e3d8d4f3e23ea344ecfa65b9737e063726f171a540cb3545883dea5171e8",
    ),
    # The port's default student (sasm_evaluation_react): no slot, the subtask-tracking
    # section (lines 252-265) in our wording.
    "sasm_transition": PortFile(
        "appworld/sasm/experiments/prompts/sasm_generator_prompt.txt",
        None,
        272,
        None,
        (194, 252, 254, 255, 256, 257, 258, 259, 261, 263, 265),
        "b372cf9e8f7d9d77d51ae60452013ee9aac2ecb855e4057fbf7b91f4edb5d511",
        "375abe9f1f8dd11d8bea1d4eefb57675071e412d86fb57360780fd85095eceef",
    ),
}


def _lines(text: str, slot: str | None) -> list[str]:
    """The template's lines as compared: its slot named as ACE's."""
    if slot is not None:
        text = text.replace("{{ " + slot + " }}", "{{ playbook }}")
        text = text.replace("{% if " + slot + " %}", "{% if playbook %}")
    return text.lstrip().rstrip("\n").split("\n")


def _blanked_sha(lines: list[str], wording: tuple[int, ...]) -> str:
    kept = ("" if number in wording else line for number, line in enumerate(lines, 1))
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


@pytest.mark.parametrize("port", sorted(PORT_FILES))
def test_each_ports_prompt_is_the_authors_file_but_our_wording(port):
    facts = PORT_FILES[port]
    rendered = framings.framed(ACE, port)
    lines = _lines(rendered, "playbook")
    assert len(lines) == facts.lines
    if facts.slot_line is not None:
        assert lines[facts.slot_line - 1] == "{{ playbook }}"
    assert _blanked_sha(lines, facts.wording) == facts.blanked_sha256
    # Only lines holding our own wording may differ from theirs.
    ours = framings.port_prompt(port, ACE).our_lines()
    assert all(any(part in lines[n - 1] for part in ours) for n in facts.wording)
    # The rendering is a template the adapter reads (memory slot found, roles split).
    template = PromptTemplate(rendered, port)
    template.check()
    assert template.memory_slots == (("playbook",) if facts.slot else ())


@pytest.mark.skipif(
    not os.environ.get("DISTILLERY_AMD_REPO"),
    reason="needs a checkout of taeilkim2465/agentic_memory_distillation ($DISTILLERY_AMD_REPO)",
)
@pytest.mark.parametrize("port", sorted(PORT_FILES))
def test_the_recorded_facts_are_the_authors_files(port):
    facts = PORT_FILES[port]
    file = Path(os.environ["DISTILLERY_AMD_REPO"]) / facts.path
    raw = file.read_bytes()
    assert hashlib.sha256(raw).hexdigest() == facts.file_sha256
    theirs = _lines(raw.decode(), facts.slot)
    ours = _lines(framings.framed(ACE, port), "playbook")
    assert len(theirs) == facts.lines
    differing = tuple(n for n, (a, b) in enumerate(zip(ours, theirs, strict=True), 1) if a != b)
    assert set(differing) <= set(facts.wording)
    assert _blanked_sha(theirs, facts.wording) == facts.blanked_sha256
    if facts.slot_line is not None:
        assert theirs[facts.slot_line - 1] == "{{ playbook }}"
    else:
        assert "{{ playbook }}" not in theirs


def test_a_prompt_that_is_not_aces_is_refused_or_left_alone():
    assert framings.framed("USER:\nno playbook here", "memp") == "USER:\nno playbook here"
    broken = ACE.replace(framings.ACE_CLOSING, "Go.")
    with pytest.raises(ValueError, match="cannot be rendered"):
        framings.framed(broken, "reasoning_bank")
    with pytest.raises(ValueError, match="unknown AppWorld memory framing"):
        framings.framed(ACE, "nope")


# -- an episode's first request, with each method's own hooks ------------------------

SOURCE = MemorySource("other_task", None, "all", "teacher", "e1")


@dataclass
class _Hit:
    entry: Any
    score: float = 0.9


class _Search:
    """One entry of whatever the method's collection holds, whatever is asked."""

    def __init__(self, entry: Any) -> None:
        self.entry = entry

    async def search(self, collection, queries, task_id, k, threshold, **kwargs):
        return tuple([_Hit(self.entry)] for _ in queries)


async def _ask_model(messages):
    return ChatResult(text='{"subtasks": [{"z": "query", "d": "Read the profile"}]}')


def _entries() -> dict[str, Any]:
    from distillery.workers.memory.memp.records import KeywordProcedure
    from distillery.workers.memory.reasoning_bank.records import MemoryItem, ReasoningRecord
    from distillery.workers.memory.sasm.records import SubtaskExperience

    item = MemoryItem("Profile first", "When a fact is asked.", "RB-MEMORY: read the profile.")
    return {
        "reasoning_bank_amd_appworld": ReasoningRecord(
            "rb:1", SOURCE, "q", "success", (item,), "llm"
        ),
        "memp_amd_appworld": KeywordProcedure(
            "mp:1", SOURCE, "q", "1. MEMP-MEMORY: read the profile.", "", ("profile",)
        ),
        "sasm": SubtaskExperience(
            "sa:1",
            SOURCE,
            "query",
            "Read the profile",
            "- ✓ SASM-MEMORY: profile first.",
            ("apis.supervisor.show_profile()",),
            True,
            1,
            1,
        ),
    }


@dataclass
class _AppWorldOpening:
    """AppWorld's opening (the adapter's own, ACE's shipped prompt), no world behind."""

    task: Task = field(
        default_factory=lambda: Task(
            "t_1", "appworld", ("What is my email?",), (), (),
            metadata={"supervisor": {"first_name": "Ada", "last_name": "L"}},
        )
    )  # fmt: skip

    def __post_init__(self) -> None:
        self.appworld = AppWorld.__new__(AppWorld)  # the opening needs no data or worker
        self.appworld.template = PromptTemplate.read(BUNDLED_PROMPTS["ace_generator"])
        self.appworld._framings = {}

    def system_prompt(self, action_format: str) -> str:
        return "unused"

    def opening_messages(self, action_format: str, memory: str, framing: str | None = None):
        return self.appworld.opening_messages(self.task, action_format, memory, framing)

    def parse_text(self, text: str) -> ParsedAction:
        return ParsedAction()

    def step(self, action: ParsedAction) -> list[ToolResult]:
        return []

    def end_turn(self) -> None:
        return None


class _FirstRequest:
    action_format = "prompt"

    def __init__(self) -> None:
        self.messages: list[dict] = []

    async def respond(self, messages, tools):
        self.messages = [dict(m) for m in messages]
        return ChatResult(text="")  # no code: the turn ends


def _first_request(entry_name: str) -> tuple[list[dict], Any]:
    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config

    catalog = to_config(compose(["experiment=appworld_table1"])).method_catalog
    spec = catalog[entry_name]
    method = memory_method(spec.kind)
    settings = method.settings({}, dict(spec.retrieval or {}), None)
    world = _AppWorldOpening()
    search = _Search(_entries()[entry_name])
    hooks = method.hooks(world.task, search, settings, lambda source: True, _ask_model)
    policy = _FirstRequest()
    # AppWorld's context trims, so a port that chooses one (MemP's) is played with it.
    conventions = AgentConventions(context_trim=conventions_of(AppWorld).context_trim)
    asyncio.run(
        run_agent_loop(cast(Any, world), cast(Any, policy), 40, hooks, conventions=conventions)
    )
    return policy.messages, hooks


@pytest.mark.parametrize(
    ("entry_name", "port", "marker", "message", "before"),
    [
        ("reasoning_bank_amd_appworld", "reasoning_bank", "RB-MEMORY", 0, "### MEMORY ITEMS BEGIN"),
        ("memp_amd_appworld", "memp", "MEMP-MEMORY", 0, "### MEMORY BEGIN"),
        ("sasm", "sasm", "SASM-MEMORY", -2, "## Past Experience References"),
    ],
)
def test_an_episodes_first_prompt_has_the_memory_where_the_port_put_it(
    entry_name, port, marker, message, before
):
    messages, hooks = _first_request(entry_name)
    assert hooks.prompt_framing == port  # the paper experiment's entry reads as its port
    holding = [i for i, m in enumerate(messages) if marker in m["content"]]
    assert holding == [message % len(messages)]  # one message: the port's slot's
    content = messages[message]["content"]
    assert content.index(before) < content.index(marker)
    # The whole opening is the port's template rendered with the method's memory block.
    memory = content[content.index(before) + len(before) :]
    port_template = PromptTemplate(framings.framed(ACE, port), port)
    block = hooks._block  # what the method's hooks rendered (the loop put it in the slot)
    expected = port_template.messages(
        {"input_str": "What is my email?", "main_user": {"first_name": "Ada", "last_name": "L"},
         "app_descriptions": "", "relevant_apis": ""},
        block,
    )  # fmt: skip
    assert [m["content"] for m in messages] == [m["content"] for m in expected]
    assert marker in memory
    assert "PLAYBOOK" not in "".join(m["content"] for m in messages[:1] + messages[-2:])


def test_without_memory_the_sasm_port_prints_no_experience_heading():
    template = PromptTemplate(framings.framed(ACE, "sasm"), "sasm")
    opening = template.messages({"input_str": "x", "main_user": {}}, "")
    assert not any("Past Experience References" in m["content"] for m in opening)
    assert opening[-1]["content"].startswith("Using these APIs, generate code")
