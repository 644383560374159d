"""The AppWorld adapter's distillery side, without its venv: the action format (code
blocks in, the interpreter's output back), the 40-step budget, options, the data
folder's checks and scenario-aware splits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from distillery.orchestrator.core.protocols import ProtocolConfig, split_tasks
from distillery.workers.envs import registry
from distillery.workers.envs.appworld.adapter import (
    MAX_CODE_CHARS,
    AppWorld,
    AppWorldOptions,
    code_of,
    code_reply,
    data_root,
    parse_code_reply,
    parse_execute_calls,
    prompt_variables,
)
from distillery.workers.envs.appworld.react import PromptTemplate, kept_reply
from distillery.workers.envs.base import BenchmarkUnavailable, Task, ToolResult
from distillery.workers.envs.conventions import conventions_of

CONF = Path(__file__).resolve().parents[4] / "conf" / "benchmark" / "appworld.yaml"
VENDORED_PROMPT = (
    Path(__file__).resolve().parents[4]
    / ".."
    / "shared"
    / "vendor"
    / "ace-appworld"
    / "experiments"
    / "prompts"
    / "appworld_react_generator_prompt.txt"
)


def test_a_reply_runs_its_first_python_block_only():
    reply = "I look it up.\n```python\nx = 1\n```\nthen\n```python\nprint(x)\n```"
    (call,) = parse_code_reply(reply).calls
    assert call.name == "execute" and call.kwargs == {"code": "x = 1"}
    # Only a ```python fence opens code, as the authors' regular expressions read it.
    assert code_of("```\nprint(2)\n```") is None and code_of("```py\nprint(2)\n```") is None
    assert kept_reply(reply) == "I look it up.\n```python\nx = 1\n```\n\n"


def test_an_unclosed_fence_is_code_and_is_kept_closed():
    reply = "Here.\n```python\nprint(1)"
    (call,) = parse_code_reply(reply).calls
    assert call.kwargs == {"code": "print(1)"}
    assert kept_reply(reply) == "Here.\n```python\nprint(1)\n```\n\n"
    # After a complete block the rest of the reply is not read at all.
    assert code_of("```python\na = 1\n```\n```python\nb = 2") == "a = 1"


def test_a_reply_without_code_executes_no_code_and_the_episode_goes_on():
    for text in ("The task is done.", "```python\n\n```", ""):
        (call,) = parse_code_reply(text).calls  # not an empty action: the turn goes on
        assert call.kwargs == {"code": ""}
    assert kept_reply("Thinking.") == "Thinking.\n\n"


def test_oversized_code_is_refused_not_run():
    action = parse_code_reply(code_reply("x = 1\n" * (MAX_CODE_CHARS // 6 + 1)))
    assert not action.calls and "longer than" in action.rejected[0].reason


def test_the_oracle_reply_decodes_back_to_the_ground_truth_code():
    code = "def solution(apis, requester):\n    pass\n\nsolution(apis, requester)"
    (call,) = parse_code_reply(code_reply(code)).calls
    assert call.kwargs["code"] == code


def test_native_calls_only_execute_with_a_code_string():
    calls = [
        {"id": "a", "function": {"name": "execute", "arguments": json.dumps({"code": "1"})}},
        {"id": "b", "function": {"name": "execute", "arguments": "{not json"}},
        {"id": "c", "function": {"name": "shell", "arguments": json.dumps({"code": "ls"})}},
        {"id": "d", "name": "execute", "arguments": {"code": 3}},
    ]
    action = parse_execute_calls(calls)
    assert [(c.call_id, c.kwargs) for c in action.calls] == [("a", {"code": "1"})]
    assert [r.call_id for r in action.rejected] == ["b", "c", "d"]
    assert all("execute(code=" in r.reason for r in action.rejected)


def test_conventions_send_the_output_back_and_allow_at_most_40_steps():
    conventions = conventions_of(AppWorld)
    assert AppWorld.max_steps_per_turn == 40
    assert not conventions.turn_is_over_limit(39, 40) and conventions.turn_is_over_limit(40, 40)
    observation = ToolResult("execute(code='print(1)')", "1\n", None, "execute")
    (message,) = conventions.results("prompt", [], [observation])
    assert message == {"role": "user", "content": "Output:\n```\n1\n```\n\n"}
    huge = ToolResult("execute(code='...')", "y" * 20_001, None, "execute")
    (message,) = conventions.results("prompt", [], [huge])
    assert message["content"] == (
        "Output:\n```\n" + "y" * 20_000 + "\n[REST NOT SHOWN FOR BREVITY]```\n\n"
    )
    native = conventions.results("native", [{"id": "t1"}], [ToolResult("c", "1", call_id="t1")])
    assert native == [{"role": "tool", "tool_call_id": "t1", "content": "1"}]
    assert conventions.oracle_reply("print(1)") == "```python\nprint(1)\n```"
    assert conventions.context_trim is not None and conventions.context_trim.buffer_tokens == 256


def test_the_authors_prompt_file_opens_the_conversation_with_memory_in_its_slot(tmp_path):
    template = PromptTemplate.read(VENDORED_PROMPT) if VENDORED_PROMPT.is_file() else None
    if template is None:
        pytest.skip("ACE's AppWorld prompts are not vendored here")
    assert template.memory_slots == ("playbook",)
    task = Task(
        "a1b2c3d_1",
        "appworld",
        ("What is my email address?",),
        (),
        (),
        metadata={
            "supervisor": {
                "first_name": "Ada",
                "last_name": "L",
                "email": "a@b",
                "phone_number": "5",
            },
            "prompt_variables": {"app_descriptions": "[APPS]", "relevant_apis": "set()"},
        },
    )
    messages = template.messages(prompt_variables(task), "REMEMBER THIS")
    assert (
        messages[0]["role"] == "user"
        and "### PLAYBOOK BEGIN\nREMEMBER THIS\n###" in (messages[0]["content"])
    )
    assert messages[-1]["content"].endswith("Task: What is my email address?\n\n")
    assert "[APPS]" in "".join(m["content"] for m in messages)
    empty = template.messages(prompt_variables(task), "")
    assert "### PLAYBOOK BEGIN\n\n### PLAYBOOK END" in empty[0]["content"]
    # A template without a slot: memory opens its first message.
    plain = tmp_path / "plain.txt"
    plain.write_text("USER:\nHello {{ main_user.first_name }}.\nTask: {{ input_str }}")
    (only,) = PromptTemplate.read(plain).messages(prompt_variables(task), "MEM")
    assert only["content"] == "MEM\n\nHello Ada.\nTask: What is my email address?\n\n"


def test_a_prompt_file_that_is_no_conversation_is_refused_at_once(tmp_path):
    prose = tmp_path / "prose.txt"
    prose.write_text("You are an agent. {{ input_str }}")
    with pytest.raises(ValueError, match="must start with a role line"):
        AppWorldOptions(prompt_file=str(prose))
    broken = tmp_path / "broken.txt"
    broken.write_text("USER:\n{% if %}")
    with pytest.raises(ValueError, match="no Jinja2 template"):
        AppWorldOptions(prompt_file=str(broken))
    with pytest.raises(ValueError, match="cannot read the prompt file"):
        AppWorldOptions(prompt_file=str(tmp_path / "missing.txt"))


def test_the_prompt_files_digest_is_in_identity_and_no_file_is_a_deviation(tmp_path):
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text("USER:\nTask: {{ input_str }}")
    second.write_text("USER:\nTask: {{ input_str }}")
    a = AppWorldOptions(root="/nowhere", prompt_file=str(first))
    b = AppWorldOptions(root="/nowhere", prompt_file=str(second))
    assert a.identity() == b.identity() and set(a.identity()) == {"prompt"}
    second.write_text("USER:\nYour task: {{ input_str }}")
    assert AppWorldOptions(root="/nowhere", prompt_file=str(second)).identity() != a.identity()
    assert a.deviations() == () and AppWorldOptions().deviations() == ("own_react_prompt",)
    assert registry.benchmark_deviations("appworld", {}) == ("own_react_prompt",)
    assert registry.action_format_deviation("appworld", "native") == "native_function_calling"
    assert registry.action_format_deviation("appworld", "prompt") is None


def _data(root: Path, answer: str = "ada@example.com") -> Path:
    """A folder laid out as AppWorld's (what `data_digest` reads): a split, API docs and
    two tasks of one scenario, plus a task no split lists."""
    data = root / "data"
    (data / "datasets").mkdir(parents=True)
    (data / "datasets" / "test_normal.txt").write_text("a1b2c3d_1\na1b2c3d_2\n")
    (data / "datasets" / "dev.txt").write_text("a1b2c3d_2\n")
    (data / "api_docs").mkdir()
    (data / "api_docs" / "supervisor.json").write_text('{"show_profile": {}}')
    for task in ("a1b2c3d_1", "a1b2c3d_2", "ffffff0_1"):
        truth = data / "tasks" / task / "ground_truth"
        truth.mkdir(parents=True)
        (data / "tasks" / task / "specs.json").write_text(json.dumps({"instruction": task}))
        (data / "tasks" / task / "dbs").mkdir()
        (data / "tasks" / task / "dbs" / "supervisor.jsonl").write_text("{}\n")
        (truth / "evaluation.py").write_text("def evaluate(test, *args): pass\n")
        (truth / "answer.json").write_text(json.dumps(answer if task == "a1b2c3d_1" else ""))
    return root


def test_identity_has_the_split_and_the_datas_content_not_its_path(tmp_path, monkeypatch):
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    here, there = _data(tmp_path / "here"), _data(tmp_path / "there")
    at_here = AppWorldOptions(root=str(here)).identity()
    assert set(at_here) == {"data"} and len(at_here["data"]) == 16
    # The same content at two paths: the same episodes.
    assert AppWorldOptions(root=str(there)).identity() == at_here
    # Through $APPWORLD_ROOT and the default options too (the shipped config's `{}`).
    monkeypatch.setenv("APPWORLD_ROOT", str(there))
    assert AppWorldOptions().identity() == at_here
    assert registry.identity_options("appworld", {}) == at_here
    # Another split is other episodes.
    dev = AppWorldOptions(root=str(here), split="dev").identity()
    assert dev["split"] == "dev" and dev["data"] != at_here["data"]
    with pytest.raises(ValueError):
        AppWorldOptions(split="test")


@pytest.mark.parametrize(
    "change",
    [
        "tasks/a1b2c3d_1/ground_truth/answer.json",  # one task's expected answer
        "tasks/a1b2c3d_2/ground_truth/evaluation.py",  # its evaluation code
        "tasks/a1b2c3d_2/dbs/supervisor.jsonl",  # its starting state
        "tasks/a1b2c3d_1/specs.json",  # its instruction
        "api_docs/supervisor.json",  # what the agent reads of the APIs
        "datasets/test_normal.txt",  # the split's tasks
    ],
)
def test_two_data_folders_differing_in_one_file_are_other_episodes(tmp_path, change):
    same, other = _data(tmp_path / "a"), _data(tmp_path / "b")
    target = other / "data" / change
    target.write_text(target.read_text() + "\n# changed\n")
    a = AppWorldOptions(root=str(same)).identity()
    assert AppWorldOptions(root=str(other)).identity() != a


def test_a_task_outside_the_split_and_pycache_do_not_count(tmp_path):
    root = _data(tmp_path / "a")
    before = AppWorldOptions(root=str(root)).identity()
    (root / "data" / "tasks" / "ffffff0_1" / "specs.json").write_text("{}")
    cache = root / "data" / "tasks" / "a1b2c3d_1" / "ground_truth" / "__pycache__"
    cache.mkdir()
    (cache / "evaluation.cpython-311.pyc").write_bytes(b"\0")
    assert AppWorldOptions(root=str(root)).identity() == before


def test_without_a_data_folder_identity_is_the_options_alone(monkeypatch):
    # Planning refuses a missing folder before any identity is used (resolve_tasks).
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    assert AppWorldOptions(root="/nowhere").identity() == {}
    assert AppWorldOptions(split="dev").identity() == {"split": "dev"}


def _layout(root: Path, splits=("test_normal",)) -> Path:
    (root / "data" / "tasks").mkdir(parents=True)
    (root / "data" / "datasets").mkdir()
    for split in splits:
        (root / "data" / "datasets" / f"{split}.txt").write_text("")
    return root


def test_missing_data_is_refused_with_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("APPWORLD_ROOT", raising=False)
    with pytest.raises(BenchmarkUnavailable, match="appworld download data"):
        AppWorld(AppWorldOptions())  # before any venv is looked at
    with pytest.raises(BenchmarkUnavailable, match="no AppWorld data at"):
        data_root(AppWorldOptions(root=str(tmp_path)))
    _layout(tmp_path / "aw", splits=("dev",))
    with pytest.raises(BenchmarkUnavailable, match="no split 'test_normal'"):
        data_root(AppWorldOptions(root=str(tmp_path / "aw")))
    assert data_root(AppWorldOptions(root=str(tmp_path / "aw"), split="dev")) == tmp_path / "aw"
    # the data folder itself, or $APPWORLD_ROOT, are accepted too
    assert data_root(AppWorldOptions(root=str(tmp_path / "aw" / "data"), split="dev")).name == "aw"
    monkeypatch.setenv("APPWORLD_ROOT", str(tmp_path / "aw"))
    assert data_root(AppWorldOptions(split="dev")) == tmp_path / "aw"


def test_registered_with_its_config_and_its_groups_are_scenarios():
    assert registry.benchmark_class("appworld") is AppWorld
    assert AppWorld.groups_are_scenarios is True
    conf = yaml.safe_load(CONF.read_text())
    assert conf["name"] == "appworld" and conf["options"] == {}
    assert registry.benchmark_options("appworld", {"split": "dev"}).split == "dev"
    facts = AppWorld.fingerprint()
    assert [f.split(":")[0] for f in facts] == ["world", "protocol", "requirements", "adapter"]
    assert "appworld==0.1.3.post1" in facts[2]


def test_cross_split_keeps_a_scenarios_tasks_on_one_side():
    ids = [
        f"{scenario}_{n}"
        for scenario in ("a1b2c3d", "e4f5a6b", "0c1d2e3", "9f8e7d6")
        for n in (1, 2, 3)
    ]
    groups = {i: i.split("_")[0] for i in ids}  # the scenario id, as the world lists it
    protocol = ProtocolConfig(name="cross_split")
    split = split_tasks(ids, protocol, groups, group_by_default=AppWorld.groups_are_scenarios)
    memory = {groups[i] for i in split.memory_ids}
    evaluated = {groups[i] for i in split.eval_ids}
    assert memory and evaluated and not memory & evaluated
    assert len(split.memory_ids) + len(split.eval_ids) == len(ids)


def test_plans_key_the_data_not_its_path_and_tag_the_known_deviation(tmp_path, monkeypatch):
    from distillery.orchestrator.cli.app import validate_sweep
    from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
    from distillery.orchestrator.planning import plan as plan_module
    from distillery.orchestrator.planning import tasks as tasks_module
    from distillery.orchestrator.tracking.results import point_descriptors
    from distillery.workers.envs.base import Task

    tasks = tuple(
        Task(task_id, "appworld", ("q",), (), (), task_id.split("_")[0])
        for task_id in ("a1b2c3d_1", "a1b2c3d_2")
    )
    seen_options = []

    def listing(name, options, limit, task_ids, environment):  # no venv: the listing of the folder
        seen_options.append(json.loads(options))
        return tasks

    monkeypatch.setattr(tasks_module, "_load_tasks", listing)

    def plan(root: Path):
        overrides = ["benchmark=appworld", "teacher=oracle", f"+benchmark.options.root={root}"]
        points = sweep_points(rewrite_role_overrides(overrides), False)
        return plan_module.plan_sweep(validate_sweep(points))

    here, there, other = _data(tmp_path / "here"), _data(tmp_path / "there"), _data(tmp_path / "o")
    (other / "data" / "tasks" / "a1b2c3d_2" / "specs.json").write_text('{"instruction": "?"}')
    graph = plan(here)
    # The listing gets every option, the data folder included (identity leaves it out).
    assert seen_options[-1] == {"root": str(here)}
    (collect,) = [s for s in graph.stages.values() if s.key.kind == "collect"]
    digest = AppWorldOptions(root=str(here)).identity()["data"]
    assert collect.identity["benchmark_options"] == {"data": digest}
    assert str(here) not in json.dumps(collect.identity)
    assert collect.identity["deviations"] == ["own_react_prompt"]  # no prompt file
    assert set(plan(there).stages) == set(graph.stages)  # same content, another path
    assert set(plan(other).stages).isdisjoint(graph.stages)  # one task's specs differ
    point = next(iter(graph.points.values()))
    assert (
        point_descriptors(point)["deviations"] == "code_over_64000_chars_refused,own_react_prompt"
    )


def test_a_run_says_before_it_starts_what_it_plays_off_the_authors_harness(tmp_path):
    from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
    from distillery.orchestrator.core.config import to_config
    from distillery.orchestrator.planning.preflight import run_notices

    root = _data(tmp_path / "aw")

    def notices(*overrides: str) -> list[str]:
        base = ["benchmark=appworld", f"+benchmark.options.root={root}", "methods=[zero_shot]"]
        return run_notices([to_config(compose(rewrite_role_overrides([*base, *overrides])))])

    (own_prompt, native) = notices("student.action_format=native")
    assert "prompt_file is not set" in own_prompt and "own_react_prompt" in own_prompt
    assert "prompt_file=ace_generator" in own_prompt  # the fix named (the shipped prompt)
    assert "action_format=native" in native and "native_function_calling" in native
    prompt = tmp_path / "prompt.txt"
    prompt.write_text("USER:\nTask: {{ input_str }}")
    assert notices(f"+benchmark.options.prompt_file={prompt}", "student.action_format=prompt") == []


def test_the_adapters_limit_is_a_known_deviation_bfcl_has_none():
    assert registry.known_deviations("appworld") == ("code_over_64000_chars_refused",)
    # BFCL's are its protections (docs/fidelity/bfcl.md), never AppWorld's.
    assert "code_over_64000_chars_refused" not in registry.known_deviations("bfcl_multi_turn_base")
