"""The BFCL multi-turn base adapter against bfcl-eval's own data, backends and checker."""

from __future__ import annotations

import ast
import asyncio
import importlib.util
import json
import re
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from bfcl_eval.constants import default_prompts
from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

from distillery.workers.envs.base import ParsedAction, ToolCall
from distillery.workers.envs.bfcl import (
    PROMPT_VARIANT,
    REJECTED_CALL_SOURCE,
    BfclEnvironment,
    BfclMultiTurnBase,
    BfclOptions,
    prompt_system_prompt,
)
from distillery.workers.envs.calls import check_call
from distillery.workers.envs.registry import make_benchmark


@pytest.fixture(scope="module")
def bench() -> BfclMultiTurnBase:
    return BfclMultiTurnBase()


@pytest.fixture(scope="module")
def tasks(bench):
    return bench.load_tasks()


@pytest.fixture(scope="module")
def task0(bench):
    (task,) = bench.load_tasks(task_ids=["multi_turn_base_0"])
    return task


def _episode_globals(env: BfclEnvironment) -> list[str]:
    return [name for name in vars(multi_turn_utils) if env.model_name in name]


def _replay(env: BfclEnvironment, turns: list[list[str]]) -> None:
    """Play `turns` one call per step, like a perfect student in the prompt format."""
    for turn in turns:
        for source in turn:
            action = env.parse_text(f"[{source}]")
            assert action.calls and not action.rejected, (source, action)
            env.step(action)
        env.end_turn()


# ---------------------------------------------------------------------- loading


def test_registry_and_constants():
    bench = make_benchmark("bfcl_multi_turn_base")
    assert isinstance(bench, BfclMultiTurnBase)
    assert bench.name == "bfcl_multi_turn_base"
    assert bench.max_steps_per_turn == default_prompts.MAXIMUM_STEP_LIMIT == 20


def test_loads_all_200_tasks_in_id_order(tasks):
    assert len(tasks) == 200
    assert [t.task_id for t in tasks] == [f"multi_turn_base_{i}" for i in range(200)]
    for task in tasks:
        assert task.benchmark == "bfcl_multi_turn_base"
        assert task.turns and all(isinstance(t, str) and t for t in task.turns)
        assert task.function_docs and len(task.tools) == len(task.function_docs)
        classes = task.metadata["involved_classes"]
        assert task.group_id == "+".join(sorted(classes))
        assert isinstance(task.metadata["initial_config"], dict)
        assert len(task.metadata["ground_truth"]) == len(task.turns)


def test_task_zero_content(task0, bench):
    assert task0.turns[0].startswith("Move 'final_report.pdf' within document directory")
    assert len(task0.turns) == 4
    assert task0.group_id == "GorillaFileSystem+TwitterAPI"
    names = [d["name"] for d in task0.function_docs]
    assert "cd" in names and "post_tweet" in names
    assert "cp" in names  # listed in excluded_function, yet offered as bfcl-eval does
    assert bench.oracle_turns(task0)[0] == [
        "cd(folder='document')",
        "mkdir(dir_name='temp')",
        "mv(source='final_report.pdf', destination='temp')",
    ]


def test_every_function_of_the_involved_classes_is_offered(tasks, bench):
    # bfcl-eval's harness offers excluded_function too; matching it keeps scores comparable.
    with_exclusions = [t for t in tasks if t.metadata["excluded_function"]]
    assert len(with_exclusions) == 18
    for task in with_exclusions:
        names = {d["name"] for d in task.function_docs}
        assert set(task.metadata["excluded_function"]) <= names
    env = bench.make_env(with_exclusions[0], "unknown")
    try:
        (rejected,) = env.parse_text("rm_rf(path='/')").rejected
        assert "name 'rm_rf' is not defined" in rejected.reason
    finally:
        env.close()


