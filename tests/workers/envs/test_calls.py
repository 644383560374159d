"""Parsing untrusted model output into validated calls: nothing unsafe gets through."""

from __future__ import annotations

import ast
import json

import pytest

from distillery.workers.envs.base import ToolCall
from distillery.workers.envs.calls import (
    CallLimits,
    check_call,
    parse_native_calls,
    parse_text_calls,
)

ALLOWED = {"cd", "mkdir", "ls", "echo", "mv", "sort", "add", "place_order"}


def text(s: str, limits: CallLimits | None = None):
    return parse_text_calls(s, ALLOWED, limits or CallLimits())


def native(calls, limits: CallLimits | None = None):
    return parse_native_calls(calls, ALLOWED, limits or CallLimits())


def one_call(s: str) -> ToolCall:
    action = text(s)
    assert not action.rejected, action.rejected
    (call,) = action.calls
    return call


def one_rejection(s: str) -> str:
    action = text(s)
    assert not action.calls, action.calls
    (rejected,) = action.rejected
    return rejected.reason


# ------------------------------------------------------------------ prompt format


def test_bfcl_list_of_calls():
    action = text("[cd(folder='document'), mkdir(dir_name='temp')]")
    assert [c.source for c in action.calls] == ["cd(folder='document')", "mkdir(dir_name='temp')"]
    assert not action.rejected and not action.empty


@pytest.mark.parametrize(
    "s",
    [
        "cd(folder='document')",
        "  [cd(folder='document')]  \n",
        "```python\n[cd(folder='document')]\n```",
        "```\ncd(folder='document')\n```",
        "```py\n[cd(folder='document')]```",
        "`cd(folder='document')`",
        "cd(folder='document'),",
    ],
)
def test_tolerated_wrappers(s):
    assert one_call(s).source == "cd(folder='document')"


def test_bare_tuple_of_calls():
    action = text("cd(folder='a'), ls()")
    assert [c.name for c in action.calls] == ["cd", "ls"]


def test_positional_and_keyword_literals():
    call = one_call("sort('final_report.pdf', True, key=None, n=-3, x=+2.5, y=-1e-3)")
    assert call.args == ("final_report.pdf", True)
    assert call.kwargs == {"key": None, "n": -3, "x": 2.5, "y": -0.001}


def test_nested_container_literals():
    call = one_call("place_order(items=[{'sym': 'AAPL', 'qty': [1, 2]}, (3, 4)], tags={'a', 'b'})")
    assert call.kwargs["items"] == [{"sym": "AAPL", "qty": [1, 2]}, (3, 4)]
    assert call.kwargs["tags"] == {"a", "b"}


@pytest.mark.parametrize(
    "s",
    [
        "cd(folder='doc')",
        "sort('a b', 'c\\'d', \"e\\\"f\", '\\n\\x00\\u00e9')",
        "place_order(x=[{'k': (1, -2.5, None)}, {1, 2}], y={'n': {'m': [True, False]}})",
        "add(a=-0.0, b=1e300, c=-12345678901234567890)",
        "echo(content='')",
        "ls()",
    ],
)
def test_canonical_source_round_trips(s):
    call = one_call(s)
    node = ast.parse(call.source, mode="eval").body
    assert isinstance(node, ast.Call) and node.func.id == call.name
    assert tuple(ast.literal_eval(a) for a in node.args) == call.args
    assert {k.arg: ast.literal_eval(k.value) for k in node.keywords} == call.kwargs
    assert check_call(call, ALLOWED) is None


def test_source_is_rebuilt_not_copied():
    # Comments, odd spacing and quotes are the model's; the source is ours.
    call = one_call('cd( folder = "document" )  # go there')
    assert call.source == "cd(folder='document')"


@pytest.mark.parametrize(
    "s",
    [
        "",
        "   ",
        "[]",
        "()",
        "I have completed the request.",
        "Sure! [cd(folder='document')]",  # prose around calls: not the format
        "The file is 'report.pdf'.",
        "'done'",
        "hello",
        "[1, 2, 'three']",
        "1 + 2",
        "cd(folder='a')\nls()",  # two statements are not one expression
        "cd(folder='a'",
    ],
)
def test_prose_and_non_calls_are_empty(s):
    assert text(s).empty


