"""Every reply shape a server can send is normalised or refused, with a reason."""

from __future__ import annotations

import json

import pytest

from distillery.workers.llm.replies import MAX_TOKEN_COUNT, clean_text, parse_completion
from distillery.workers.llm.types import InfraError, InvalidReply


def _body(message, usage=None, finish_reason="stop", ensure_ascii=True) -> bytes:
    response = {"choices": [{"message": message, "finish_reason": finish_reason}]}
    if usage is not None:
        response["usage"] = usage
    return json.dumps(response, ensure_ascii=ensure_ascii).encode()


def _parse(message, **kwargs):
    return parse_completion(_body(message, **kwargs), 0.1, 1, "http://h/v1")


def _call(call_id, name="ls", arguments="{}"):
    call = {"type": "function", "function": {"name": name, "arguments": arguments}}
    if call_id is not ...:
        call["id"] = call_id
    return call


def test_clean_text_drops_nul_and_replaces_lone_surrogates():
    assert clean_text("plain é 😀") == ("plain é 😀", False)
    assert clean_text("a\x00b\ud800c") == ("ab\ufffdc", True)


def test_content_parts_are_joined_and_numbers_or_objects_refused():
    result = _parse({"content": [{"type": "text", "text": "he"}, "llo", {"type": "image"}]})
    assert result.text == "hello"
    assert any("list of 3 parts" in note and "1 without text" in note for note in result.notes)
    with pytest.raises(InvalidReply, match="content is int 42"):
        _parse({"content": 42})
    with pytest.raises(InvalidReply, match="content is dict"):
        _parse({"content": {"text": "x"}})
    with pytest.raises(InvalidReply, match="message is list"):
        _parse(["hello"])


@pytest.mark.parametrize("bad", ["\ud800", "\udfff", "\x00"])
def test_lone_surrogates_and_nul_never_leave_the_client(bad):
    arguments = json.dumps({"path": f"a{bad}b"}, ensure_ascii=False)  # raw, in the string
    escaped = json.dumps({"path": f"a{bad}b"})  # an escape inside the arguments' JSON
    result = _parse(
        {
            "content": f"text{bad}",
            "tool_calls": [_call("c1", f"ls{bad}", arguments), _call("c2", "cd", escaped)],
        }
    )
    for text in (result.text, *(v for c in result.tool_calls for v in c.values())):
        text.encode("utf-8")  # every string is valid UTF-8 now
        assert "\x00" not in text
    for call in result.tool_calls:
        assert json.loads(call["arguments"])["path"] in ("ab", "a\ufffdb")
    assert result.notes


def test_invalid_utf8_in_the_body_is_replaced_not_fatal():
    body = _body({"content": "ok ÿ"}, ensure_ascii=False).replace("ÿ".encode(), b"\xff")
    assert parse_completion(body, 0, 1, "e").text == "ok \ufffd"


@pytest.mark.parametrize(
    "ids",
    [
        [..., ...],  # missing
        [7, 8],  # numbers
        [{"id": 1}, [2]],  # objects and lists
        ["", None],
        ["same", "same"],  # duplicated
        ["x" * 10_000, "y" * 300],  # too long to keep re-sending
    ],
)
def test_tool_call_ids_are_unique_strings(ids):
    result = _parse({"content": None, "tool_calls": [_call(i) for i in ids]})
    got = [c["id"] for c in result.tool_calls]
    assert all(isinstance(i, str) and i for i in got) and len(set(got)) == 2
    assert any("replaced" in note for note in result.notes)


def test_a_valid_id_is_kept_and_only_the_repeat_is_replaced():
    result = _parse({"tool_calls": [_call("a"), _call("a"), _call("b")]})
    ids = [c["id"] for c in result.tool_calls]
    assert ids[0] == "a" and ids[2] == "b" and ids[1] not in ("a", "b")


def test_an_oversize_name_is_cut():
    result = _parse({"tool_calls": [_call("a", name="f" * 100_000)]})
    assert len(result.tool_calls[0]["name"]) == 256 and "cut" in result.notes[0]


