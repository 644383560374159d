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
