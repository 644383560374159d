"""The paper experiments' settings table (conf/paper_settings.py): every resolved value
that changes an episode equals the authors' cited value or names a recorded deviation or
documented difference, and docs/fidelity/settings.md is what the configs resolve to."""

from __future__ import annotations

from pathlib import Path

import pytest

from distillery.conf import paper_settings

ROOT = Path(__file__).resolve().parents[4]


@pytest.fixture(scope="module")
def table() -> str:
    return paper_settings.render()


def test_no_resolved_value_differs_from_the_authors_unrecorded(table):
    unrecorded = [line for line in table.splitlines() if paper_settings.UNRECORDED in line]
    assert not unrecorded, "\n".join(unrecorded)


def test_the_page_is_generated_from_the_configs(table):
    page = (ROOT / "docs/fidelity/settings.md").read_text()
    assert page == table, (
        "stale: python -m distillery.conf.paper_settings --out docs/fidelity/settings.md"
    )


def test_the_paper_students_get_the_authors_requests(table):
    rows = {(r.student, r.setting): r for r in paper_settings.rows_of("appworld_table1")}
    gemma = {
        k: rows[("gemma4-e4b", f"student.{k}")].resolved
        for k in ("stop", "enable_thinking", "max_model_len")
    }
    assert gemma == {"stop": ["<end_of_turn>"], "enable_thinking": None, "max_model_len": 131072}
    assert rows[("qwen3-4b", "student.stop")].resolved == paper_settings.QWEN_STOP
    assert rows[("qwen3-4b", "prompt_file")].resolved == "ace_generator"
    assert rows[("qwen3-4b", "appworld.random_seed")].resolved == 123
    ts = {r.setting: r.resolved for r in paper_settings.rows_of("toolsandbox_table1")}
    assert ts["amd.query"] == "hidden_user_instruction" and ts["amd.fn_description"] is True


def test_a_changed_value_is_caught():
    row = paper_settings.Row("appworld_table1", "qwen3-4b", "appworld.random_seed", 100, 123, "x")
    assert row.status == paper_settings.UNRECORDED