def test_tool_call_shapes():
    result = _parse(
        {
            "tool_calls": [
                {"id": "x", "type": "custom"},  # not a function call: ignored with a note
                _call("y", name=5),
                _call("z", arguments={"a": 1}),
                _call("w", arguments=None),
            ]
        }
    )
    names = [(c["id"], c["name"], c["arguments"]) for c in result.tool_calls]
    assert names == [("y", "5", "{}"), ("z", "ls", '{"a": 1}'), ("w", "ls", "{}")]
    assert len(result.notes) == 3
    with pytest.raises(InvalidReply, match="tool_calls is dict"):
        _parse({"tool_calls": {"a": 1}})


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "12", "completion_tokens": "3"},
        {"prompt_tokens": -5, "completion_tokens": -1},
        {"prompt_tokens": 10**20, "completion_tokens": MAX_TOKEN_COUNT + 1},
        {"prompt_tokens": 1e300, "completion_tokens": 0.5},
        {"prompt_tokens": [1], "completion_tokens": True},
        [1, 2],
        "many",
    ],
)
def test_usage_that_is_not_a_count_counts_zero(usage):
    result = _parse({"content": "hi"}, usage=usage)
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (0, 0)
    assert any("usage" in note for note in result.notes)


def test_valid_usage_and_finish_reason_are_kept():
    result = _parse({"content": "hi"}, usage={"prompt_tokens": 9, "completion_tokens": 2.0})
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (9, 2)
    assert result.finish_reason == "stop" and result.notes == ()
    odd = _parse({"content": "hi"}, finish_reason=7)
    assert odd.finish_reason is None and odd.notes


def test_a_body_that_is_no_completion_is_the_servers_failure():
    for body in (b"<html>bad gateway</html>", b"{}", b'{"choices": []}', b'{"choices": 3}'):
        with pytest.raises(InfraError, match="malformed"):
            parse_completion(body, 0.1, 1, "http://h/v1")


def _nested(levels: int, leaf="x"):
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


def _deep_stack(levels: int, fn):
    """`fn()` called `levels` frames down: a worker's stack is never empty."""
    return fn() if levels == 0 else _deep_stack(levels - 1, fn)


@pytest.mark.parametrize(
    "arguments",
    [
        _nested(700),  # a JSON value: ~1.5 KB of reply
        json.dumps(_nested(700)),  # JSON text
        json.dumps(_nested(700, "\ud800")),  # JSON text with an escape that must be read
        "[" * 100_000 + "]" * 100_000,  # too deep for the JSON parser at any stack depth
    ],
    ids=["value", "text", "text_escaped_surrogate", "beyond_the_parser"],
)
@pytest.mark.parametrize("stack", [0, 400])
def test_arguments_nested_too_deeply_are_refused_not_a_recursion_error(arguments, stack):
    body = _body({"tool_calls": [_call("c", arguments=arguments)]})
    # (Deep in a stack the body itself may be too deep to read: refused all the same.)
    where = "" if stack else r"tool_calls\[0\]: arguments "
    with pytest.raises(InvalidReply, match=where + "nested too deeply"):
        _deep_stack(stack, lambda: parse_completion(body, 0.1, 1, "http://h/v1"))


def test_a_body_too_deep_for_the_json_parser_is_an_invalid_reply_not_infra():
    body = b'{"choices": [{"message": {"content": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}]}"
    with pytest.raises(InvalidReply, match="reply nested too deeply"):
        parse_completion(body, 0.1, 1, "http://h/v1")
    # Deep, but within what the parser reads: refused by the message's own bound.
    with pytest.raises(InvalidReply, match=f"message nested too deeply: more than {72} levels"):
        _parse({"content": _nested(500)})


def test_nesting_up_to_the_limit_is_repaired_as_before_and_notes_stay_short():
    from distillery.workers.llm.replies import MAX_ARGUMENT_NESTING

    escaped = json.dumps({"path": _nested(MAX_ARGUMENT_NESTING - 1, "a\ud800")})
    result = _deep_stack(
        400, lambda: _parse({"tool_calls": [_call("c", arguments=escaped), _call("d", "cd", {})]})
    )
    assert json.loads(result.tool_calls[0]["arguments"])["path"] == _nested(
        MAX_ARGUMENT_NESTING - 1, "a\ufffd"
    )
    assert result.notes[0] == "tool_calls[0]: NUL or lone surrogates removed from the arguments"
    # A deeply nested usage count is no count, and its note is a few characters.
    odd = _parse({"content": "hi"}, usage={"prompt_tokens": _nested(60)})
    assert odd.usage.prompt_tokens == 0 and len(odd.notes[0]) < 100