@pytest.mark.parametrize(
    "s, reason_part",
    [
        ("os.system('touch /tmp/x')", "attribute access"),
        ("__import__('os').system('touch x')", "attribute access"),
        ("__import__('os')", "unknown function '__import__'"),
        ("eval('1')", "unknown function 'eval'"),
        ("rm(file_name='x')", "unknown function 'rm'"),
        ("(lambda: 0)()", "plain function name"),
        ("cd(folder=lambda: 0)", "lambdas"),
        ("[cd(folder=x) for x in ['a', 'b']]", "not a function call"),
        ("cd(folder=[x for x in 'ab'])", "comprehensions"),
        ("cd(folder=ls())", "nested calls"),
        ("cd(folder=__import__('os').getcwd())", "nested calls"),
        ("cd(folder=f'{1}')", "f-strings"),
        ("cd(folder=document)", "names are not literals"),
        ("cd(folder='a' * 10**9)", "operators"),
        ("add(a=10**10000)", "operators"),
        ("add(a=1e999)", "non-finite"),
        ("add(a=123456789012345678901234567890123)", "digits"),
        ("add(a=-(-1))", "a sign applies to a number only"),
        ("add(a=--1)", "a sign applies to a number only"),
        ("add(a=-True)", "a sign applies to a number only"),
        ("add(a=1j)", "complex"),
        ("add(a=b'x')", "bytes"),
        ("add(a=...)", "ellipsis"),
        ("add(*[1, 2])", "unpacking"),
        ("add(**{'a': 1})", "unpacking"),
        ("add(a={**{'b': 1}})", "unpacking"),
        ("add(a=1, a=2)", "given twice"),
        ("add(a={[1]: 2})", "invalid literal"),
        ("add(a=(b := 1))", "assignment"),
        ("add(a=[1][0])", "subscripts"),
        ("add(a=1 if 1 else 2)", "conditional"),
        ("cd.__class__(folder='a')", "attribute access"),
        ("cd(folder='a')(x=1)", "calling the result"),
    ],
)
def test_hostile_or_forbidden_calls_are_rejected(s, reason_part):
    reason = one_rejection(s)
    assert reason_part.lower() in reason.lower(), reason


def test_rejected_keeps_raw_text_clipped():
    action = text("[os.system('" + "x" * 1000 + "')]")
    (rejected,) = action.rejected
    assert rejected.raw.startswith("os.system(") and len(rejected.raw) <= 300


def test_mixed_list_runs_valid_elements_and_rejects_the_rest():
    action = text("[cd(folder='a'), os.system('x'), 42, mkdir(dir_name='b'), rm(file_name='c')]")
    assert [c.source for c in action.calls] == ["cd(folder='a')", "mkdir(dir_name='b')"]
    assert [r.raw for r in action.rejected] == ["os.system('x')", "42", "rm(file_name='c')"]
    assert "not a function call" in action.rejected[1].reason


def test_nested_list_of_calls_is_rejected():
    action = text("[[cd(folder='a')]]")
    assert not action.calls and "not a function call" in action.rejected[0].reason


def test_limit_on_number_of_calls():
    limits = CallLimits(max_calls=3)
    assert len(text("[ls(), ls(), ls()]", limits).calls) == 3
    action = text("[ls(), ls(), ls(), ls()]", limits)
    assert not action.calls
    (rejected,) = action.rejected
    assert "too many calls" in rejected.reason


def test_default_call_limit_is_32():
    assert len(text("[" + ", ".join(["ls()"] * 32) + "]").calls) == 32
    assert "too many calls" in text("[" + ", ".join(["ls()"] * 33) + "]").rejected[0].reason


def test_limit_on_text_length():
    limits = CallLimits(max_text_chars=100)
    long_call = "echo(content='" + "a" * 200 + "')"
    assert "too long" in text(long_call, limits).rejected[0].reason
    # Long prose is still just talk.
    assert text("word " * 100, limits).empty
    # The default limit is 20k characters.
    assert "too long" in text("echo(content='" + "a" * 20_000 + "')").rejected[0].reason


def test_limit_on_call_length():
    limits = CallLimits(max_call_chars=50)
    action = text("[ls(), echo(content='" + "a" * 60 + "')]", limits)
    assert [c.name for c in action.calls] == ["ls"]
    assert "call too long" in action.rejected[0].reason


def test_limit_on_nesting_depth():
    limits = CallLimits(max_depth=3)
    assert text("add(a=[[1]])", limits).calls
    assert "nesting" in text("add(a=[[[[1]]]])", limits).rejected[0].reason


def test_limit_on_values_per_call():
    limits = CallLimits(max_values=10)
    assert (
        "too many values" in text("add(a=" + str(list(range(20))) + ")", limits).rejected[0].reason
    )


def test_pathological_nesting_is_not_a_crash():
    assert text("[" * 5000 + "]" * 5000).empty  # the parser refuses, that is prose
    assert text("add(a=" + "[" * 150 + "]" * 150 + ")").rejected


def test_non_string_input_is_empty():
    assert parse_text_calls(None, ALLOWED).empty  # type: ignore[arg-type]


# ------------------------------------------------------------------- native calls


