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


def test_usage_counts_each_use_and_whether_that_episode_succeeded():
    records = [
        _record("t1", True, ["note:a", "note:b"]),
        _record("t2", False, ["note:a"]),
        _record("t2", True, ["note:a", "note:a"]),  # the same task again (a seed): a use
        _record("t3", None, ["note:a"]),  # unscored: nowhere
        _record("t4", False, ["note:b"]),
    ]
    # note:a: shown in 3 scored episodes, 2 of them succeeded (per use: 2/3; per task,
    # "solved by any seed", would have said 2 of 2).
    assert note_usage(records) == [
        {"note": "note:a", "uses": 3, "succeeded": 2, "success_rate": 2 / 3, "tasks": 2},
        {"note": "note:b", "uses": 2, "succeeded": 1, "success_rate": 0.5, "tasks": 2},
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
    # Both splits' agentbrew points read the fixture's one folder (their stage names
    # share the 16-character folder name): each of the 3 episodes that showed note:a is
    # two uses here, all succeeded; the distinct tasks stay 3.
    assert rows[("agentbrew", "note:a")]["uses"] == 6
    assert rows[("agentbrew", "note:a")]["succeeded"] == 6
    assert rows[("agentbrew", "note:a")]["tasks"] == 3
    assert rows[("agentbrew", "note:b")]["tasks"] == 1
    assert {r["seed"] for r in table.to_dict("records")} == {"pooled"}  # one seed
    assert {m for m, _ in rows} == {"agentbrew"}  # methods that record no notes: no rows
    assert (report.out_dir / "note_usage.csv").exists()
    assert "Per-note usage at test time" in (report.out_dir / "report.md").read_text()


def test_a_log_whose_shown_is_not_a_list_of_ids_counts_nowhere():
    """Another method's episodes may log `shown` as a count (the toy plugin does): not
    notes, so no rows, and the report still builds."""
    records = [_record("t1", True, 2), _record("t2", False, None)]
    assert note_usage(records) == []


def test_usage_per_seed_and_pooled(tmp_path, monkeypatch):
    """Two seeds of one cell: a row for the seeds pooled, then one per seed."""
    import pandas as pd

    from distillery.orchestrator.report import note_usage as module
    from distillery.orchestrator.report.load import SweepData

    points = pd.DataFrame(
        [
            {
                "method": "agentbrew",
                "benchmark": "gsm8k",
                "student": "s",
                "seed": seed,
                "role": "student",
                "stage": f"stage-{seed}",
            }  # fmt: skip
            for seed in (0, 1)
        ]
    )
    episodes = {
        "stage-0": [_record("t1", True, ["note:a"]), _record("t2", False, ["note:a"])],
        "stage-1": [_record("t1", True, ["note:a"])],
    }
    data = SweepData(Location.of(str(tmp_path)), {}, points, pd.DataFrame(), pd.DataFrame())
    (table,), _ = module.note_usage_table(data, episodes)
    got = [(r["seed"], r["uses"], r["succeeded"]) for r in table.numbers.to_dict("records")]
    assert got == [("pooled", 3, 2), ("0", 2, 1), ("1", 1, 1)]
