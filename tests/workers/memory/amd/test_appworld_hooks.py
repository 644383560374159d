"""The AMD student on AppWorld tasks: the profile picked by the task's benchmark
(Workflow δ 0.30, figure 15's decomposition), Function memory on AppWorld errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from distillery.workers.envs.base import Task, ToolResult
from distillery.workers.llm.types import ChatResult, Usage
from distillery.workers.memory.amd import appworld_prompts
from distillery.workers.memory.amd.function import FunctionBuilder
from distillery.workers.memory.amd.hooks import DECOMPOSE_PROMPT
from distillery.workers.memory.amd.method import AmdMethod
from distillery.workers.memory.amd.records import MemorySource, WorkflowMemory
from distillery.workers.memory.amd.settings import (
    APPWORLD,
    RetrievalConfig,
    composed_profile_settings,
    profile_for,
)
from distillery.workers.memory.isolation import Hit
from tests.workers.memory.amd.appworld_episodes import (
    CREATE_FAILED,
    INSTRUCTION,
    STEPS,
    appworld_episode,
    execute_source,
)

LABELS = [
    "Log in to Supervisor to retrieve account passwords, then log in to Venmo",
    "Send a Venmo payment to Melissa",
    "Mark the task as complete via Supervisor",
]
WF = WorkflowMemory(
    "wf:other",
    MemorySource("b0c1d2e_1", "b0c1d2e", "all", "gpt5_mini", "ep-other"),
    "Pay a friend on Venmo",
    "Log in with venmo.login, then pay with venmo.create_payment; verify the id.",
    "",
    ("venmo.login", "venmo.create_payment"),
)
RECORDS = FunctionBuilder().build_all([appworld_episode("b0c1d2e_1")])


class RecordingSearch:
    """The bank's generic search: records every query, answers from fixed entries."""

    def __init__(self) -> None:
        self.queries: list[dict[str, Any]] = []

    async def search(self, collection, queries, task_id, k, threshold, group=None):
        self.queries.append(
            {"collection": collection, "queries": list(queries), "k": k,
             "threshold": threshold, "group": group}
        )  # fmt: skip
        if collection == "wf":
            return [[Hit(WF, 0.5, "wf")]]
        if collection == "fn":
            return [[Hit(r, 0.8, "fn") for r in RECORDS if r.function == group][:k]]
        return [[] for _ in queries]


class Student:
    def __init__(self) -> None:
        self.prompts: list[str] = []

    async def __call__(self, messages: list[dict[str, Any]]) -> ChatResult:
        self.prompts.append(messages[0]["content"])
        return ChatResult(text=json.dumps(LABELS), usage=Usage(30, 10))


def task(benchmark: str) -> Task:
    return Task("ccf4b82_1", benchmark, (INSTRUCTION,), (), (), "ccf4b82")


def composed(benchmark: str, **given: Any) -> RetrievalConfig:
    """memory.retrieval as composed on `benchmark` (its conf/memory/benchmark file over
    the defaults; test_composed_settings checks Hydra composes exactly this), `given` set."""
    return RetrievalConfig.model_validate({**composed_profile_settings(benchmark), **given})


def hooks(benchmark: str, settings: RetrievalConfig | None = None):
    search, student = RecordingSearch(), Student()
    made = AmdMethod().hooks(
        task(benchmark), search, settings or composed(benchmark), lambda s: True, student
    )
    return made, search, student


def test_the_benchmark_name_picks_the_profile():
    assert profile_for("appworld") is APPWORLD
    assert profile_for("bfcl_multi_turn_base").name == "bfcl"
    appworld, _, _ = hooks("appworld")
    assert appworld.config.threshold("wf") == 0.30
    assert appworld.config.subtask_query == "decompose"
    bfcl, _, _ = hooks("bfcl_multi_turn_base")
    assert bfcl.config == RetrievalConfig()  # BFCL reads exactly what it is given
    assert bfcl.config.threshold("wf") is None and bfcl.config.subtask_query == "per_turn"
    # The hooks read the settings as given: AppWorld's values come from composition,
    # never from the hooks (a value the user set, BFCL's default included, is kept).
    mine, _, _ = hooks("appworld", composed("appworld", threshold_wf=0.5))
    assert mine.config.threshold("wf") == 0.5 and mine.config.subtask_query == "decompose"
    as_bfcl, _, _ = hooks("appworld", RetrievalConfig())
    assert as_bfcl.config.threshold("wf") is None and as_bfcl.config.subtask_query == "per_turn"


