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


def decoded(action) -> list[str] | None:
    """What a response decodes to, in BFCL's terms: None when undecodable, else each
    call's rendering in order (rejected calls too: BFCL decodes and runs them)."""
    if action.decode_error is not None:
        assert action.empty
        return None
    items = [(i, c.source) for i, c in enumerate(action.calls)]
    out: list[str | None] = [None] * (len(action.calls) + len(action.rejected))
    for r in action.rejected:
        out[r.position] = r.raw
    free = iter(i for i, v in enumerate(out) if v is None)
    for _, source in items:
        out[next(free)] = source
    return out  # type: ignore[return-value]


def test_bfcl_list_of_calls():
    action = text("[cd(folder='document'), mkdir(dir_name='temp')]")
    assert [c.source for c in action.calls] == ["cd(folder='document')", "mkdir(dir_name='temp')"]
    assert not action.rejected and not action.empty


@pytest.mark.parametrize(
    "s",
    [
        "cd(folder='document')",
        "  [cd(folder='document')]  \n",
        "```\ncd(folder='document')\n```",
        "`cd(folder='document')`",
        "cd(folder='document'),",
    ],
)
def test_wrappers_bfcl_strips(s):
    assert one_call(s).source == "cd(folder='document')"


@pytest.mark.parametrize(
    "s",
    [
        "```python\n[cd(folder='document')]\n```",  # BFCL reads `python[...]`: not calls
        "I have completed the request.",
        "Sure! [cd(folder='document')]",
        "The file is 'report.pdf'.",
        "hello",
        "[1, 2, 'three']",
        "1 + 2",
        "cd(folder='a')\nls()",
        "cd(folder='a'",
        "[cd(folder='a'), 42]",  # one non-call: the whole response is undecodable
        "[[cd(folder='a')]]",
        "[cd(folder=x) for x in ['a', 'b']]",
        "cd(folder=f'{1}')",
        "cd(folder=[x for x in 'ab'])",
        "cd(folder=os.sep)",
        "add(a={'b', 'c'})",
        "add(a=-x)",
        "add(a=-'x')",
        "add(a=lambda: 0)",
        "add(a=1 if 1 else 2)",
        "add(a={**{'b': 1}})",
        "add(a={[1]: 2})",
        "add(a={})",  # BFCL's renderer fails on an empty dict
    ],
)
def test_undecodable_responses_end_the_turn(s):
    action = text(s)
    assert action.empty and action.decode_error, action


@pytest.mark.parametrize("s", ["[]", "", "   ", "``"])
def test_empty_list_decodes_to_nothing(s):
    action = text(s)
    assert action.empty and action.decode_error is None


def test_bfcl_reads_what_it_can():
    # Positional arguments are dropped, names become strings, `+x` becomes -x, a nested
    # call without keywords and a subscript become their text: BFCL's decoder, not ours.
    call = one_call("sort('final_report.pdf', key=None, n=-3, x=+2.5, y=document, z=ls())")
    assert call.args == ()
    assert call.kwargs == {"key": None, "n": -3, "x": -2.5, "y": "document", "z": "ls()"}
    assert one_call("add(a=b[0], c=...)").kwargs == {"a": "b[0]", "c": "..."}
    assert one_call("add(a=(1, [2]), b={'k': 1})").kwargs == {"a": (1, [2]), "b": {"k": 1}}


def test_positional_arguments_kept_with_the_option():
    action = parse_text_calls("sort('a.txt', True, n=1)", ALLOWED, positional_args=True)
    (call,) = action.calls
    assert call.args == ("a.txt", True) and call.kwargs == {"n": 1}
    assert parse_text_calls("sort(ls())", ALLOWED, positional_args=True).rejected


