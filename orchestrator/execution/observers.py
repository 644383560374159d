"""What watches a sweep run: told when each stage starts and ends and when each of its
episodes lands (live MLflow runs, the heartbeat). An observer's trouble (a tracking
server that stopped answering) is a warning, never the end of the sweep."""

from __future__ import annotations

import logging
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
