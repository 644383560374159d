"""What watches a sweep run: told when each stage starts and ends and when each of its
episodes lands (live MLflow runs, the heartbeat). An observer's trouble (a tracking
server that stopped answering) is a warning, never the end of the sweep.

A slow observer (live MLflow runs: a point's run, table and traces are logged when its
stage ends, seconds to minutes) is told from a thread of its own (`QueuedObserver`):
the stages' threads hand it their events and go on dispatching episodes."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable
from typing import Any, Protocol

from distillery.orchestrator.stages.stage import StageKey
from distillery.workers.trajectories import EpisodeSummary

log = logging.getLogger(__name__)


class StageObserver(Protocol):
    def stage_started(self, key: StageKey, prefix: str) -> None:
        """`key` starts (`prefix`: its place in the sweep, e.g. `[3/7]`)."""

    def episode(self, key: StageKey, summary: EpisodeSummary) -> None:
        """An episode of `key` finished and is in the ledger."""

    def stage_finished(self, key: StageKey, ran: bool) -> None:
        """`key` ended (`ran`: False when the ledger had all of it)."""

    # Optional: `def close(self) -> None`, when the sweep's stages are over (or stopped).


def notify(observers: Iterable[StageObserver], event: str, *args: Any) -> None:
    for observer in observers:
        method = getattr(observer, event, None)  # `close` and others are optional
        if method is None:
            continue
        try:
            method(*args)
        except Exception as exc:  # noqa: BLE001 - watching must not stop the work
            log.warning("%s.%s failed: %s", type(observer).__name__, event, exc, exc_info=True)


# Ours: how long one event may be in an observer's hands before the sweep stops waiting
# for it (its end, an error). Longer than MLflow's client takes to give up on one request
# (MLFLOW_HTTP_REQUEST_TIMEOUT 120 s, retried with backoff), so that a tracking server
# that comes back is waited for, and a point with thousands of traces is logged whole.
STALL_S = 900.0

_MARK = "__mark__"  # `drain`: every event handed over before it has been handled
_STOP = "__stop__"


class QueuedObserver:
    """`observer`, told from a thread of its own in the order the events came (a stage's
    events come from its one thread, so each stage's are in order). Handing an event
    over never waits; `drain` and `close` wait until what was handed over is handled,
    giving up with one line when one event has been in hand for `stall_s`.

    What it holds is what has not been handled yet: each episode's summary, which the
    stage's dispatcher holds anyway until the stage ends, and a few stage events."""

    def __init__(self, observer: StageObserver, name: str, stall_s: float = STALL_S) -> None:
        self.observer = observer
        self.name = name
        self.stall_s = stall_s
        self._events: queue.SimpleQueue[tuple[str, tuple[Any, ...]]] = queue.SimpleQueue()
        self._in_hand: tuple[str, float] | None = None  # the event being handled, since
        self._given_up = False
        self._thread = threading.Thread(target=self._run, name=f"observer {name}", daemon=True)
        self._thread.start()

    # -- the stage observer: each hands the event over -----------------------------

    def stage_started(self, key: StageKey, prefix: str = "") -> None:
        self._events.put(("stage_started", (key, prefix)))

    def episode(self, key: StageKey, summary: EpisodeSummary) -> None:
        self._events.put(("episode", (key, summary)))

    def stage_finished(self, key: StageKey, ran: bool) -> None:
        self._events.put(("stage_finished", (key, ran)))

    def close(self) -> None:
        """Handle what is left, then the observer's own `close`; the thread ends."""
        self._events.put(("close", ()))
        self.drain()
        self._events.put((_STOP, ()))

    # -- waiting -------------------------------------------------------------------

    def drain(self) -> bool:
        """Wait until every event handed over so far is handled: True; False (and one
        warning saying what it waited for) when one event was in hand for `stall_s`, or
        the thread is gone. Past that, the events left are dropped: the ledger has every
        episode, and the next run of the same command logs what was not."""
        if self._given_up:
            return False
        handled = threading.Event()
        self._events.put((_MARK, (handled,)))
        while not handled.wait(0.5):
            in_hand = self._in_hand
            stalled = in_hand is not None and time.monotonic() - in_hand[1] > self.stall_s
            if stalled or not self._thread.is_alive():
                self._given_up = True
                what = f"'{in_hand[0]}'" if in_hand else "its events"
                log.warning(
                    "%s: stopped waiting after %.0f s for %s to be handled; the events "
                    "left are dropped (the ledger has every episode: the next run of the "
                    "same command logs what was not)",
                    self.name,
                    self.stall_s,
                    what,
                )
                return False
        return True

    def pending(self) -> bool:
        """Whether events are handed over and not handled yet."""
        return self._in_hand is not None or not self._events.empty()

    def give_up(self) -> None:
        """Stop handling: the events not yet handled are dropped (the one in hand ends
        on its own). For a sweep stopped twice (a second Ctrl-C while `drain` waits)."""
        self._given_up = True

    def _run(self) -> None:
        while True:
            event, args = self._events.get()
            if event == _STOP:
                return
            if event == _MARK:
                args[0].set()
                continue
            if self._given_up:
                continue
            self._in_hand = (event, time.monotonic())
            try:
                notify([self.observer], event, *args)
            except BaseException as exc:  # noqa: BLE001 - this thread must keep draining
                log.warning("%s.%s failed: %s", self.name, event, exc, exc_info=True)
            finally:
                self._in_hand = None