def _types(schema: Any) -> set[str]:
    found = set()
    if isinstance(schema, dict):
        for key, value in schema.items():
            if key == "type" and isinstance(value, str):
                found.add(value)
            elif key == "properties":
                for sub in value.values():
                    found |= _types(sub)
            elif key == "items":
                found |= _types(value)
    return found


def test_tools_are_openai_function_tools(tasks):
    # Exactly BFCL's conversion: see test_bfcl_agreement.test_tools_are_bfcl_converted...
    for task in tasks:
        for tool, doc in zip(task.tools, task.function_docs, strict=True):
            assert tool["type"] == "function"
            fn = tool["function"]
            assert fn["name"] == doc["name"] and fn["description"] == doc["description"]
            assert set(fn) == set(doc)  # BFCL's OpenAI handler keeps the response schema
            assert fn["parameters"]["type"] == "object"
            for name, param in doc["parameters"]["properties"].items():
                if param.get("type") == "float":
                    cast = fn["parameters"]["properties"][name]
                    assert cast["type"] == "number" and cast["format"] == "float"
                    assert cast["description"].endswith(" This is a float type value.")
            assert _types(fn["parameters"]) <= {
                "object",
                "string",
                "number",
                "integer",
                "boolean",
                "array",
            }
            assert set(fn["parameters"]["properties"]) == set(doc["parameters"]["properties"])
            json.dumps(tool)  # serialisable as a request body


def test_schema_conversion_is_recursive():
    from distillery.workers.envs.bfcl_tools import _openai_schema

    schema = {
        "type": "dict",
        "properties": {
            "type": {"type": "float", "description": "a parameter named type"},
            "pair": {"type": "tuple", "items": {"type": "float"}},
            "rows": {
                "type": "array",
                "items": {"type": "dict", "properties": {"x": {"type": "any"}}},
            },
        },
        "required": ["type"],
    }
    assert _openai_schema(schema) == {
        "type": "object",
        "properties": {
            "type": {"type": "number", "description": "a parameter named type"},
            "pair": {"type": "array", "items": {"type": "number"}},
            "rows": {"type": "array", "items": {"type": "object", "properties": {"x": {}}}},
        },
        "required": ["type"],
    }


def test_function_docs_carry_bfcl_python_hint(task0):
    for doc in task0.function_docs:
        assert doc["description"].endswith(
            " Note that the provided function is in Python 3 syntax."
        )
        assert "response" in doc  # BFCL's prompt shows its docs whole


def test_load_tasks_selection(bench, tasks):
    assert [t.task_id for t in bench.load_tasks(limit=3)] == [t.task_id for t in tasks[:3]]
    assert bench.load_tasks(limit=0) == []
    picked = bench.load_tasks(task_ids=["multi_turn_base_10", "multi_turn_base_2"])
    assert [t.task_id for t in picked] == ["multi_turn_base_2", "multi_turn_base_10"]
    assert bench.load_tasks(task_ids=["multi_turn_base_10", "multi_turn_base_2"], limit=1) == [
        picked[0]
    ]
    assert bench.load_tasks()[0] is tasks[0]  # cached once per process
    with pytest.raises(ValueError, match="multi_turn_base_999"):
        bench.load_tasks(task_ids=["multi_turn_base_1", "multi_turn_base_999"])
    with pytest.raises(ValueError):
        bench.load_tasks(limit=-1)


def test_unknown_task_is_refused(bench, task0):
    from dataclasses import replace

    stranger = replace(task0, task_id="multi_turn_base_9999")
    with pytest.raises(ValueError):
        bench.make_env(stranger, "x")
    with pytest.raises(ValueError):
        bench.oracle_turns(stranger)


# ---------------------------------------------------------------------- prompts


