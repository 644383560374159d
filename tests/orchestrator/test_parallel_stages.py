"""Stages of two students run at once on local Ray, through the real sweep: each
student's server answers only once the other's has been asked too (each is gated on
the other's first request), so a sweep that ran one stage at a time would leave the
first student's requests waiting until they time out, and its episodes unscored."""

from __future__ import annotations

import pytest

from distillery.orchestrator.driver.run import run_sweep
from distillery.orchestrator.stages.stage import StageKey
from distillery.orchestrator.state.ledger import Ledger
from distillery.testing.scripted_server import run_stub_server
from tests.support.sweep_config import scripted_student as _student
from tests.support.sweep_config import sweep_config as _config

pytestmark = pytest.mark.slow

SCRIPT = "distillery.testing.bfcl_scripts:replay_native"


def test_two_students_zero_shot_stages_run_at_the_same_time(tmp_path, ray_local):
    first, second = tmp_path / "first-asked", tmp_path / "second-asked"
    with (
        run_stub_server(script=SCRIPT, gate=second, arrived=first) as url_a,
        run_stub_server(script=SCRIPT, gate=first, arrived=second) as url_b,
    ):
        configs = [
            _config(
                tmp_path,
                "benchmark.limit=2",
                "methods=[zero_shot]",
                *_student(url, "native"),
                f"student.name=student-{name}",
                f"student.model=scripted-{name}",  # another model: its own stage
                # Bounds the wait of a request whose server waits for the other: reached
                # only when the stages do not overlap (the test then fails, not hangs).
                "student.request_timeout_s=120",
                "agent.episode_retries=0",
            )
            for name, url in (("a", url_a), ("b", url_b))
        ]
        result = run_sweep(configs, progress=False)

    assert result.stages_run == 2
    for point in result.points:
        (method,) = point.methods
        assert [s.success for s in method.summaries] == [True, True], [
            s.error_message for s in method.summaries
        ]
    # What the ledger says of their runs: their intervals overlap.
    ledger = Ledger(configs[0].output_dir)
    spans = []
    for point in result.points:
        kind, short = point.methods[0].stage.split(":")
        (run,) = ledger.runs(StageKey(kind, short))  # the folder is named by the short key
        spans.append((run.at - run.wall_s, run.at))
    (a_start, a_end), (b_start, b_end) = spans
    assert a_start < b_end and b_start < a_end
