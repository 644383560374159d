"""The report's per-note usage table (the AgentBrew paper's §3.5: how often a note is
retrieved and its success rate when applied), from the notes each episode recorded it
was shown, pooled per method × benchmark × student; also a CSV logged with the report."""

from __future__ import annotations

import json

from distillery.orchestrator.report import build_report
from distillery.workers.memory.agentbrew.usage import note_usage
from distillery.workers.storage import Location
from distillery.workers.trajectories import write_episode
from tests.orchestrator.report.test_groups import write_sweep
from tests.support.records import episode_record

# agentbrew on test_normal plays t1..t4 as [T T T T] (test_groups.METHODS).
SHOWN = {"t1": ["note:a", "note:b"], "t2": ["note:a"], "t3": [], "t4": ["note:a"]}


def _record(task, success, shown):
    return episode_record(task, success, extra_json=json.dumps({"shown": shown}))


def test_usage_counts_distinct_tasks_and_successes_when_shown():
    records = [
        _record("t1", True, ["note:a", "note:b"]),
        _record("t2", False, ["note:a"]),
        _record("t2", True, ["note:a"]),  # the same task again (a seed): counted once
        _record("t3", None, ["note:a"]),  # unscored: nowhere
        _record("t4", False, ["note:b"]),
    ]
    assert note_usage(records) == [
        {"note": "note:a", "tasks": 2, "solved": 2, "success_rate": 1.0},
        {"note": "note:b", "tasks": 2, "solved": 1, "success_rate": 0.5},
    ]


def test_the_report_has_a_note_usage_table(tmp_path):
    root = tmp_path / "runs"
    sweep = write_sweep(root, True)
    stage = "Sagentbrew-test_normal"
    folder = Location.of(str(root / "stages" / "evaluate" / stage[:16] / "episodes"))
    for task, shown in SHOWN.items():
        write_episode(folder, _record(task, True, shown))
    report = build_report(sweep, log_to_mlflow=False)
    table = report.tables["note_usage"]
    rows = {(r["method"], r["note"]): r for r in table.to_dict("records")}
    assert (
        rows[("agentbrew", "note:a")]["tasks"] == 3 and rows[("agentbrew", "note:a")]["solved"] == 3
    )
    assert rows[("agentbrew", "note:b")]["tasks"] == 1
    assert {m for m, _ in rows} == {"agentbrew"}  # methods that record no notes: no rows
    assert (report.out_dir / "note_usage.csv").exists()
    assert "Per-note usage at test time" in (report.out_dir / "report.md").read_text()


def test_a_log_whose_shown_is_not_a_list_of_ids_counts_nowhere():
    """Another method's episodes may log `shown` as a count (the toy plugin does): not
    notes, so no rows, and the report still builds."""
    records = [_record("t1", True, 2), _record("t2", False, None)]
    assert note_usage(records) == []