def test_an_appworld_student_reads_workflow_at_0_30_and_decomposes_with_figure_15():
    made, search, student = hooks("appworld")
    system = asyncio.run(made.before_turn(0, INSTRUCTION, "SYSTEM"))
    (wf,) = [q for q in search.queries if q["collection"] == "wf"]
    assert wf["threshold"] == 0.30 and wf["queries"] == [INSTRUCTION]
    assert student.prompts == [
        appworld_prompts.DECOMPOSE_PROMPT.format(max_subtasks=6, instruction=INSTRUCTION)
    ]
    assert "The FIRST subtask must always be" in student.prompts[0]
    assert (
        "Task: Create a Todoist task to return my most recent Amazon order." in (student.prompts[0])
    )
    (st,) = [q for q in search.queries if q["collection"] == "st"]
    assert st["queries"] == LABELS and st["threshold"] == 0.45
    assert system.endswith("SYSTEM") and WF.text in system
    record = made.record()
    assert record["decomposition"] == LABELS
    assert record["profile"]["name"] == "appworld"
    assert record["profile"]["settings"]["threshold_wf"] == 0.30


def test_a_bfcl_student_is_unchanged():
    made, search, student = hooks("bfcl_multi_turn_base")
    asyncio.run(made.before_turn(0, INSTRUCTION, "SYSTEM"))
    assert [q["threshold"] for q in search.queries if q["collection"] == "wf"] == [None]
    assert student.prompts == []  # per_turn: no decomposition
    assert "profile" not in made.record()
    decomposing, _, student = hooks(
        "bfcl_multi_turn_base", RetrievalConfig(subtask_query="decompose")
    )
    asyncio.run(decomposing.before_turn(0, INSTRUCTION, "SYSTEM"))
    assert student.prompts == [DECOMPOSE_PROMPT.format(max_subtasks=6, instruction=INSTRUCTION)]


def test_an_appworld_error_brings_the_failing_apis_function_memory():
    made, search, _ = hooks("appworld")
    failed = ToolResult(execute_source(STEPS[5][0]), CREATE_FAILED, None, "execute")
    fine = ToolResult(execute_source(STEPS[6][0]), STEPS[6][1], None, "execute")
    out_failed, out_fine = asyncio.run(made.after_step(0, INSTRUCTION, [failed, fine]))
    (fn,) = [q for q in search.queries if q["collection"] == "fn"]
    assert fn["group"] == "venmo.create_payment" and fn["k"] == 1
    assert out_fine == fine  # a block that ran brings nothing
    added = out_failed.content.removeprefix(CREATE_FAILED)
    assert added.startswith(
        "\n\n" + appworld_prompts.FUNCTION_MEMORY_HEADER.format(function="venmo.create_payment")
    )
    assert "amount=25" in added and "# -> {'message': 'Sent money.'" in added
    assert "- amount (number, required, value > 0.0): Amount to send." in added
    assert 'Response (success): {"message":"string","transaction_id":1}' in added
    events = made.record()["retrievals"]
    assert [(e["type"], e["function"]) for e in events if e["type"] == "fn"] == [
        ("fn", "venmo.create_payment")
    ]


def test_the_settings_read_on_appworld_are_what_the_plan_and_report_see():
    method = AmdMethod()
    bfcl = RetrievalConfig()
    assert method.for_benchmark(bfcl, "bfcl_multi_turn_base") is bfcl
    assert method.for_benchmark(bfcl, "appworld").threshold("wf") is None  # labelled only
    resolved = method.for_benchmark(composed("appworld"), "appworld")
    identity = method.read_identity(resolved)
    assert identity["threshold_wf"] == 0.30 and identity["subtask_query"] == "decompose"
    assert identity["max_subtasks"] == 6
    assert identity["profile"] == f"appworld:{APPWORLD.version()}"
    assert method.for_benchmark(resolved, "appworld") is resolved  # idempotent
    assert method.tags(resolved, "text-embedding-3-small")["delta_wf"] == "0.3"
    assert method.tags(resolved, "text-embedding-3-small")["amd_profile"] == "appworld"
    assert "profile" not in method.descriptors(resolved)
    assert method.report_columns(resolved)["delta_wf"] == 0.30
    # The profile's identity follows its prompts (figure 15 is read by the student).
    from unittest import mock

    with mock.patch.object(appworld_prompts, "DECOMPOSE_PROMPT", "changed"):
        assert APPWORLD.version() != identity["profile"].split(":")[1]


def test_memory_amd_on_benchmark_appworld_needs_no_other_config():
    from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
    from distillery.orchestrator.core.config import to_config

    def retrieval(*overrides: str):
        args = rewrite_role_overrides([*overrides, "methods=[amd_wf_st_fn]"])
        (cfg,) = [to_config(c) for _, c in sweep_points(args, multirun=False)]
        return cfg.retrieval_for("amd_wf_st_fn")

    on_appworld = retrieval("benchmark=appworld", "teacher=gpt5_mini")
    assert on_appworld.threshold("wf") == 0.30 and on_appworld.subtask_query == "decompose"
    on_bfcl = retrieval()  # BFCL: the configured settings as they are
    assert type(on_bfcl) is RetrievalConfig
    assert on_bfcl.threshold("wf") is None
