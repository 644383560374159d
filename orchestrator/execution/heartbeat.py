"""Plain progress lines every 30 s when the output is not a terminal (a log file, a
pod's log, `| tee`), where progress bars are unreadable or invisible: for each stage
running, how many of its episodes are done, how they went, for how long."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TextIO

from distillery.orchestrator.stages.stage import StageKey
from distillery.workers.trajectories import EpisodeSummary

if TYPE_CHECKING:
    from distillery.orchestrator.execution.sweep import Sweep

HEARTBEAT_S = 30.0


def output_is_terminal() -> bool:
    """Both streams a run writes to are terminals (progress bars are then seen)."""
    return all(getattr(s, "isatty", lambda: False)() for s in (sys.stdout, sys.stderr))


@dataclass
class _Running:
    """One running stage, as the heartbeat tells it."""

    prefix: str
    started: float
    needed: int
    tally: Counter[str] = field(default_factory=Counter)


class Heartbeat:
    """A stage observer that prints `line()` every `interval_s` from a daemon thread,
    when `enabled` (default: the output is not a terminal): one line per running stage
    (several run at once), or one saying the sweep is between stages."""

    def __init__(
        self,
        sweep: Sweep,
        interval_s: float | None = None,
        stream: TextIO | None = None,
        enabled: bool | None = None,
    ) -> None:
        self.sweep = sweep
        self.interval_s = HEARTBEAT_S if interval_s is None else interval_s
        self.stream = stream
        self.enabled = (not output_is_terminal()) if enabled is None else enabled
        self.started = time.monotonic()
        self.running: dict[StageKey, _Running] = {}  # in the order they started
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the stage observer --------------------------------------------------------

    def stage_started(self, key: StageKey, prefix: str = "") -> None:
        done = self.sweep.ledger.episodes(key, verify=False)
        needed = self.sweep.graph.needs.get(key, set())
        tally = Counter(cached=len(needed & set(done)))
        self.running[key] = _Running(prefix, time.monotonic(), len(needed), tally)
        if self.enabled and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)
            self._thread.start()

    def episode(self, key: StageKey, summary: EpisodeSummary) -> None:
        running = self.running.get(key)
        if running is None:
            return
        tally = running.tally
        if summary.success is None:
            tally["infra"] += 1
        else:
            tally["success" if summary.success else "failed"] += 1
        tally["tokens"] += summary.tokens_in + summary.tokens_out

    def stage_finished(self, key: StageKey, ran: bool) -> None:
        self.running.pop(key, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- the lines -------------------------------------------------------------------

    def line(self) -> str:
        """What the sweep is doing now: a line per running stage."""
        now = time.monotonic()
        clock = time.strftime("%H:%M:%S")
        total = f"{_minutes(now - self.started)} elapsed"
        running = list(self.running.items())
        if not running:
            return f"[{clock}] distillery: between stages, {total}"
        lines = []
        for key, r in running:
            stage = self.sweep.graph.stages[key]
            head = f"[{clock}] distillery: {r.prefix} {self.sweep.line(stage)}".replace("  ", " ")
            if not stage.plays_episodes:
                lines.append(f"{head}: running for {_minutes(now - r.started)}, {total}")
                continue
            t = r.tally
            done = t["cached"] + t["success"] + t["failed"] + t["infra"]
            lines.append(
                f"{head}: {done}/{r.needed} episodes ({t['cached']} cached; success "
                f"{t['success']}, failed {t['failed']}, infra errors {t['infra']}; "
                f"{t['tokens']:,} tokens), stage {_minutes(now - r.started)}, {total}"
            )
        return "\n".join(lines)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            print(self.line(), file=self.stream or sys.stdout, flush=True)


def _minutes(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"
