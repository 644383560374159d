"""A llama.cpp model's chat formatting is checked before anything starts: which
tool-call syntax its template defines, and what it would silently drop. No weights:
templates come from small fixture files (chat_templates/) and from GGUF headers."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from distillery.workers.llm.chat_templates import (
    check_llama_cpp_format,
    check_model_file,
    prepare_messages,
    refusal,
    template_formatter,
)
from distillery.workers.llm.config import ModelConfig
from distillery.workers.llm.gguf import GgufError, read_chat_templates
from distillery.workers.llm.servers import find_smollm2_gguf

pytest.importorskip("llama_cpp", reason="llama-cpp-python renders the chat formats")

TEMPLATES = Path(__file__).parent / "chat_templates"


def template(name: str) -> str:
    return str(TEMPLATES / f"{name}.jinja")


def model(action_format: str = "native", **kwargs) -> ModelConfig:
    return ModelConfig(name="tiny", backend="llama_cpp", action_format=action_format, **kwargs)


# ------------------------------------------------------------------ GGUF headers


def write_gguf(path: Path, metadata: dict[str, object], endian: str = "<") -> Path:
    """A GGUF file with `metadata` (strings, ints, string lists) and no tensors."""

    def string(text: str) -> bytes:
        data = text.encode()
        return struct.pack(endian + "Q", len(data)) + data

    out = b"GGUF" + struct.pack(endian + "IQQ", 3, 0, len(metadata))
    for key, value in metadata.items():
        out += string(key)
        if isinstance(value, str):
            out += struct.pack(endian + "I", 8) + string(value)
        elif isinstance(value, int):
            out += struct.pack(endian + "IQ", 10, value)
        else:  # a list of strings, like the vocabulary
            out += struct.pack(endian + "IIQ", 9, 8, len(value))
            out += b"".join(string(item) for item in value)
    path.write_bytes(out)
    return path


@pytest.mark.parametrize("endian", ["<", ">"])
def test_templates_are_read_from_a_gguf_header(tmp_path, endian):
    hermes = Path(template("hermes")).read_text()
    path = write_gguf(
        tmp_path / "tiny.gguf",
        {
            "general.name": "tiny",
            "tokenizer.ggml.tokens": ["<s>", "</s>", "hello"],
            "tokenizer.ggml.bos_token_id": 0,
            "tokenizer.chat_template": "{{ messages }}",
            "tokenizer.chat_template.tool_use": hermes,
        },
        endian,
    )
    assert read_chat_templates(path) == {
        "tokenizer.chat_template": "{{ messages }}",
        "tokenizer.chat_template.tool_use": hermes,
    }
    # Native mode prefers a model's tool_use template.
    check = check_model_file(model(), path)
    assert check.ok and check.syntax == "hermes" and "tool_use" in check.source


def test_the_bundled_models_template_is_read():
    (key,) = read_chat_templates(find_smollm2_gguf())
    assert key == "tokenizer.chat_template"


def test_a_file_that_is_not_gguf_is_refused(tmp_path):
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04 a zip file")
    with pytest.raises(GgufError, match="not a GGUF file"):
        read_chat_templates(tmp_path / "x.gguf")
    whole = write_gguf(tmp_path / "t.gguf", {"tokenizer.chat_template": "{{ x }}"}).read_bytes()
    (tmp_path / "cut.gguf").write_bytes(whole[:-3])
    with pytest.raises(GgufError, match="truncated"):
        read_chat_templates(tmp_path / "cut.gguf")


# ------------------------------------------------------------------ the probes


@pytest.mark.parametrize("name,syntax", [("hermes", "hermes"), ("llama3_json", "llama3_json")])
def test_a_tool_calling_template_is_found_with_its_syntax(name, syntax):
    check = check_llama_cpp_format(model(chat_template_file=template(name)), {})
    assert check.ok and check.syntax == syntax
    assert check.template == Path(template(name)).read_text()


@pytest.mark.parametrize(
    "name,reasons",
    [
        ("chatml_no_tools", ["never shows the tools", "no tool-call syntax"]),
        ("drops_tool_results", ["drops tool messages"]),
        ("no_system_role", ["System role not supported"]),
    ],
)
def test_templates_that_cannot_carry_native_tool_calls_are_refused(name, reasons):
    check = check_llama_cpp_format(model(chat_template_file=template(name)), {})
    assert not check.ok and check.syntax is None
    for reason in reasons:
        assert any(reason in p for p in check.problems), check.problems


def test_the_bundled_model_cannot_call_tools_natively_and_is_told_what_to_change():
    cfg = ModelConfig(name="smollm2-135m", backend="llama_cpp", action_format="native")
    check = check_model_file(cfg, find_smollm2_gguf())
    what, fix = refusal("student", cfg, check)
    assert what.startswith("student=smollm2-135m (backend llama_cpp, action_format native): ")
    assert "chat template of" in what and "never shows the tools to the model" in what
    assert "student.action_format=prompt" in fix and "student.chat_template_file" in fix
    # Its own template carries the prompt format.
    assert check_model_file(
        cfg.model_copy(update={"action_format": "prompt"}), find_smollm2_gguf()
    ).ok


@pytest.mark.parametrize(
    "chat_format,reasons",
    [
        ("gemma", ["drops system messages", "drops tool messages"]),
        ("chatml-function-calling", ["drops tool messages", "never shows the tools"]),
        ("chatml", ["drops tool messages", "no tool-call syntax"]),
        ("no-such-format", ["has no chat_format no-such-format"]),
    ],
)
def test_built_in_chat_formats_are_refused_for_native_calls_with_their_reasons(
    chat_format, reasons
):
    cfg = model(chat_format=chat_format)
    check = check_llama_cpp_format(cfg, {})
    assert not check.ok
    for reason in reasons:
        assert any(reason in p for p in check.problems), check.problems
    _, fix = refusal("student", cfg, check)
    assert fix.startswith("unset student.chat_format")


def test_the_prompt_format_refuses_formats_that_drop_system_messages():
    for cfg in (
        model("prompt", chat_format="gemma"),
        model("prompt", chat_format="mistral-instruct"),
    ):
        check = check_llama_cpp_format(cfg, {})
        assert check.problems == ["it drops system messages"], cfg.chat_format
    check = check_llama_cpp_format(
        model("prompt", chat_template_file=template("no_system_role")), {}
    )
    assert "System role not supported" in check.problems[0]
    for fine in ("chatml", "llama-3", "chatml-function-calling"):
        assert check_llama_cpp_format(model("prompt", chat_format=fine), {}).ok, fine
    # A GGUF without a template is served with llama-cpp-python's llama-2 format.
    fallback = check_llama_cpp_format(model("prompt"), {})
    assert fallback.ok and "llama-2" in fallback.source
    assert check_llama_cpp_format(model(), {}).problems == ["it carries no chat template"]


def test_a_template_that_does_not_compile_is_refused():
    check = check_llama_cpp_format(model(chat_template_file="x.jinja"), {}, "{% if %}")
    assert not check.ok and "does not compile" in check.problems[0]


# ------------------------------------------------------------------ the history


def test_null_content_and_json_arguments_are_rendered_as_templates_expect():
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "a",
                    "type": "function",
                    "function": {"name": "cd", "arguments": '{"f": "x"}'},
                },
                {"id": "b", "type": "function", "function": {"name": "ls", "arguments": '{"bad'}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
    ]
    prepared = prepare_messages(history)
    assert prepared[1]["content"] == ""
    assert prepared[1]["tool_calls"][0]["function"]["arguments"] == {"f": "x"}
    assert prepared[1]["tool_calls"][1]["function"]["arguments"] == '{"bad'  # as written
    assert history[1]["content"] is None  # the request is not changed
    prompt = template_formatter(Path(template("hermes")).read_text())(history, None)
    assert '{"name": "cd", "arguments": {"f": "x"}}' in prompt  # not a quoted string
    assert "<tool_response>\nok\n</tool_response>" in prompt
