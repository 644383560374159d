"""The ledger's typed records: bank outputs and run records are validated when written
and when read, and records written by earlier versions still read (resume)."""

from __future__ import annotations

import logging

import pytest

from distillery.orchestrator.stages.stage import StageKey
from distillery.orchestrator.state.ledger import BankOutput, Ledger, RunRecord

KEY = StageKey("build", "ab" * 32)


def _write(ledger: Ledger, data) -> None:
    (ledger.stage_dir(KEY) / "output.json").write_json(data)


def test_bank_outputs_round_trip(tmp_path):
    ledger = Ledger(tmp_path)
    output = BankOutput("b" * 64, {"wf": 3, "embedded_chars": 120}, {"wf.requests": 3})
    ledger.record_output(KEY, output)
    assert ledger.output(KEY) == output
    assert (ledger.stage_dir(KEY) / "output.json").read_json() == {
        "bank_id": "b" * 64,
        "counts": {"wf": 3, "embedded_chars": 120},
        "stats": {"wf.requests": 3},
        "reused": False,
    }


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        # a bank built by the previous version: no `reused`
        (
            {"bank_id": "x", "counts": {"wf": 2, "trajectories": 4}, "stats": {"wf.requests": 2}},
            BankOutput("x", {"wf": 2, "trajectories": 4}, {"wf.requests": 2}, reused=False),
        ),
        # a bank it found in the store: no `stats`
        (
            {"bank_id": "y", "counts": {"wf": 2}, "reused": True},
            BankOutput("y", {"wf": 2}, {}, reused=True),
        ),
        ({"bank_id": "z"}, BankOutput("z")),
    ],
)
def test_bank_outputs_of_the_previous_version_still_read(tmp_path, written, expected):
    ledger = Ledger(tmp_path)
    _write(ledger, written)
    assert ledger.output(KEY) == expected


@pytest.mark.parametrize(
    "written",
    [
        [1, 2],
        {"counts": {"wf": 2}},
        {"bank_id": 7},
        {"bank_id": ""},
        {"bank_id": "x", "counts": {"wf": "two"}},
        {"bank_id": "x", "counts": {"wf": True}},
        {"bank_id": "x", "counts": [["wf", 2]]},
        {"bank_id": "x", "stats": {"wf.requests": None}},
        {"bank_id": "x", "reused": "yes"},
    ],
)
def test_a_malformed_bank_output_is_reported_and_rebuilt(tmp_path, caplog, written):
    ledger = Ledger(tmp_path)
    _write(ledger, written)
    with caplog.at_level(logging.WARNING):
        assert ledger.output(KEY) is None
    assert "output.json is damaged; the stage will be rebuilt" in caplog.text


def test_a_bank_output_is_validated_before_it_is_written():
    with pytest.raises(TypeError, match="counts and stats map names to numbers"):
        BankOutput("x", {"wf": "2"})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="needs a bank id"):
        BankOutput("")


def test_run_records_are_typed_and_old_ones_still_read(tmp_path, caplog):
    ledger = Ledger(tmp_path)
    ledger.record_run(KEY, 2.0, 8.0)
    runs_dir = ledger.stage_dir(KEY) / "runs"
    # earlier versions could write extra fields; an integer is a number too
    (runs_dir / "old.json").write_json({"wall_s": 1, "gpu_s": 0.0, "at": 5.0, "host": "n1"})
    (runs_dir / "bad.json").write_json({"wall_s": "long", "gpu_s": 0.0, "at": 1.0})
    with caplog.at_level(logging.WARNING):
        runs = ledger.runs(KEY)
    assert sorted((r.wall_s, r.gpu_s) for r in runs) == [(1.0, 0.0), (2.0, 8.0)]
    assert all(isinstance(r, RunRecord) for r in runs)
    assert "ignoring malformed run record" in caplog.text and "bad.json" in caplog.text