def test_native_calls():
    action = native(
        [
            {"id": "c1", "name": "cd", "arguments": '{"folder": "document"}'},
            {"id": "c2", "name": "ls", "arguments": ""},
            {"id": "c3", "name": "add", "arguments": {"a": -1, "b": [1.5, {"x": None}]}},
        ]
    )
    assert [c.source for c in action.calls] == [
        "cd(folder='document')",
        "ls()",
        "add(a=-1, b=[1.5, {'x': None}])",
    ]
    assert [c.call_id for c in action.calls] == ["c1", "c2", "c3"]


def test_native_nested_function_form():
    action = native(
        [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    )
    assert action.calls[0].source == "ls()" and action.calls[0].call_id == "c1"


@pytest.mark.parametrize(
    "item, reason_part",
    [
        ({"id": "x", "name": "cd", "arguments": "{folder: 'a'}"}, "not valid JSON"),
        ({"id": "x", "name": "cd", "arguments": '{"folder": "a"'}, "not valid JSON"),
        ({"id": "x", "name": "cd", "arguments": '["a"]'}, "JSON object"),
        ({"id": "x", "name": "cd", "arguments": '"a"'}, "JSON object"),
        ({"id": "x", "name": "rm", "arguments": "{}"}, "unknown function 'rm'"),
        ({"id": "x", "name": "os.system", "arguments": "{}"}, "unknown function"),
        ({"id": "x", "name": "GorillaFileSystem.cd", "arguments": "{}"}, "unknown function"),
        ({"id": "x", "name": "GorillaFileSystem_cd", "arguments": "{}"}, "unknown function"),
        ({"id": "x", "name": None, "arguments": "{}"}, "unknown function"),
        ({"id": "x", "name": "add", "arguments": '{"a": NaN}'}, "not valid JSON"),
        ({"id": "x", "name": "add", "arguments": '{"a": Infinity}'}, "not valid JSON"),
        ({"id": "x", "name": "add", "arguments": '{"a": 1e999}'}, "non-finite"),
        ({"id": "x", "name": "add", "arguments": '{"a": 1' + "0" * 40 + "}"}, "digits"),
        # Argument names become source text: they must be identifiers.
        ({"id": "x", "name": "cd", "arguments": "{\"a=__import__('os'),b\": 1}"}, "argument name"),
        ({"id": "x", "name": "cd", "arguments": '{"class": 1}'}, "argument name"),
        ({"id": "x", "name": "cd", "arguments": '{"": 1}'}, "argument name"),
        ({"id": "x", "name": "cd", "arguments": {"a": object()}}, "object values"),
        ({"id": "x", "name": "cd", "arguments": '{"a": ' + "[" * 20 + "]" * 20 + "}"}, "nesting"),
        ("cd(folder='a')", "malformed"),
    ],
)
def test_native_rejections(item, reason_part):
    action = native([item])
    assert not action.calls
    (rejected,) = action.rejected
    assert reason_part.lower() in rejected.reason.lower(), rejected.reason
    if isinstance(item, dict):
        assert rejected.call_id == "x"


def test_native_limits():
    limits = CallLimits(max_calls=2, max_call_chars=40)
    calls = [{"id": f"c{i}", "name": "ls", "arguments": "{}"} for i in range(3)]
    action = native(calls, limits)
    assert not action.calls and [r.call_id for r in action.rejected] == ["c0", "c1", "c2"]
    big = json.dumps({"content": "a" * 100})
    (rejected,) = native([{"id": "c", "name": "echo", "arguments": big}], limits).rejected
    assert "too long" in rejected.reason


def test_native_mixed_valid_and_invalid():
    action = native(
        [
            {"id": "a", "name": "ls", "arguments": "{}"},
            {"id": "b", "name": "ls", "arguments": "not json"},
        ]
    )
    assert [c.call_id for c in action.calls] == ["a"]
    assert [r.call_id for r in action.rejected] == ["b"]


def test_native_empty():
    assert native([]).empty
    assert native(None).empty  # type: ignore[arg-type]


# --------------------------------------------------------------- canonical check


class EvilStr(str):
    def __repr__(self) -> str:
        return "__import__('os').system('touch /tmp/pwned')"


@pytest.mark.parametrize(
    "call, reason_part",
    [
        (ToolCall("cd", kwargs={"folder": EvilStr("a")}), "EvilStr values"),
        (ToolCall("rm", kwargs={}), "unknown function"),
        (ToolCall("cd", kwargs={"x=1": 1}), "argument name"),
        (ToolCall("cd", args=(set(),)), "empty set"),
        (ToolCall("cd", args=(float("nan"),)), "non-finite"),
        (ToolCall("cd", args=(b"x",)), "bytes values"),
    ],
)
def test_check_call_refuses_hand_built_calls(call, reason_part):
    reason = check_call(call, ALLOWED)
    assert reason is not None and reason_part in reason