def _bfcl_formulate_system_prompt():
    """bfcl-eval's own `formulate_system_prompt`, without its heavy module's imports.

    Its module needs packages we do not install (tree_sitter...), so the few pure
    functions are compiled from the installed source: trusted library code, not model
    output.
    """
    origin = importlib.util.find_spec("bfcl_eval.model_handler.utils").origin
    tree = ast.parse(Path(origin).read_text(encoding="utf-8"))
    wanted = {"formulate_system_prompt", "format_function_doc", "parse_prompt_variation_params"}
    module = ast.Module([n for n in tree.body if getattr(n, "name", None) in wanted], [])
    namespace: dict[str, Any] = {"json": json, "re": re, **vars(default_prompts)}
    exec(compile(module, origin, "exec"), namespace)
    return namespace["formulate_system_prompt"]


def test_prompt_system_prompt_is_bfcl_default(task0, bench):
    assert PROMPT_VARIANT == default_prompts.DEFAULT_SYSTEM_PROMPT_FORMAT
    env = bench.make_env(task0, "prompt")
    try:
        prompt = env.system_prompt("prompt")
        official = _bfcl_formulate_system_prompt()(PROMPT_VARIANT, list(task0.function_docs))
        assert prompt == official
        assert "[func_name1(params_name1=params_value1" in prompt
        assert json.dumps(list(task0.function_docs), indent=4) in prompt
    finally:
        env.close()


def test_every_task_prompt_is_exactly_its_docs_dumped(bench, tasks):
    # Prompts are assembled from per-class pieces dumped once per process: the result
    # must be the very string of the whole docs list dumped at once, for every task.
    for task in tasks:
        env = bench.make_env(task, "prompt")
        try:
            assert env.system_prompt("prompt") == prompt_system_prompt(task.function_docs)
        finally:
            env.close()


def test_a_task_with_other_docs_gets_the_prompt_of_its_own_docs(bench, task0):
    from dataclasses import replace

    docs = tuple({**doc, "description": "changed"} for doc in task0.function_docs[:2])
    env = bench.make_env(replace(task0, function_docs=docs), "prompt")
    original = bench.make_env(task0, "prompt")
    try:
        prompt = env.system_prompt("prompt")
        assert prompt == prompt_system_prompt(docs)
        assert prompt != original.system_prompt("prompt")
    finally:
        env.close()
        original.close()


def test_native_mode_has_no_system_prompt_unless_asked(task0, bench):
    with bench.make_env(task0, "native") as env:
        assert env.system_prompt("native") == ""  # BFCL's FC handlers send none
    env = BfclMultiTurnBase(settings=BfclOptions(native_system_prompt=True)).make_env(
        task0, "native"
    )
    try:
        prompt = env.system_prompt("native")
        assert "tool" in prompt and "without any tool call" in prompt
        assert "cd" not in prompt.split()  # the docs travel as tools, not in the prompt
        with pytest.raises(ValueError):
            env.system_prompt("xml")
    finally:
        env.close()


# ------------------------------------------------------------ ground-truth replay


def test_ground_truth_replay_passes_official_checker_on_all_tasks(bench, tasks):
    failures = []
    for task in tasks:
        env = bench.make_env(task, f"oracle-{task.task_id}")
        try:
            _replay(env, bench.oracle_turns(task))
            score = env.score()
        finally:
            env.close()
        if not score.success:
            failures.append((task.task_id, score))
        assert not _episode_globals(env)
    assert not failures, failures[:3]


def test_replay_with_a_whole_turn_per_step_passes(bench, task0):
    with bench.make_env(task0, "batched") as env:
        for turn in bench.oracle_turns(task0):
            env.step(env.parse_text("[" + ", ".join(turn) + "]"))
            env.end_turn()
        assert env.score().success


def test_dropping_the_last_turn_fails(bench, tasks):
    checked = 0
    for task in tasks:
        truth = bench.oracle_turns(task)
        if not truth[-1]:
            continue  # a last turn where nothing should be done cannot be sabotaged so
        with bench.make_env(task, f"drop-{task.task_id}") as env:
            _replay(env, [*truth[:-1], []])
            score = env.score()
        assert not score.success
        assert score.error_type == "multi_turn:empty_turn_model_response", task.task_id
        checked += 1
    assert checked > 190


