"""The report says when repeated runs (one cell over several seeds) are identical."""

from __future__ import annotations

import pandas as pd

from distillery.orchestrator.report.repeats import repeat_notes

KEYS = ("method", "student", "protocol", "benchmark", "role")


def _frames(outcomes: dict[int, list[bool]], temperature: float):
    points = pd.DataFrame(
        [
            {
                "point_id": f"p{seed}",
                "method": "amd_wf_st_fn",
                "student": "qwen3-4b",
                "protocol": "main",
                "benchmark": "bfcl",
                "role": "student",
                "seed": seed,
                "temperature": temperature,
            }
            for seed in outcomes
        ]
    )
    episodes = pd.DataFrame(
        [
            {"point_id": f"p{seed}", "task_id": f"t{i}", "success": ok}
            for seed, oks in outcomes.items()
            for i, ok in enumerate(oks)
        ]
    )
    return points, episodes


def test_identical_greedy_runs_are_named_with_the_reason():
    points, episodes = _frames({s: [True, False, True] for s in range(5)}, 0.0)
    (note,) = repeat_notes(points, episodes, KEYS)
    assert "the 5 runs (seeds 0, 1, 2, 3, 4) are identical task by task" in note
    assert "temperature 0" in note and "student.temperature" in note


def test_identical_sampled_runs_are_named_without_blaming_the_temperature():
    points, episodes = _frames({0: [True, False], 1: [True, False]}, 0.7)
    (note,) = repeat_notes(points, episodes, KEYS)
    assert "identical task by task" in note and "temperature 0" not in note


def test_differing_sampled_runs_need_no_note_and_one_seed_is_no_repeat():
    points, episodes = _frames({0: [True, False], 1: [False, False]}, 0.7)
    assert repeat_notes(points, episodes, KEYS) == []
    points, episodes = _frames({0: [True, False]}, 0.0)
    assert repeat_notes(points, episodes, KEYS) == []


def test_greedy_runs_that_differ_are_put_down_to_server_nondeterminism():
    points, episodes = _frames({0: [True, False], 1: [False, False]}, 0.0)
    (note,) = repeat_notes(points, episodes, KEYS)
    assert "server nondeterminism" in note
