"""A slow observer (live MLflow runs logging a point) is told from a thread of its own:
the stages that tell it never wait for it, it sees each event once and in order, and a
sweep that waits for it stops waiting, with one line, when an event stays in its hands.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from distillery.orchestrator.execution.observers import QueuedObserver
from distillery.workers.trajectories import EpisodeSummary

WAIT_S = 60  # a deadline reached only on a bug


class Gated:
    """An observer whose `stage_finished` waits until the test opens `gate`."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.seen: list[tuple[str, Any]] = []
        self.threads: set[str] = set()

    def _saw(self, event: str, what: Any) -> None:
        self.seen.append((event, what))
        self.threads.add(threading.current_thread().name)

    def stage_started(self, key: str, prefix: str = "") -> None:
        self._saw("stage_started", key)

    def episode(self, key: str, summary: EpisodeSummary) -> None:
        self._saw("episode", summary.task_id)

    def stage_finished(self, key: str, ran: bool) -> None:
        self.gate.wait(WAIT_S)
        self._saw("stage_finished", key)

    def close(self) -> None:
        self._saw("close", None)


def _summary(task_id: str) -> EpisodeSummary:
    return EpisodeSummary(task_id, True, "done", 1, 1, 10, 2, 0.1, 1, None, None)


def test_a_slow_observer_never_holds_up_the_stages_that_tell_it():
    observer = Gated()
    queued = QueuedObserver(observer, "gated")
    queued.stage_started("a", "[1/2]")
    queued.stage_finished("a", True)  # in the observer's hands until the gate opens

    # Another stage's episodes land meanwhile: handing them over must not wait. Told
    # inline (as observers were), the first would wait for the gate until the deadline.
    def other_stage() -> None:
        queued.stage_started("b", "[2/2]")
        for i in range(200):
            queued.episode("b", _summary(f"t{i}"))
        queued.stage_finished("b", True)

    teller = threading.Thread(target=other_stage)
    teller.start()
    teller.join(WAIT_S)
    assert not teller.is_alive(), "handing an event over waited for the observer"
    assert ("episode", "t0") not in observer.seen  # still behind the gate

    observer.gate.set()
    queued.close()
    assert observer.seen == [
        ("stage_started", "a"),
        ("stage_finished", "a"),
        ("stage_started", "b"),
        *[("episode", f"t{i}") for i in range(200)],
        ("stage_finished", "b"),
        ("close", None),
    ]
    assert observer.threads == {"observer gated"}  # never the teller's thread


def test_a_stalled_observer_is_given_up_with_one_line_and_the_rest_dropped(caplog):
    observer = Gated()  # its gate is never opened while the sweep waits
    queued = QueuedObserver(observer, "live MLflow runs", stall_s=0.2)
    queued.stage_finished("a", True)
    queued.episode("b", _summary("t1"))
    with caplog.at_level(logging.WARNING):
        assert queued.drain() is False
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert line.startswith("live MLflow runs: stopped waiting after 0 s for 'stage_finished'")
    assert "the next run of the same command logs what was not" in line
    assert queued.drain() is False  # given up once: no second wait
    observer.gate.set()  # the event in hand ends; the thread drops the rest and stops
    queued.close()
    queued._thread.join(WAIT_S)
    assert observer.seen == [("stage_finished", "a")]


def test_an_observer_that_raises_is_a_warning_and_the_next_events_are_handled(caplog):
    class Failing(Gated):
        def episode(self, key: str, summary: EpisodeSummary) -> None:
            if summary.task_id == "t1":
                raise RuntimeError("tracking server said 503")
            super().episode(key, summary)

    observer = Failing()
    queued = QueuedObserver(observer, "flaky")
    with caplog.at_level(logging.WARNING):
        for task in ("t0", "t1", "t2"):
            queued.episode("a", _summary(task))
        assert queued.drain() is True
    assert observer.seen == [("episode", "t0"), ("episode", "t2")]
    assert any("503" in r.getMessage() for r in caplog.records)
    queued.close()


def test_a_second_ctrl_c_while_points_are_logged_skips_them_and_still_closes_the_runs(
    capsys,
):
    """The sweep was stopped while a point was being logged (Ctrl-C): the driver waits
    for it, saying so; a second Ctrl-C (a real one: KeyboardInterrupt in the main
    thread) ends the wait, the events left are dropped, and the open runs are closed."""
    import _thread
    import signal

    from distillery.orchestrator.tracking.live_runs import LiveRuns

    observer = Gated()  # logging point "a" takes until the gate opens
    queued = QueuedObserver(observer, "live MLflow runs")
    queued.stage_finished("a", True)
    queued.episode("b", _summary("t1"))
    closed: list[bool] = []

    class Runs(LiveRuns):
        def __init__(self) -> None:  # only what `stop` uses
            pass

        def abort(self, interrupted: bool) -> None:
            closed.append(interrupted)

    # Ctrl-C raises KeyboardInterrupt (Python's own handler), also where this test runs
    # with SIGINT ignored (a job started in the background: interrupt_main does nothing).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    second = threading.Timer(0.5, _thread.interrupt_main)
    second.start()
    try:
        Runs().stop(queued, interrupted=True)
    finally:
        second.cancel()
        signal.signal(signal.SIGINT, previous)
    assert closed == [True]
    err = capsys.readouterr().err
    assert "logging the points that ended before the stop (Ctrl-C again to skip them)" in err
    assert "skipped; the next run of the same command logs those points" in err
    observer.gate.set()  # the point in hand ends; the episode behind it is dropped
    queued.close()
    queued._thread.join(WAIT_S)
    assert observer.seen == [("stage_finished", "a")]
