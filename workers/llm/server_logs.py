"""A model server's log, copied to the sweep's output root as it is written.

A vLLM replica runs on a GPU pod whose disk goes with the pod; its log is what tells
why it died. So the server's local log file (already redacted line by line) is copied
to `<output root>/sweeps/<id>/logs/servers/` on whatever filesystem the root is on (an
object store included) every `interval_s` while it grows, and once more when the
server stops. An object store cannot append, so the copy is cut into segments of at
most `segment_bytes`: finished segments are written once, only the last one is
rewritten while it grows (`<name>.000.log`, `<name>.001.log`, ... read in order).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from distillery.workers.storage import Location

log = logging.getLogger(__name__)
# Ours: a few MiB rewritten every few seconds is cheap for any store; a chatty vLLM
# (a line per request) fills a segment in minutes, and older segments stay put.
SEGMENT_BYTES = 8 * 1024 * 1024
INTERVAL_S = 5.0


class LogShipper:
    """Copies `local` to `remote/<local name without .log>.<NNN>.log` segments."""

    def __init__(
        self,
        local: Path,
        remote: Location,
        interval_s: float = INTERVAL_S,
        segment_bytes: int = SEGMENT_BYTES,
    ) -> None:
        self.local = local
        self.remote = remote
        self.interval_s = interval_s
        self.segment_bytes = segment_bytes
        self.stem = local.name.removesuffix(".log")
        self._shipped = 0  # bytes of the local file copied in full segments or as the tail
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def segment(self, index: int) -> Location:
        return self.remote / f"{self.stem}.{index:03d}.log"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="server-log-shipper", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and copy what was written last."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=60)
        self.ship_once()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.ship_once()

    def ship_once(self) -> None:
        """Copy what the file gained since the last call (never raises: a store hiccup
        is retried at the next call)."""
        with self._lock:
            try:
                self._ship()
            except Exception as exc:
                log.warning("server log %s: copy to %s failed: %s", self.local, self.remote, exc)

    def _ship(self) -> None:
        try:
            size = self.local.stat().st_size
        except FileNotFoundError:
            return
        if size == self._shipped:
            return
        with self.local.open("rb") as f:
            # Rewrite the open segment (from its start) and write any that follow.
            start = (self._shipped // self.segment_bytes) * self.segment_bytes
            f.seek(start)
            index = start // self.segment_bytes
            while start < size:
                data = f.read(min(self.segment_bytes, size - start))
                if not data:
                    break
                self.segment(index).write_bytes(data)
                start += len(data)
                index += 1
        self._shipped = start

    def shipped_text(self) -> str:
        """The copy as it stands, segments joined (for tests and `--follow`-like use)."""
        parts = []
        index = 0
        while self.segment(index).exists():
            parts.append(self.segment(index).read_bytes())
            index += 1
        return b"".join(parts).decode(errors="replace")
