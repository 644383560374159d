"""A model's tool calls written in its template's syntax become OpenAI tool calls."""

from __future__ import annotations

import json

import pytest

from distillery.workers.llm.tool_syntax import parse_tool_calls


def _calls(parsed) -> list[tuple[str, dict]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls
    ]


def test_hermes_calls_with_text_before_them():
    text = (
        "Let me look.\n<tool_call>\n"
        '{"name": "cd", "arguments": {"folder": "document"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
    )
    parsed = parse_tool_calls("hermes", text)
    assert _calls(parsed) == [("cd", {"folder": "document"}), ("ls", {})]
    assert parsed.content == "Let me look.\n"
    call = parsed.tool_calls[0]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["id"] != parsed.tool_calls[1]["id"]


def test_hermes_last_call_may_be_unclosed_and_arguments_keep_unicode():
    parsed = parse_tool_calls("hermes", '<tool_call>\n{"name": "echo", "arguments": {"s": "né"}}')
    assert _calls(parsed) == [("echo", {"s": "né"})]
    assert parsed.content is None
    assert parsed.tool_calls[0]["function"]["arguments"] == '{"s": "né"}'


@pytest.mark.parametrize(
    "text",
    [
        "No call here.",
        '<tool_call>\n{"name": "cd", "arguments": {"folder": "doc"\n</tool_call>',  # bad JSON
        '<tool_call>\n{"name": "cd"}\n</tool_call>',  # no arguments
        '<tool_call>\n["cd"]\n</tool_call>',
        '<tool_call>{"name": "", "arguments": {}}</tool_call>',
        '<tool_call>{"name": "a", "arguments": {}}</tool_call><tool_call>oops</tool_call>',
    ],
)
def test_hermes_text_that_is_not_all_calls_stays_text(text):
    parsed = parse_tool_calls("hermes", text)
    assert parsed.tool_calls == [] and parsed.content == text


def test_llama3_json_call_with_parameters_or_arguments_and_python_tag():
    parsed = parse_tool_calls("llama3_json", ' {"name": "cd", "parameters": {"folder": "d"}} ')
    assert _calls(parsed) == [("cd", {"folder": "d"})] and parsed.content is None
    parsed = parse_tool_calls("llama3_json", '<|python_tag|>{"name": "ls", "arguments": {}}')
    assert _calls(parsed) == [("ls", {})]


def test_llama3_json_several_calls_separated_by_semicolons():
    text = '{"name": "a", "parameters": {"x": 1}}; {"name": "b", "parameters": {"y": [1, 2]}}'
    assert _calls(parse_tool_calls("llama3_json", text)) == [("a", {"x": 1}), ("b", {"y": [1, 2]})]


@pytest.mark.parametrize(
    "text",
    [
        "The answer is 4.",
        'I will call {"name": "cd", "parameters": {}}',  # a sentence around the JSON
        '{"name": "cd", "parameters": {}} and then more',
        '{"name": "cd", "parameters": {}};',
        '{"name": "cd"}',
        '{"name": "cd", "parameters": {}, "arguments": {}}',
        '{"name": "cd", "parameters": {"folder": "d"}',  # cut off
        '{"key": "not a call"}',
    ],
)
def test_llama3_json_text_that_is_not_all_calls_stays_text(text):
    parsed = parse_tool_calls("llama3_json", text)
    assert parsed.tool_calls == [] and parsed.content == text


def test_calls_are_never_read_from_the_reasoning():
    thought = '<think>maybe <tool_call>{"name": "rm", "arguments": {}}</tool_call></think>'
    parsed = parse_tool_calls("hermes", thought + "\nNo call needed.")
    assert parsed.tool_calls == [] and parsed.content == thought + "\nNo call needed."
    parsed = parse_tool_calls("hermes", thought + '<tool_call>{"name": "ls", "arguments": {}}')
    assert _calls(parsed) == [("ls", {})] and parsed.content == thought


def test_an_unknown_syntax_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown tool-call syntax"):
        parse_tool_calls("mistral", "[TOOL_CALLS]")  # type: ignore[arg-type]
