"""The ledger: what every stage has produced, under the output root, checksummed.

    <root>/stages/<kind>/<key16>/stage.json          identity, upstream, label
    <root>/stages/<kind>/<key16>/episodes/<task>.parquet
    <root>/stages/<kind>/<key16>/done/<task>.json    one per finished episode
    <root>/stages/<kind>/<key16>/output.json         bank stages: the bank it wrote
    <root>/stages/<kind>/<key16>/runs/<stamp>.json   wall time and GPU-seconds per run

An episode counts as finished only when its `done` record exists AND its Parquet file
still has the checksum the record names: a file cut short by a crash or edited since
is detected and the task is played again. Records are one small file each (no
appends), so the ledger works the same on a local disk and on object stores.
Infrastructure failures are recorded too (they are results of a run) but never count
as finished: a re-run retries them. What a stage produced is read back as typed records
(`EpisodeSummary`, `BankOutput`, `RunRecord`), validated on the way in: a record that
does not validate is reported and its work done again.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from distillery.orchestrator.stages.stage import Stage, StageKey
from distillery.workers.episodes import EpisodeSummary
from distillery.workers.storage import Location, sha256
from distillery.workers.trajectories import (
    EpisodeFile,
    episode_file_name,
    read_episode_file_bytes,
)

log = logging.getLogger(__name__)
_SUMMARY_FIELDS = {f.name for f in fields(EpisodeSummary)}


@dataclass(frozen=True)
class BankOutput:
    """What a bank stage produced (its `output.json`): the bank in the store, its entry
    counts per collection plus totals (trajectories, embedded_chars), the build's
    statistics (requests, tokens, fallbacks) and whether an equal bank was reused."""

    bank_id: str
    counts: Mapping[str, int] = field(default_factory=dict)
    stats: Mapping[str, float] = field(default_factory=dict)
    reused: bool = False

    def __post_init__(self) -> None:
        # Checked when written, so a record the ledger would refuse to read back (and
        # rebuild its bank on every run) is never written.
        if not isinstance(self.bank_id, str) or not self.bank_id:
            raise TypeError(f"a bank output needs a bank id, not {self.bank_id!r}")
        if not _numbers(self.counts, int) or not _numbers(self.stats, (int, float)):
            raise TypeError(f"bank {self.bank_id[:16]}: counts and stats map names to numbers")
        if not isinstance(self.reused, bool):
            raise TypeError(f"bank {self.bank_id[:16]}: reused is a bool")

    def as_json(self) -> dict[str, Any]:
        return {
            "bank_id": self.bank_id,
            "counts": dict(self.counts),
            "stats": dict(self.stats),
            "reused": self.reused,
        }

    @classmethod
    def from_json(cls, data: Any) -> BankOutput | None:
        """The record of `data`, or None when it is not one. Records of earlier versions
        lack `stats` (a reused bank) or `reused` (a built one): both default."""
        if not isinstance(data, dict):
            return None
        counts, stats = data.get("counts") or {}, data.get("stats") or {}
        if not isinstance(counts, dict) or not isinstance(stats, dict):
            return None
        try:
            bank_id, reused = data.get("bank_id"), data.get("reused", False)
            return cls(bank_id, counts, stats, reused)  # type: ignore[arg-type]
        except TypeError:
            return None


@dataclass(frozen=True)
class RunRecord:
    """One run of a stage (`runs/<stamp>.json`): its wall time and GPU-seconds."""

    wall_s: float
    gpu_s: float
    at: float  # when it ended (epoch seconds)
    # Per model config name: the GPU-seconds of its servers' serving time that were this
    # stage's (its share of the requests in flight; `gpu_time.ServingClock`). Absent in
    # records written before stages ran at once (their cost: wall x the models' GPUs).
    gpu_s_by_model: dict[str, float] | None = None

    @classmethod
    def from_json(cls, data: Any) -> RunRecord | None:
        if not isinstance(data, dict):
            return None
        values = [data.get(k, 0.0) for k in ("wall_s", "gpu_s", "at")]
        if not all(_is_number(v) for v in values):
            return None
        by_model = data.get("gpu_s_by_model")
        if not (
            isinstance(by_model, dict)
            and all(isinstance(k, str) and _is_number(v) for k, v in by_model.items())
        ):
            by_model = None
        wall_s, gpu_s, at = (float(v) for v in values)
        return cls(wall_s, gpu_s, at, by_model)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numbers(data: Any, kinds: type | tuple[type, ...]) -> bool:
    """`data` maps names to numbers of `kinds` (never bools, which JSON keeps apart)."""
    return isinstance(data, Mapping) and all(
        isinstance(k, str) and isinstance(v, kinds) and not isinstance(v, bool)
        for k, v in data.items()
    )


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

    def record_run(
        self,
        key: StageKey,
        wall_s: float,
        gpu_s: float,
        gpu_s_by_model: dict[str, float] | None = None,
    ) -> None:
        stamp = f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}.json"
        record = RunRecord(wall_s, gpu_s, time.time(), gpu_s_by_model)
        (self.stage_dir(key) / "runs" / stamp).write_json(asdict(record))

    def runs(self, key: StageKey) -> list[RunRecord]:
        """Every readable run record of a stage (a damaged one is reported and skipped:
        it only costs the stage's wall time in the report)."""
        out = []
        for target in (self.stage_dir(key) / "runs").listdir(".json"):
            data = read_json_record(target, "run record")
            record = RunRecord.from_json(data)
            if record is not None:
                out.append(record)
            elif data is not None:
                log.warning("ignoring malformed run record %s", target)
        return out

    # -- episode stages -------------------------------------------------------------

    def record_path(self, key: StageKey, task_id: str) -> Location:
        """Where the ledger record of `task_id` is (one file per task, named after it)."""
        return self.stage_dir(key) / "done" / f"{episode_file_name(task_id)}.json"

    def record_episode(self, key: StageKey, summary: EpisodeSummary) -> None:
        self.record_path(key, summary.task_id).write_json(asdict(summary))

    def episodes(self, key: StageKey, verify: bool = True) -> dict[str, EpisodeSummary]:
        """Finished (scored) episodes by task id whose files are intact.

        An episode file is written before its ledger record (the worker writes the file,
        the driver the record it returns); a run killed between the two leaves a scored
        file with no record. Such a file is adopted (its record written from it), so a
        finished episode is never played again."""
        out: dict[str, EpisodeSummary] = {}
        records = self._records(key)
        for summary in records.values():
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
        # A recorded file that fails its checksum was altered: played again, not adopted.
        out.update(self.adopt_orphans(key, {t for t, s in records.items() if s.finished}))
        return out

    def all_records(self, key: StageKey) -> dict[str, EpisodeSummary]:
        """Every recorded episode, infrastructure failures included (no verification)."""
        records = self._records(key)
        records.update(self.adopt_orphans(key, {t for t, s in records.items() if s.finished}))
        return records

    def _records(self, key: StageKey) -> dict[str, EpisodeSummary]:
        """The readable ledger records of a stage; a damaged one, or one whose file is
        not named after its task (copied or edited: it could stand in for another
        task's record), is reported with its path and ignored (its task is played
        again)."""
        out: dict[str, EpisodeSummary] = {}
        for record in (self.stage_dir(key) / "done").listdir(".json"):
            data = read_json_record(record, "ledger record")
            summary = _summary_of(data)
            if summary is None:
                if data is not None:
                    log.warning("ignoring malformed ledger record %s (not an episode)", record)
                continue
            expected = self.record_path(key, summary.task_id).name
            if record.name != expected:
                log.warning(
                    "ignoring ledger record %s: it is for task %r, whose record is %s",
                    record,
                    summary.task_id,
                    expected,
                )
                continue
            out[summary.task_id] = summary
        return out

    def adopt_orphans(self, key: StageKey, finished: set[str]) -> dict[str, EpisodeSummary]:
        """Scored episode files of tasks without a finished record: their records,
        written now. Unreadable files are left to be played again."""
        adopted: dict[str, EpisodeSummary] = {}
        files = self.episodes_dir(key).listdir(".parquet")
        known = {episode_file_name(t) for t in finished}
        for file in files:
            if file.name in known:
                continue
            try:
                data = file.read_bytes()
                rows = read_episode_file_bytes(data)
            except Exception as exc:  # pyarrow raises several kinds on a damaged file
                log.warning("episode file %s is unreadable (%s); it will be re-run", file, exc)
                continue
            if len(rows) != 1 or episode_file_name(rows[0].task_id) != file.name:
                log.warning("ignoring episode file %s: not one episode of its task", file)
                continue
            record = rows[0]
            if not record.scored or record.task_id in finished:
                continue
            summary = EpisodeSummary.of(record, EpisodeFile(file.uri, sha256(data)))
            log.warning(
                "episode %s of %s was written but not recorded (a run stopped in between); "
                "recording it from %s",
                record.task_id,
                key,
                file,
            )
            self.record_episode(key, summary)
            self._intact_files.add((summary.file, summary.sha256))
            adopted[record.task_id] = summary
        return adopted

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

    def record_output(self, key: StageKey, output: BankOutput) -> None:
        (self.stage_dir(key) / "output.json").write_json(output.as_json())

    def output(self, key: StageKey) -> BankOutput | None:
        target = self.stage_dir(key) / "output.json"
        if not target.exists():
            return None
        output = BankOutput.from_json(read_json_record(target, "bank record"))
        if output is None:
            log.warning("bank record %s is damaged; the stage will be rebuilt", target)
        return output


def read_json_record(target: Location, what: str) -> Any:
    """A JSON file's content, or None (with a warning naming the file) when it is
    missing or damaged: state on disk is checked, never trusted."""
    try:
        return target.read_json()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError too
        log.warning("ignoring damaged %s %s: %s", what, target, exc)
        return None


def read_sweep_record(target: Location) -> dict[str, Any]:
    """sweep.json of an earlier invocation of the sweep; {} when it is missing or
    damaged (reported with its path; the run rewrites it)."""
    if not target.exists():
        return {}
    data = read_json_record(target, "sweep record")
    if not isinstance(data, dict):
        if data is not None:
            log.warning("ignoring damaged sweep record %s: not a JSON object", target)
        return {}
    return data


def _summary_of(data: Any) -> EpisodeSummary | None:
    if not isinstance(data, dict):
        return None
    try:
        summary = EpisodeSummary(**{k: v for k, v in data.items() if k in _SUMMARY_FIELDS})
    except TypeError:
        return None
    if not isinstance(summary.task_id, str) or not summary.task_id:
        return None
    if summary.success is not None and not isinstance(summary.success, bool):
        return None
    return summary
