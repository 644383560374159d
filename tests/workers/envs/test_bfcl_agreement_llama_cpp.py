"""The agreement test's native-format probes, served by distillery's llama.cpp server.

Each scripted student of test_bfcl_agreement plays through the llama.cpp backend's own
request path (llama-cpp-python's request schema, the chat template rendering the
whole history, the tool-call parser: tests/support/llama_cpp_backend.py), its replies
written as a model writes them in the template's syntax. BFCL's own pipeline and
distillery's must agree on every verdict, step count and request, as they do with a
scripted OpenAI server; and where a reply can be written in the syntax, the verdict is
the one the scripted server gets (the calls survive the text round trip).
"""

from __future__ import annotations

import pytest

from distillery.workers.envs.bfcl import BfclMultiTurnBase
from tests.support import bfcl_students
from tests.support.bfcl_reference import bfcl_entries, play_bfcl, play_distillery
from tests.workers.envs.test_bfcl_agreement import TASKS

pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] not installed")

from tests.support.llama_cpp_backend import through_llama_cpp  # noqa: E402

# A model's invalid JSON arguments cannot be told apart from text once written out:
# the reply is text (no call), where the scripted server hands over the broken call.
UNWRITABLE = {"invalid_arguments", "invalid_arguments_last"}
# One plan of each kind of probe: calls one a reply, several in one reply (hermes only:
# Llama 3.x templates render one call per assistant turn, and the next request is
# refused, the model's failure: test_llama_server), arguments by position, invalid
# arguments, and a turn that never ends (the step limit).
CASES = [
    ("hermes", "correct"),
    ("hermes", "batched"),
    ("hermes", "positional_calls"),
    ("hermes", "invalid_arguments"),
    ("hermes", "looping_in_first_turn"),
    ("llama3_json", "correct"),
    ("llama3_json", "positional_calls"),
    ("llama3_json", "invalid_arguments"),
]


@pytest.fixture(scope="module")
def bench() -> BfclMultiTurnBase:
    return BfclMultiTurnBase()


@pytest.fixture(scope="module")
def entries() -> dict:
    return bfcl_entries()


@pytest.mark.parametrize("syntax,plan", CASES)
def test_native_probes_agree_through_the_llama_cpp_backend(bench, entries, syntax, plan):
    disagreements = []
    for task_id in TASKS:
        scripted = bfcl_students.student(bfcl_students.PLANS[plan], True)
        student = through_llama_cpp(scripted, syntax)
        official = play_bfcl(entries[task_id], student, True)
        ours = play_distillery(bench, task_id, student, True)
        got = (ours.valid, ours.error_type, ours.steps_per_turn)
        if got != (official.valid, official.error_type, official.steps_per_turn):
            disagreements.append((task_id, "verdict", got, official.valid, official.error_type))
        if ours.requests != official.requests:
            disagreements.append((task_id, "requests", len(ours.requests), len(official.requests)))
        if plan not in UNWRITABLE:
            direct = play_distillery(bench, task_id, scripted, True)
            if (direct.valid, direct.steps_per_turn) != (ours.valid, ours.steps_per_turn):
                disagreements.append((task_id, "vs scripted server", direct.valid, ours.valid))
    assert not disagreements, disagreements