@pytest.mark.parametrize(
    "s, reason_part",
    [
        ("os.system('touch /tmp/x')", "attribute access"),
        ("__import__('os').system('touch x')", "name 'system' is not defined"),
        ("__import__('os')", "name '__import__' is not defined"),
        ("eval('1')", "name 'eval' is not defined"),
        ("rm(file_name='x')", "name 'rm' is not defined"),
        ("(lambda: 0)()", "is not defined"),
        ("cd.__class__(folder='a')", "attribute access"),
        ("cd(folder='a')(x=1)", "is not defined"),
        ("cd(folder=ls(a=1))", "nested calls"),
        ("cd(folder='a' * 10**9)", "operators"),
        ("add(a=10**10000)", "operators"),
        ("add(a=1e999)", "non-finite"),
        ("add(a=-1e999)", "non-finite"),
        ("add(a=123456789012345678901234567890123)", "digits"),
        ("add(a=1j)", "complex"),
        ("add(a=b'x')", "bytes"),
        ("add(**{'a': 1})", "unpacking"),
        ("add(a={'k': {'m': 1}})", "dict of dicts"),
        ("add(a={1: 'x'})", "plain strings"),
    ],
)
def test_decoded_but_forbidden_calls_are_rejected(s, reason_part):
    reason = one_rejection(s)
    assert reason_part.lower() in reason.lower(), reason


def test_rejected_calls_keep_their_place_and_are_counted():
    action = text("[cd(folder='a'), rm(file_name='c'), mkdir(dir_name='b')]")
    assert [c.source for c in action.calls] == ["cd(folder='a')", "mkdir(dir_name='b')"]
    (rejected,) = action.rejected
    assert rejected.position == 1 and rejected.counted and rejected.raw == "rm(file_name='c')"


def test_rejected_keeps_raw_text_clipped():
    action = text("[os.system('" + "x" * 1000 + "')]")
    (rejected,) = action.rejected
    assert rejected.raw.startswith("os.system(") and len(rejected.raw) <= 300


def test_undecodable_output_is_reported_with_the_option():
    action = parse_text_calls("[cd(folder='a'", ALLOWED, report_invalid=True)
    (rejected,) = action.rejected
    assert not rejected.counted and "not decodable" in rejected.reason
    assert action.decode_error is None
    # Prose is still just talk.
    assert parse_text_calls("All done.", ALLOWED, report_invalid=True).decode_error


# The same texts through bfcl-eval's own decoder (only texts it does not `eval`).
BFCL_CORPUS = [
    "[cd(folder='document'), mkdir(dir_name='temp')]",
    "cd(folder='document')",
    "`cd(folder='document')`",
    "```\n[ls(a=True)]\n```",
    "```python\n[cd(folder='document')]\n```",
    "[]",
    "Done.",
    "I have completed the request.",
    "[cd(folder='a'), 42]",
    "sort('final_report.pdf', key=None, n=-3, x=+2.5, y=document, z=ls())",
    "add(a=b[0], c=...)",
    "add(a=(1, [2]), b={'k': 1, 'l': [{'m': 2}]})",
    "[rm(file_name='c'), cd(folder='x')]",
    "GorillaFileSystem.cd(folder='x')",
    "cd(folder=os.sep)",
    "add(a={'b', 'c'})",
    "add(a={})",
    "echo(content='it\\'s \"quoted\"\\n')",
    "'cd(folder='document')'",
    "cd(folder='a'",
]


@pytest.mark.parametrize("s", BFCL_CORPUS)
def test_prompt_decoding_matches_bfcl_eval(s):
    from bfcl_eval.model_handler.utils import default_decode_execute_prompting

    try:
        official = default_decode_execute_prompting(s)
    except Exception:
        official = None
    if official is not None:
        # BFCL renders a value with `repr`; compare values, not quoting style.
        official = [ast.unparse(ast.parse(c, mode="eval")) for c in official]
    ours = decoded(text(s))
    if ours is not None:
        ours = [ast.unparse(ast.parse(c, mode="eval")) for c in ours]
    assert ours == official


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
    assert text("[" * 5000 + "]" * 5000).empty  # the parser refuses: undecodable
    assert text("add(a=" + "[" * 150 + "]" * 150 + ")").rejected