def test_a_wrong_last_turn_fails(bench, task0):
    truth = bench.oracle_turns(task0)
    with bench.make_env(task0, "wrong") as env:
        _replay(env, [*truth[:-1], ["ls()"]])
        score = env.score()
    assert not score.success
    assert score.error_type in {
        "multi_turn:instance_state_mismatch",
        "multi_turn:execution_response_mismatch",
    }
    assert score.error_message


def test_stopping_before_the_last_turn_is_force_terminated(bench, task0):
    truth = bench.oracle_turns(task0)
    with bench.make_env(task0, "stopped") as env:
        _replay(env, truth[:-1])
        env.step(env.parse_text(f"[{truth[-1][0]}]"))  # started the last turn, never ended it
        score = env.score()
    assert not score.success
    assert score.error_type == "multi_turn:force_terminated"


def test_score_is_repeatable(bench, task0):
    with bench.make_env(task0, "twice") as env:
        _replay(env, bench.oracle_turns(task0))
        assert env.score().success
        assert env.score().success  # the checker's replays start fresh every time


def test_checker_exception_is_a_score_not_a_crash(bench, task0, monkeypatch):
    def broken(*args, **kwargs):
        raise KeyError("boom")

    monkeypatch.setattr(multi_turn_checker, "multi_turn_checker", broken)
    with bench.make_env(task0, "broken") as env:
        _replay(env, bench.oracle_turns(task0))
        score = env.score()
    assert not score.success
    assert score.error_type == "checker_exception"
    assert "KeyError" in score.error_message


def test_turn_protocol_errors(bench, task0):
    env = bench.make_env(task0, "protocol")
    for _ in task0.turns:
        env.end_turn()
    with pytest.raises(RuntimeError):
        env.end_turn()
    env.close()
    with pytest.raises(RuntimeError):
        env.step(env.parse_text("ls()"))
    env.close()  # idempotent


# ------------------------------------------------------------- tool results


def test_tool_results_and_errors(bench, task0):
    with bench.make_env(task0, "errors") as env:
        ok, missing, bad_args = env.step(
            env.parse_text("[cd(folder='document'), cd(folder='nope'), cd(wrong=1)]")
        )
        assert ok.error is None and ok.function == "cd" and not ok.rejected
        assert ok.call == "cd(folder='document')"
        assert json.loads(ok.content) == {"current_working_directory": "document"}
        # A backend failure comes back as {"error": ...}.
        assert missing.error and "nope" in missing.error
        assert json.loads(missing.content)["error"] == missing.error
        # An exception inside the call comes back from the executor as a string.
        assert bad_args.content.startswith("Error during execution:")
        assert bad_args.error == bad_args.content


def test_rejected_calls_are_answered_and_scored_as_failed_calls(bench, task0):
    with bench.make_env(task0, "rejected") as env:
        results = env.step(env.parse_text("[os.system(cmd='ls'), pwd()]"))
        assert [r.rejected for r in results] == [True, False]  # in the response's order
        rejected, executed = results
        assert executed.call == "pwd()" and executed.error is None
        assert rejected.call == "os.system(cmd='ls')" and "attribute access" in rejected.error
        assert rejected.content.startswith("Error during execution:")
        results = env.step(env.parse_text("[rm_rf(path='/')]"))  # not a task function
        assert results[0].rejected
        assert results[0].content == "Error during execution: name 'rm_rf' is not defined"
        # Recorded as BFCL records them: calls of their step that fail and change nothing.
        assert env._current == [[REJECTED_CALL_SOURCE, "pwd()"], [REJECTED_CALL_SOURCE]]
        assert env.step(env.parse_text("Done.")) == [] and len(env._current) == 2


