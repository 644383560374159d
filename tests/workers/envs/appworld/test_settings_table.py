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


def test_every_row_cites_a_source_or_says_it_has_none():
    """An authors' value cites their file and line (a file, for what it lacks), ACE's
    harness or the paper; a value of ours says it has no public source."""
    from distillery.conf.paper_sources import citations_in

    for experiment in paper_settings.experiments():
        for row in paper_settings.rows_of(experiment):
            where = f"{experiment} {row.student} {row.setting}: {row.source}"
            if row.authors == paper_settings.OURS:
                # No authors' config value: ours (said so) or what the paper states.
                assert row.source.startswith((paper_settings.NO_SOURCE, "ours", "paper ")), where
                continue
            cited = citations_in(row.source)
            assert cited or row.source.startswith("paper "), where
            for citation in cited:
                assert citation.line is not None or "(no " in row.source, where


def test_every_citation_is_recorded_and_reads_what_was_checked():
    """The cited text is pinned: against the vendored ACE harness always, against the
    authors' repository when a checkout is given ($DISTILLERY_AMD_REPO)."""
    from distillery.conf import paper_sources

    recorded = paper_sources.recorded()
    citations = paper_sources.table_citations()
    missing = sorted(set(citations) - set(recorded))
    assert not missing, (
        f"not recorded: {missing}; check the rows by hand, then "
        "DISTILLERY_AMD_REPO=<checkout> python -m distillery.conf.paper_sources --record"
    )
    checked = 0
    for key, citation in citations.items():
        root = paper_sources.checkout(citation.repository)
        if root is None:
            continue
        assert citation.digest(root) == recorded[key], f"{key} no longer reads what was checked"
        checked += 1
    assert checked >= sum(c.repository == paper_settings.ACE for c in citations.values())


def test_a_moved_line_is_caught(tmp_path):
    from distillery.conf import paper_sources

    (tmp_path / "a.jsonnet").write_text('{\n  "temperature": 0,\n  "top_k": 3,\n}\n')
    (cited,) = paper_sources.citations_in(f"{paper_settings.AMD} a.jsonnet:2 (the student)")
    assert (cited.path, cited.line) == ("a.jsonnet", 2)
    before = cited.digest(tmp_path)
    (tmp_path / "a.jsonnet").write_text('{\n  "top_k": 3,\n  "temperature": 0,\n}\n')
    assert cited.digest(tmp_path) != before


def test_the_ports_context_handling_is_in_the_table_and_a_change_is_caught():
    from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points
    from distillery.orchestrator.core.config import to_config

    rows = {(r.student, r.setting): r for r in paper_settings.rows_of("appworld_table1")}
    handling = {
        (student, entry): (
            rows[(student, f"context_trim.{entry}")].resolved,
            rows[(student, f"context_buffer.{entry}")].resolved,
        )
        for student in ("qwen3-4b", "gemma4-e4b")
        for entry in ("reasoning_bank_amd_appworld", "memp_amd_appworld", "sasm_amd_appworld")
    }
    assert handling == {
        ("qwen3-4b", "reasoning_bank_amd_appworld"): ("drop_oldest_steps", 256),
        ("qwen3-4b", "memp_amd_appworld"): ("blank_then_trim", 1536),
        ("qwen3-4b", "sasm_amd_appworld"): ("blank_then_trim", 256),
        ("gemma4-e4b", "reasoning_bank_amd_appworld"): ("drop_oldest_steps", 256),
        ("gemma4-e4b", "memp_amd_appworld"): ("blank_then_trim", 256),
        ("gemma4-e4b", "sasm_amd_appworld"): ("blank_then_trim", 256),
    }
    # The SASM entry without its trim, MemP's with ReasoningBank's buffer: both unrecorded.
    overrides = [
        "experiment=appworld_table1",
        "student=qwen3_4b",
        "seed=0",
        "method_catalog.sasm_amd_appworld.retrieval.context_trim=null",
        "method_catalog.memp_amd_appworld.retrieval.context_buffer=256",
    ]
    (_, composed), *_ = sweep_points(rewrite_role_overrides(overrides), multirun=False)
    changed = paper_settings._rows("appworld_table1", to_config(composed))
    unrecorded = {r.setting for r in changed if r.status == paper_settings.UNRECORDED}
    assert unrecorded == {"context_trim.sasm_amd_appworld", "context_buffer.memp_amd_appworld"}
