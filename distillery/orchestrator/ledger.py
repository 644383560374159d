"""The ledger: what every stage has produced, under the output root, checksummed.

    <root>/stages/<kind>/<key16>/stage.json          identity, upstream, label
    <root>/stages/<kind>/<key16>/episodes/<task>.parquet
    <root>/stages/<kind>/<key16>/done/<task>.json    one per finished episode
    <root>/stages/<kind>/<key16>/output.json         build/render: the bank it wrote
    <root>/stages/<kind>/<key16>/runs/<stamp>.json   wall time and GPU-seconds per run

An episode counts as finished only when its `done` record exists AND its Parquet file
still has the checksum the record names: a file cut short by a crash or edited since
is detected and the task is played again. Records are one small file each (no
appends), so the ledger works the same on a local disk and on object stores.
Infrastructure failures are recorded too (they are results of a run) but never count
as finished: a re-run retries them.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import asdict, fields
from typing import Any

from distillery.orchestrator.stages import Stage, StageKey
from distillery.workers.episodes import EpisodeSummary
from distillery.workers.storage import Location, sha256
from distillery.workers.trajectories import episode_file_name

log = logging.getLogger(__name__)
_SUMMARY_FIELDS = {f.name for f in fields(EpisodeSummary)}


class Ledger:
    def __init__(self, root: str | Location) -> None:
        self.root = root if isinstance(root, Location) else Location.of(root)
        # (file, sha256) pairs already found intact: planning, playing and building
        # all ask, and on an object store every check is a download.
        self._intact_files: set[tuple[str, str]] = set()

    # -- places -------------------------------------------------------------------

    def stage_dir(self, key: StageKey) -> Location:
        return self.root / "stages" / key.kind / key.short

    def episodes_dir(self, key: StageKey) -> Location:
        return self.stage_dir(key) / "episodes"

    def sweep_dir(self, sweep_id: str) -> Location:
        return self.root / "sweeps" / sweep_id

    # -- stages -------------------------------------------------------------------

    def describe(self, stage: Stage) -> None:
        """Write stage.json once: what the stage is, for people and for `--plan`."""
        target = self.stage_dir(stage.key) / "stage.json"
        if target.exists():
            return
        target.write_json(
            {
                "kind": stage.key.kind,
                "key": stage.key.digest,
                "label": stage.label,
                "upstream": [str(u) for u in stage.upstream],
                "identity": stage.identity,
                "created_at": time.time(),
            }
        )

    def record_run(self, key: StageKey, wall_s: float, gpu_s: float, **extra: Any) -> None:
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
        (self.stage_dir(key) / "runs" / stamp).write_json(
            {"wall_s": wall_s, "gpu_s": gpu_s, "at": time.time(), **extra}
        )

    def runs(self, key: StageKey) -> list[dict[str, Any]]:
        return [f.read_json() for f in (self.stage_dir(key) / "runs").listdir(".json")]

    # -- episode stages -------------------------------------------------------------

    def record_episode(self, key: StageKey, summary: EpisodeSummary) -> None:
        target = self.stage_dir(key) / "done" / f"{episode_file_name(summary.task_id)}.json"
        target.write_json(asdict(summary))

    def episodes(self, key: StageKey, verify: bool = True) -> dict[str, EpisodeSummary]:
        """Finished (scored) episodes by task id whose files are intact."""
        out: dict[str, EpisodeSummary] = {}
        for record in (self.stage_dir(key) / "done").listdir(".json"):
            try:
                data = record.read_json()
                summary = EpisodeSummary(**{k: v for k, v in data.items() if k in _SUMMARY_FIELDS})
            except (ValueError, TypeError) as exc:
                log.warning("ignoring unreadable ledger record %s: %s", record, exc)
                continue
            if not summary.finished:
                continue
            if verify and not self.intact(summary):
                log.warning(
                    "episode file of %s in %s is missing or corrupted; it will be re-run",
                    summary.task_id,
                    key,
                )
                continue
            out[summary.task_id] = summary
        return out

    def all_records(self, key: StageKey) -> dict[str, EpisodeSummary]:
        """Every recorded episode, infrastructure failures included (no verification)."""
        out = {}
        for record in (self.stage_dir(key) / "done").listdir(".json"):
            data = record.read_json()
            summary = EpisodeSummary(**{k: v for k, v in data.items() if k in _SUMMARY_FIELDS})
            out[summary.task_id] = summary
        return out

    def intact(self, summary: EpisodeSummary) -> bool:
        if not summary.file or not summary.sha256:
            return False
        if (summary.file, summary.sha256) in self._intact_files:
            return True
        try:
            ok = sha256(Location.of(summary.file).read_bytes()) == summary.sha256
        except OSError:
            return False
        if ok:
            self._intact_files.add((summary.file, summary.sha256))
        return ok

    # -- bank stages ----------------------------------------------------------------

    def record_output(self, key: StageKey, output: dict[str, Any]) -> None:
        (self.stage_dir(key) / "output.json").write_json(output)

    def output(self, key: StageKey) -> dict[str, Any] | None:
        target = self.stage_dir(key) / "output.json"
        if not target.exists():
            return None
        try:
            return target.read_json()
        except ValueError:
            log.warning("output record of %s is corrupted; the stage will be rebuilt", key)
            return None