def test_native_calls_execute_with_ids(bench, task0):
    with bench.make_env(task0, "native-ids") as env:
        action = env.parse_tool_calls(
            [
                {"id": "a", "name": "cd", "arguments": '{"folder": "document"}'},
                {"id": "b", "name": "rm_rf", "arguments": "{}"},
            ]
        )
        results = env.step(action)
        assert [(r.call_id, r.rejected) for r in results] == [("a", False), ("b", True)]
        assert results[0].error is None and "is not defined" in results[1].error
        # One call with invalid JSON and, as in BFCL, nothing of the response runs.
        bad = env.parse_tool_calls(
            [
                {"id": "c", "name": "cd", "arguments": '{"folder": "temp"}'},
                {"id": "d", "name": "cd", "arguments": "{bad json"},
            ]
        )
        assert bad.empty and "not valid JSON" in bad.decode_error


# ------------------------------------------------------------------- isolation


def test_episodes_of_the_same_task_are_isolated(bench, task0):
    a = bench.make_env(task0, "same-tag")
    b = bench.make_env(task0, "same-tag")  # even a repeated tag gets its own instances
    try:
        assert a.model_name != b.model_name
        a.step(a.parse_text("[cd(folder='document'), mkdir(dir_name='only_in_a')]"))
        b.step(b.parse_text("[cd(folder='document')]"))
        (seen_by_a,) = a.step(a.parse_text("ls()"))
        (seen_by_b,) = b.step(b.parse_text("ls()"))
        assert "only_in_a" in seen_by_a.content
        assert "only_in_a" not in seen_by_b.content
    finally:
        a.close()
        b.close()


def test_close_removes_every_global_of_the_episode(bench, task0):
    env = bench.make_env(task0, "cleanup/with:odd-chars.x")
    assert re.fullmatch(r"[A-Za-z0-9_]+", env.model_name)
    _replay(env, bench.oracle_turns(task0))
    assert len(_episode_globals(env)) == 2  # one live instance per involved class
    assert env.score().success
    assert len(_episode_globals(env)) == 2  # the checker's replays are already gone
    env.close()
    assert not _episode_globals(env)


def test_concurrent_asyncio_episodes_do_not_interfere(bench, tasks):
    async def play(task):
        env = bench.make_env(task, f"async-{task.task_id}")
        try:
            for turn in bench.oracle_turns(task):
                for source in turn:
                    env.step(env.parse_text(source))
                    await asyncio.sleep(0)  # let the other episodes step in between
                env.end_turn()
            return env.score()
        finally:
            env.close()

    async def main():
        # Twice the same tasks, interleaved: shared task ids must not share state.
        return await asyncio.gather(*(play(t) for t in [*tasks[:25], *tasks[:25]]))

    scores = asyncio.run(main())
    assert all(s.success for s in scores), [s for s in scores if not s.success][:2]


# ------------------------------------------------------------ hostile output


HOSTILE = [
    "[__import__('os').system('touch {p}')]",
    "__import__('os').system('touch {p}')",
    "[os.system('touch {p}')]",
    "[cd(folder=__import__('os').system('touch {p}'))]",
    "[mkdir(dir_name=open('{p}', 'w'))]",
    "[open('{p}', 'w')]",
    "[exec(\"open('{p}', 'w')\")]",
    "[eval(\"__import__('os').system('touch {p}')\")]",
    "[cd(folder='x'), (lambda: __import__('os').system('touch {p}'))()]",
    "[globals()['__builtins__']['open']('{p}', 'w')]",
    "[importlib.import_module('os').system('touch {p}')]",
    "[cd(folder=f\"{{__import__('os').system('touch {p}')}}\")]",
]