def test_non_string_input_is_empty():
    assert parse_text_calls(None, ALLOWED).empty  # type: ignore[arg-type]


# ------------------------------------------------------------------- native calls


def test_native_calls():
    action = native(
        [
            {"id": "c1", "name": "cd", "arguments": '{"folder": "document"}'},
            {"id": "c2", "name": "ls", "arguments": "{}"},
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
    "arguments",
    ["{folder: 'a'}", '{"folder": "a"', '["a"]', '"a"', "", None],
)
def test_native_undecodable_arguments_end_the_turn(arguments):
    # As BFCL's `convert_to_function_call`: one bad call and nothing of the response runs.
    action = native(
        [
            {"id": "a", "name": "ls", "arguments": "{}"},
            {"id": "x", "name": "cd", "arguments": arguments},
        ]
    )
    assert action.empty and action.decode_error


def test_native_undecodable_arguments_are_reported_with_the_option():
    action = parse_native_calls(
        [
            {"id": "a", "name": "ls", "arguments": "{}"},
            {"id": "b", "name": "ls", "arguments": "not json"},
        ],
        ALLOWED,
        report_invalid=True,
    )
    assert [c.call_id for c in action.calls] == ["a"]
    (rejected,) = action.rejected
    assert rejected.call_id == "b" and not rejected.counted and "not valid JSON" in rejected.reason


@pytest.mark.parametrize(
    "item, reason_part",
    [
        ({"id": "x", "name": "rm", "arguments": "{}"}, "name 'rm' is not defined"),
        ({"id": "x", "name": "os.system", "arguments": "{}"}, "attribute access"),
        ({"id": "x", "name": "GorillaFileSystem.cd", "arguments": "{}"}, "attribute access"),
        ({"id": "x", "name": "GorillaFileSystem_cd", "arguments": "{}"}, "is not defined"),
        ({"id": "x", "name": None, "arguments": "{}"}, "is not defined"),
        ({"id": "x", "name": "add", "arguments": '{"a": NaN}'}, "non-finite"),
        ({"id": "x", "name": "add", "arguments": '{"a": Infinity}'}, "non-finite"),
        ({"id": "x", "name": "add", "arguments": '{"a": 1e999}'}, "non-finite"),
        ({"id": "x", "name": "add", "arguments": '{"a": 1' + "0" * 40 + "}"}, "digits"),
        # Argument names become source text: they must be identifiers.
        ({"id": "x", "name": "cd", "arguments": "{\"a=__import__('os'),b\": 1}"}, "argument name"),
        ({"id": "x", "name": "cd", "arguments": '{"class": 1}'}, "argument name"),
        ({"id": "x", "name": "cd", "arguments": '{"": 1}'}, "argument name"),
        ({"id": "x", "name": "cd", "arguments": {"a": object()}}, "object values"),
        ({"id": "x", "name": "cd", "arguments": '{"a": ' + "[" * 20 + "]" * 20 + "}"}, "nesting"),
    ],
)
def test_native_rejections(item, reason_part):
    action = native([item])
    assert not action.calls
    (rejected,) = action.rejected
    assert reason_part.lower() in rejected.reason.lower(), rejected.reason
    assert rejected.call_id == "x" and rejected.counted


def test_native_malformed_item_is_undecodable():
    assert native(["cd(folder='a')"]).decode_error


def test_native_limits():
    limits = CallLimits(max_calls=2, max_call_chars=40)
    calls = [{"id": f"c{i}", "name": "ls", "arguments": "{}"} for i in range(3)]
    action = native(calls, limits)
    assert not action.calls and [r.call_id for r in action.rejected] == ["c0", "c1", "c2"]
    big = json.dumps({"content": "a" * 100})
    (rejected,) = native([{"id": "c", "name": "echo", "arguments": big}], limits).rejected
    assert "too long" in rejected.reason


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
