"""What a method's own bound left out of the memory its student read, next to the cell
it concerns: ACE's playbook cut at `playbook_max_chars` (`bullets_cut`) and ExpeL's
examples skipped over `max_example_chars` (`examples_too_long`), marked in Table 1's
cell (both layouts), carried as numbers in the CSVs and said in a note."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from distillery.orchestrator.report import build_report
from distillery.orchestrator.report.memory_bounds import MARK, stage_bounds
from distillery.workers.storage import Location
from distillery.workers.trajectories import write_episode
from tests.orchestrator.report import test_groups
from tests.orchestrator.report.test_groups import write_sweep
from tests.support.records import episode_record

T, F = True, False
ACE = ("ace", T, 1, F, {"test_normal": [T, F, T, F], "test_challenge": [F, F, F, F]}, 1)


def _write(root, stage, logs):
    folder = Location.of(str(root / "stages" / "evaluate" / stage[:16] / "episodes"))
    for task, log in logs.items():
        write_episode(folder, episode_record(task, True, extra_json=json.dumps(log)))


@pytest.fixture
def report(tmp_path, monkeypatch):
    monkeypatch.setitem(test_groups.METHODS, "ace", ACE)
    root = tmp_path / "runs"
    sweep = write_sweep(root, True)
    # ACE on test_normal: two of four plays read a cut playbook (5 and 7 bullets out).
    _write(root, "Sace-test_normal", {
        "t1": {"bullets_cut": 5, "playbook_cut": 1}, "t2": {"bullets_cut": 0},
        "t3": {"bullets_cut": 7, "playbook_cut": 1}, "t4": {},
    })  # fmt: skip
    # ExpeL on test_normal: one play skipped 3 examples as too long.
    _write(root, "Sexpel-test_normal", {"t1": {"examples_too_long": 3}, "t2": {}})
    # AgentBrew's episodes log nothing of the kind: no marker.
    _write(root, "Sagentbrew-test_normal", {"t1": {"shown": ["note:a"]}})
    return build_report(sweep, log_to_mlflow=False)


def test_the_cut_is_marked_next_to_aces_cell_in_table1(report):
    # Table 1 (a row per method and split) and its grouped layout (a column per split).
    table1 = report.views["table1"]
    normal = table1[table1["benchmark_variant"] == "–"].set_index("method")["appworld"]
    challenge = table1[table1["benchmark_variant"] != "–"].set_index("method")["appworld"]
    groups = report.views["table1_groups"].set_index("Method")
    for ace, expel, others in (
        (normal["ace"], normal["expel"], [challenge["ace"], normal["agentbrew"]]),
        (groups.loc["ace", "appworld"], groups.loc["expel", "appworld"],
         [groups.loc["ace", "appworld (split=test_challenge)"], groups.loc["agentbrew", "appworld"],
          groups.loc["zero_shot", "appworld"]]),
    ):  # fmt: skip
        assert ace.startswith("50.0% [")  # the rate first, as every cell
        assert f"{MARK} 2/4 episodes: playbook cut (12 bullets left out)" in ace
        assert f"{MARK} 1/2 episodes: 3 examples skipped as too long" in expel
        # The other split read nothing cut, and nor did the other methods.
        assert all(MARK not in cell for cell in others)
    md = (report.out_dir / "report.md").read_text()
    assert "playbook cut (12 bullets left out)" in md


def test_the_numbers_go_to_the_csv_and_a_note(report):
    cells = pd.read_csv(report.out_dir / "cells.csv")
    normal = cells["benchmark_variant"].isna()
    ace = cells[(cells["method"] == "ace") & normal].iloc[0]
    assert (ace["bound_episodes"], ace["bullets_cut"], ace["examples_too_long"]) == (2, 12, 0)
    expel = cells[(cells["method"] == "expel") & normal].iloc[0]
    assert (expel["bound_episodes"], expel["examples_too_long"]) == (1, 3)
    assert int(cells["bullets_cut"].sum()) == 12  # nothing elsewhere, 0 not blank
    table1 = pd.read_csv(report.out_dir / "table1.csv")
    assert int(table1.loc[table1["method"] == "ace", "bullets_cut"].max()) == 12
    said = [n for n in report.notes if n.startswith("ace on appworld")]
    assert len(said) == 1 and "playbook_max_chars" in said[0]


def test_stage_bounds_counts_episodes_and_entries():
    records = [
        episode_record("a", True, extra_json=json.dumps({"bullets_cut": 2})),
        episode_record(
            "b", True, extra_json=json.dumps({"bullets_cut": 1, "examples_too_long": 4})
        ),
        episode_record("c", True, extra_json=None),
    ]
    assert stage_bounds(records) == {"bound_episodes": 2, "bullets_cut": 3, "examples_too_long": 4}