@pytest.mark.parametrize("template", HOSTILE)
def test_hostile_output_reaches_no_executor(bench, task0, tmp_path, template):
    target = tmp_path / "pwned"
    allowed = {d["name"] for d in task0.function_docs}
    executed: list[str] = []
    real = multi_turn_utils.execute_multi_turn_func_call

    def spy(func_call_list, *args, **kwargs):
        if not kwargs["model_name"].endswith("_ground_truth"):  # the checker's own replay
            executed.extend(func_call_list)
        return real(func_call_list, *args, **kwargs)

    with (
        mock.patch.object(multi_turn_utils, "execute_multi_turn_func_call", spy),
        mock.patch.object(multi_turn_checker, "execute_multi_turn_func_call", spy),
        bench.make_env(task0, "hostile") as env,
    ):
        action = env.parse_text(template.format(p=target))
        # Refused, undecodable, or (a nested call BFCL reads as text) a plain string.
        assert action.rejected or action.decode_error or action.calls
        assert all(c.name in allowed for c in action.calls)
        results = env.step(action)
        assert all(r.error for r in results if r.rejected)
        for _ in task0.turns:
            env.end_turn()
        env.score()
    assert not target.exists()
    # Everything that reached the executor is a canonical, literal-only allowed call.
    for source in executed:
        if source == REJECTED_CALL_SOURCE:  # the checker's stand-in: a NameError, no state
            continue
        node = ast.parse(source, mode="eval").body
        call = ToolCall(
            node.func.id,
            tuple(ast.literal_eval(a) for a in node.args),
            {k.arg: ast.literal_eval(k.value) for k in node.keywords},
        )
        assert call.source == source and check_call(call, allowed) is None
    # (BFCL's decoder passes a nested call on as a string: `mkdir(dir_name="open(...)")`
    # runs, with that text as a plain string argument.)


def test_tampered_task_docs_do_not_widen_allowed_calls(bench, task0):
    from dataclasses import replace

    evil_doc = {"name": "eval", "description": "", "parameters": {"type": "dict"}}
    tampered = replace(task0, function_docs=(*task0.function_docs, evil_doc))
    with bench.make_env(tampered, "tampered") as env:
        (rejected,) = env.parse_text("eval('1')").rejected
        assert "name 'eval' is not defined" in rejected.reason


def test_hand_built_unsafe_call_is_refused_at_step(bench, task0):
    class Evil(str):
        def __repr__(self) -> str:
            return "__import__('os').getcwd()"

    executed: list[str] = []
    real = multi_turn_utils.execute_multi_turn_func_call

    def spy(func_call_list, *args, **kwargs):
        executed.extend(func_call_list)
        return real(func_call_list, *args, **kwargs)

    with (
        mock.patch.object(multi_turn_utils, "execute_multi_turn_func_call", spy),
        bench.make_env(task0, "hand-built") as env,
    ):
        action = ParsedAction(
            calls=(ToolCall("cd", kwargs={"folder": Evil("x")}), ToolCall("rm_rf_everything"))
        )
        results = env.step(action)
    assert [r.rejected for r in results] == [True, True]
    assert executed == []


def test_protections_are_far_above_every_tasks_ground_truth(bench, tasks):
    """BFCL's protections (`PROTECTION_LIMITS`) stay out of any real task's way: every
    turn of the 200 tasks' ground truth, written as one reply (the most a turn can ask
    in one step), passes limits a tenth as large (a quarter for nesting and integer
    digits), in either format."""
    from distillery.workers.envs.calls import (
        PROTECTION_LIMITS as P,
    )
    from distillery.workers.envs.calls import (
        CallLimits,
        parse_native_calls,
        parse_text_calls,
    )

    tight = CallLimits(
        max_text_chars=P.max_text_chars // 10,
        max_call_chars=P.max_call_chars // 10,
        max_calls=P.max_calls // 10,
        max_depth=P.max_depth // 4,
        max_values=P.max_values // 10,
        max_int_digits=P.max_int_digits // 4,
    )
    for task in tasks:
        names = {tool["function"]["name"] for tool in task.tools}
        for turn in bench.oracle_turns(task):
            if not turn:
                continue
            text = "[" + ", ".join(turn) + "]"
            parsed = parse_text_calls(text, names, tight, arithmetic=True)
            assert not parsed.rejected and len(parsed.calls) == len(turn), task.task_id
            native = [
                {"id": f"c{i}", "name": call.name, "arguments": json.dumps(call.kwargs)}
                for i, call in enumerate(parsed.calls)
            ]
            assert not parse_native_calls(native, names, tight).rejected, task.task_id
