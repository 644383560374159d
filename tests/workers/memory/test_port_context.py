"""The MemP and SASM ports' AppWorld paper entries trim the student's history as the AMD
authors' own student loops did: AppWorld's blank_then_trim (old outputs blanked, then
messages dropped behind a marker) with the buffer their config for the student sets
(MemP: 1,536 for Qwen3-4B, else 256; SASM: 256). It is composed config (`--cfg job
--resolve` shows it, a value set on the command line is kept), the hooks pass it to the
loop, it is in those entries' evaluate identities only, and a choice the benchmark
cannot honour is refused before a run."""

from __future__ import annotations

import pytest

from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
from distillery.orchestrator.core.config import ConfigError, to_config
from distillery.workers.envs.appworld import react
from distillery.workers.envs.appworld.adapter import AppWorld
from distillery.workers.envs.base import Task
from distillery.workers.envs.conventions import ContextChoice, conventions_of
from distillery.workers.memory.port_context import context_choice
from distillery.workers.memory.registry import memory_method

PORTS = ("reasoning_bank_amd_appworld", "memp_amd_appworld", "sasm_amd_appworld")
# entry -> student -> (trim, buffer) the episodes use: the authors' for each.
EXPECTED = {
    "memp_amd_appworld": {
        "qwen3_4b": (react.BLANK_THEN_TRIM, 1536),  # MEMP_student_no_GT_qwen3_4b.jsonnet:47
        "gemma4_e4b": (react.BLANK_THEN_TRIM, 256),  # memp_student_react.py:35
    },
    "sasm_amd_appworld": {
        "qwen3_4b": (react.BLANK_THEN_TRIM, 256),  # sasm_evaluation_react.py:50
        "gemma4_e4b": (react.BLANK_THEN_TRIM, 256),
    },
    # The ReasoningBank port keeps AppWorld's own trim and buffer (its entry sets none).
    "reasoning_bank_amd_appworld": {
        "qwen3_4b": (react.DROP_OLDEST_STEPS, 256),
        "gemma4_e4b": (react.DROP_OLDEST_STEPS, 256),
    },
}


def _config(*overrides: str):
    args = rewrite_role_overrides(["experiment=appworld_table1", "seed=0", *overrides])
    (_, composed), *_ = sweep_points(args, multirun=False)
    return to_config(composed)


def _hooks(cfg, entry: str):
    spec = cfg.method_catalog[entry]
    settings = cfg.retrieval_for(entry)
    task = Task("t", "appworld", ("Do it.",), (), ())

    async def ask(messages):
        raise AssertionError("no model is asked while hooks are made")

    return memory_method(spec.kind).hooks(task, object(), settings, lambda source: True, ask)


@pytest.mark.parametrize("student", ["qwen3_4b", "gemma4_e4b"])
def test_the_paper_entries_trim_as_the_authors_students(student):
    cfg = _config(f"student={student}")
    appworld = conventions_of(AppWorld)
    for entry in PORTS:
        trim, buffer = EXPECTED[entry][student]
        hooks = _hooks(cfg, entry)  # as the loop reads them (agents/loop.py)
        chosen = appworld.with_context(getattr(hooks, "context_choice", None)).context_trim
        assert chosen is not None
        assert (chosen.name, chosen.buffer_tokens) == (trim, buffer), entry
        expected_trim = react.blank_then_trim if trim == react.BLANK_THEN_TRIM else None
        assert chosen.trim is (expected_trim or react.trim_to_budget), entry


def test_the_resolved_config_shows_it_and_a_value_set_is_kept():
    cfg = _config("student=qwen3_4b")
    memp = cfg.retrieval_for("memp_amd_appworld")
    assert context_choice(memp) == ContextChoice(react.BLANK_THEN_TRIM, 1536)
    assert cfg.method_catalog["memp_amd_appworld"].retrieval["context_buffer"] == 1536
    kept = _config(
        "student=qwen3_4b", "method_catalog.memp_amd_appworld.retrieval.context_buffer=256"
    )
    assert context_choice(kept.retrieval_for("memp_amd_appworld")) == ContextChoice(
        react.BLANK_THEN_TRIM, 256
    )
    hooks = _hooks(kept, "memp_amd_appworld")
    assert getattr(hooks, "context_choice", None) == ContextChoice(react.BLANK_THEN_TRIM, 256)


def test_the_choice_is_in_its_entries_read_identity_only():
    cfg = _config("student=qwen3_4b")
    for entry, kind in (("memp_amd_appworld", "memp_amd"), ("sasm_amd_appworld", "sasm")):
        method = memory_method(kind)
        identity = method.read_identity(cfg.retrieval_for(entry))
        assert identity["context_trim"] == "blank_then_trim"
        assert identity["context_buffer"] == (1536 if kind == "memp_amd" else 256)
        plain = method.read_identity(method.settings({}, {}, None))
        assert "context_trim" not in plain and "context_buffer" not in plain


def test_a_choice_the_benchmark_cannot_honour_is_refused_before_a_run():
    with pytest.raises(ConfigError, match="no context trim of 'appworld'"):
        _config(
            "student=qwen3_4b",
            "method_catalog.memp_amd_appworld.retrieval.context_trim=blank_first",
        )
    # BFCL sends its conversation whole: the AppWorld port's trim has no meaning there.
    with pytest.raises(ConfigError, match="does not trim its conversation"):
        to_config(
            sweep_points(
                rewrite_role_overrides(
                    ["experiment=bfcl_table1", "seed=0", "methods=[memp_amd_appworld]"]
                ),
                multirun=False,
            )[0][1]
        )
