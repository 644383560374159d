"""The AppWorld paper defaults (issue 36 item 1): ACE's generator prompt shipped with its
licence and identical to the vendored copy, selected by name; AppWorld's random_seed 123
by default, another value recorded as a deviation; the function hint's tool description
(ToolSandbox profile) rendered as the authors' student renders it."""

from __future__ import annotations

from pathlib import Path

import pytest

from distillery.workers.envs.appworld import react
from distillery.workers.envs.appworld.adapter import (
    ACE_RANDOM_SEED,
    BUNDLED_PROMPTS,
    PROMPTS_DIR,
    AppWorldOptions,
)
from distillery.workers.memory.amd.hooks import function_description

VENDORED = Path(__file__).resolve().parents[4].parent / "shared/vendor/ace-appworld"


def test_the_shipped_prompt_is_aces_with_its_licence():
    prompt = BUNDLED_PROMPTS["ace_generator"]
    assert "Apache License" in (PROMPTS_DIR / "LICENSE").read_text()
    notice = (PROMPTS_DIR / "NOTICE.md").read_text()
    assert "ace-agent/ace-appworld" in notice and "748a9dc8" in notice
    template = react.PromptTemplate.read(prompt)
    assert template.memory_slots == ("playbook",)
    vendored = VENDORED / "experiments/prompts/appworld_react_generator_prompt.txt"
    if not vendored.exists():
        pytest.skip("the vendored ACE copy is not here")
    assert prompt.read_bytes() == vendored.read_bytes()


def test_the_prompt_is_named_and_its_digest_is_identity():
    named = AppWorldOptions(prompt_file="ace_generator")
    assert "own_react_prompt" not in named.deviations() and not named.notices()
    by_path = AppWorldOptions(prompt_file=str(BUNDLED_PROMPTS["ace_generator"]))
    assert named.identity()["prompt"] == by_path.identity()["prompt"]
    assert "own_react_prompt" in AppWorldOptions().deviations()
    with pytest.raises(ValueError, match="cannot read the prompt file"):
        AppWorldOptions(prompt_file="ace_generatr")


def test_random_seed_is_aces_and_another_is_a_recorded_deviation():
    assert AppWorldOptions().random_seed == ACE_RANDOM_SEED == 123
    assert "random_seed" in AppWorldOptions().world_options()
    other = AppWorldOptions(random_seed=100, prompt_file="ace_generator")
    assert other.deviations() == ("appworld_random_seed_not_aces",)
    assert other.identity()["random_seed"] == 100


def test_the_function_description_is_rendered_as_the_authors_student_does():
    schema = {
        "type": "function",
        "function": {
            "name": "send_message",
            "description": "Send a text.",
            "parameters": {
                "type": "object",
                "properties": {
                    "phone_number": {"type": "string", "description": "Recipient."},
                    "content": {"type": "string", "description": "Body."},
                },
                "required": ["phone_number"],
            },
        },
    }
    assert function_description("send_message", schema) == (
        "[Function Description] send_message: Send a text.\n"
        "Parameters:\n"
        "  - phone_number (string) (required): Recipient.\n"
        "  - content (string): Body."
    )
