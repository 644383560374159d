"""GPU time told twice: held (a model's servers were up) and serving (they had at least
one request of a stage in flight). A server is paid for while it is up; the difference
is GPU time the sweep kept idle (a model waiting for its next stage, a stage's tail).

`ServingClock` is told, by each stage's thread, how many of the stage's episodes (or
bank-build and curator calls) are in flight on a model's servers now; it integrates
the time with any in flight per server, and each stage's share of it (its in-flight
over all in flight on that server, times the server's GPUs).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class ModelGpuTime:
    """One model's GPU time in one sweep invocation."""

    model: str
    gpus: float
    held_s: float  # wall seconds its servers were up
    serving_s: float  # of those, seconds with at least one request in flight

    @property
    def held_gpu_h(self) -> float:
        return self.gpus * self.held_s / 3600.0

    @property
    def serving_gpu_h(self) -> float:
        return self.gpus * self.serving_s / 3600.0

    @property
    def busy(self) -> float | None:
        """Serving over held (None: never up)."""
        return self.serving_s / self.held_s if self.held_s > 0 else None

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "held_gpu_h": self.held_gpu_h, "serving_gpu_h": self.serving_gpu_h}


class ServingClock:
    """In-flight counts per (server, stage), integrated over time (thread-safe)."""

    def __init__(self, gpus_of: Callable[[str], float], clock: Callable[[], float] = time.time):
        self._gpus_of = gpus_of
        self._clock = clock
        self._lock = threading.Lock()
        self._in_flight: dict[str, Counter[Any]] = {}  # server -> stage -> in flight
        self._since: dict[str, float] = {}  # server -> when its counts last changed
        self._serving_s: dict[str, float] = {}
        self._stage_gpu_s: dict[Any, float] = {}

    def set(self, server: str, stage: Any, n: int) -> None:
        """`stage` has `n` requests in flight on `server` now."""
        with self._lock:
            self._advance(server, self._clock())
            self._in_flight.setdefault(server, Counter())[stage] = max(0, n)

    def add(self, server: str, stage: Any, delta: int) -> None:
        with self._lock:
            self._advance(server, self._clock())
            counts = self._in_flight.setdefault(server, Counter())
            counts[stage] = max(0, counts[stage] + delta)

    @contextmanager
    def serving(self, server: str, stage: Any) -> Iterator[None]:
        """One request (or a call sequence) of `stage` in flight for the block."""
        self.add(server, stage, 1)
        try:
            yield
        finally:
            self.add(server, stage, -1)

    def serving_s(self, server: str) -> float:
        with self._lock:
            self._advance(server, self._clock())
            return self._serving_s.get(server, 0.0)

    def stage_gpu_s(self, stage: Any) -> float:
        """The stage's share of the serving GPU-seconds of every server it used."""
        with self._lock:
            now = self._clock()
            for server in list(self._in_flight):
                self._advance(server, now)
            return self._stage_gpu_s.get(stage, 0.0)

    def _advance(self, server: str, now: float) -> None:
        since = self._since.get(server, now)
        self._since[server] = now
        counts = self._in_flight.get(server)
        total = sum(counts.values()) if counts else 0
        if total <= 0 or now <= since:
            return
        elapsed = now - since
        self._serving_s[server] = self._serving_s.get(server, 0.0) + elapsed
        gpus = self._gpus_of(server)
        for stage, n in counts.items():  # type: ignore[union-attr]
            if n > 0:
                share = elapsed * gpus * n / total
                self._stage_gpu_s[stage] = self._stage_gpu_s.get(stage, 0.0) + share
