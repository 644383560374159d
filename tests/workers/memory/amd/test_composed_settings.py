"""AMD's settings on AppWorld and ToolSandbox are config, composed into memory.retrieval
(conf/memory/benchmark/<benchmark>.yaml, below the experiment and the command line):
`--cfg job --resolve` prints them, a value the user sets is kept whatever it equals
(BFCL's default included), and the run records and the student's hooks read exactly
what was composed."""

from __future__ import annotations

import asyncio

import pytest
import yaml

from distillery.orchestrator.cli.app import validate_sweep
from distillery.orchestrator.cli.hydra_flags import config_documents
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.tracking.results import point_params
from distillery.orchestrator.tracking.tracker import safe_params
from distillery.workers.envs.base import Task
from distillery.workers.llm.types import ChatResult
from distillery.workers.memory.amd.method import AmdMethod
from distillery.workers.memory.amd.settings import (
    APPWORLD,
    TOOLSANDBOX,
    RetrievalConfig,
    composed_profile_settings,
)
from tests.orchestrator.test_appworld_plans import use_listing
from tests.workers.memory.test_amd_ports import _AmdLookup

AMD = "amd_wf_st_fn"
# Every value the two profiles compose, set back to BFCL's default (RetrievalConfig's).
AS_ON_BFCL = {
    "toolsandbox": {
        "k_fn": 1,
        "threshold_wf": None,
        "subtask_query": "per_turn",
        "fn_description": False,
        "query": "user_turn",
        "fn_ranking": "embedding",
    },
    "appworld": {"threshold_wf": None, "subtask_query": "per_turn"},
}


def _value(value: object) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def points(*overrides: str):
    args = rewrite_role_overrides([*overrides, "student=qwen3_4b", "seed=0", f"methods=[{AMD}]"])
    return sweep_points(args, multirun=False)


def amd_point(monkeypatch, *overrides: str):
    """The AMD point of the sweep as planned (ToolSandbox and AppWorld on a listing shaped
    like theirs: no venv, no data)."""
    use_listing(monkeypatch)
    graph = plan_sweep(validate_sweep(points(*overrides)))
    (point,) = [p for p in graph.points.values() if p.method_name == AMD]
    assert isinstance(point.retrieval, RetrievalConfig)
    return point


def test_each_profile_file_holds_only_known_settings_off_bfcls_defaults():
    bfcl = RetrievalConfig()
    for profile in (APPWORLD, TOOLSANDBOX):
        values = composed_profile_settings(profile.name)
        assert values and values == profile.retrieval
        RetrievalConfig.model_validate(values)  # every key a setting, every value valid
        assert all(getattr(bfcl, k) != v for k, v in values.items()), profile.name
    assert composed_profile_settings("bfcl_multi_turn_base") == {}


@pytest.mark.parametrize("benchmark", ["toolsandbox", "appworld"])
def test_cfg_job_resolve_prints_the_values_episodes_read(benchmark):
    printed = config_documents(points(f"benchmark={benchmark}"), "job", resolve=True)
    retrieval = yaml.safe_load(printed.split("\n", 1)[1])["memory"]["retrieval"]
    for key, value in composed_profile_settings(benchmark).items():
        assert retrieval[key] == value, key
    # BFCL composes no profile: memory/default.yaml's values, every one of them printed.
    bfcl = yaml.safe_load(
        config_documents(points("experiment=bfcl_table1"), "job").split("\n", 1)[1]
    )
    assert {k: bfcl["memory"]["retrieval"][k] for k in AS_ON_BFCL["toolsandbox"]} == (
        AS_ON_BFCL["toolsandbox"]
    )


def test_cfg_job_resolve_shows_the_authors_function_ranking_on_toolsandbox_only():
    def printed(*overrides: str) -> str:
        text = config_documents(points(*overrides), "job", resolve=True)
        return yaml.safe_load(text.split("\n", 1)[1])["memory"]["retrieval"]["fn_ranking"]

    assert printed("experiment=toolsandbox_table1") == "call_ngrams"
    assert printed("benchmark=appworld") == printed("experiment=bfcl_table1") == "embedding"
    kept = "memory.retrieval.fn_ranking=embedding"  # ours, chosen: kept over the profile
    assert printed("experiment=toolsandbox_table1", kept) == "embedding"


def test_the_toolsandbox_point_plays_with_the_authors_function_ranking(monkeypatch):
    point = amd_point(monkeypatch, "experiment=toolsandbox_table1")
    assert isinstance(point.retrieval, RetrievalConfig)
    assert point.retrieval.fn_ranking == "call_ngrams"
    assert AmdMethod().read_identity(point.retrieval)["fn_ranking"] == "call_ngrams"
    assert point_params(point)["memory.retrieval.fn_ranking"] == "call_ngrams"


@pytest.mark.parametrize("experiment", ["toolsandbox_table1", "appworld_table1"])
def test_a_value_set_to_bfcls_default_is_kept_in_the_run_and_in_what_episodes_read(
    monkeypatch, experiment
):
    benchmark = experiment.removesuffix("_table1")
    mine = AS_ON_BFCL[benchmark]
    given = [f"memory.retrieval.{k}={_value(v)}" for k, v in mine.items()]
    default = amd_point(monkeypatch, f"experiment={experiment}")
    point = amd_point(monkeypatch, f"experiment={experiment}", *given)

    composed = composed_profile_settings(benchmark)
    assert {k: getattr(default.retrieval, k) for k in composed} == composed
    assert {k: getattr(point.retrieval, k) for k in mine} == mine  # kept, whatever it equals
    # The recorded run settings (the child run's MLflow params) hold the value set.
    params = point_params(point)
    for key, value in mine.items():
        assert params[f"memory.retrieval.{key}"] == safe_params({"v": value})["v"], key
    # The stage the student plays is another one (its identity holds what it reads).
    assert point.stage != default.stage
    assert isinstance(point.retrieval, RetrievalConfig)
    identity = AmdMethod().read_identity(point.retrieval)
    # A value at its default leaves no key (the keys of before), except the query.
    assert {k: identity.get(k, "user_turn" if k == "query" else None) for k in mine} == {
        k: (v if k not in ("fn_description", "fn_ranking") else None) for k, v in mine.items()
    }


def test_the_students_hooks_read_the_composed_settings_and_nothing_else(monkeypatch):
    """A ToolSandbox point with every profile value set back to BFCL's: the hooks ask
    with the user's turn, per turn (no decomposition), no Workflow threshold."""
    from distillery.workers.memory.amd.hooks import AmdHooks

    given = [f"memory.retrieval.{k}={_value(v)}" for k, v in AS_ON_BFCL["toolsandbox"].items()]
    point = amd_point(monkeypatch, "experiment=toolsandbox_table1", *given)
    asked_to_decompose: list[object] = []

    async def student(messages):
        asked_to_decompose.append(messages)
        return ChatResult(text='["find the contact"]')

    lookup = _AmdLookup()
    assert isinstance(point.retrieval, RetrievalConfig)
    task = Task("t1", "toolsandbox", ("Text Bob.",), (), (), "t1")
    hooks = AmdHooks(
        "t1", lookup, point.retrieval, lambda source: True, student,
        list(task.turns), TOOLSANDBOX, hidden_query="Ask the agent to text Bob 'hi'.",
    )  # fmt: skip
    asyncio.run(hooks.before_turn(0, "Text Bob.", "SYSTEM"))
    assert lookup.asked[0] == ("wf", "Text Bob.", 1, None)
    assert lookup.asked[1] == ("st", ("Text Bob.",), 1, 0.45)
    assert asked_to_decompose == []
