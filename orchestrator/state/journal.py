"""The durable event log of an outcome-driven stage, written as it happens.

Every effect a stage's program has (a play, a model's answer) and every event it logs
(drafted, staged, validated, committed, merged, rejected, rolled back) is one record,
one small file each (no appends: the same on a local disk and on object stores):

    <stage dir>/journal/<task index:06d>-<seq:04d>.json

named by the task's place in the stage's order and the record's place in that task's
program. A record is written before its result is used, so a run killed at any moment
leaves a prefix of the uninterrupted run's log; re-running replays each task's program
over its records (an effect whose record exists is not run again: its recorded result
is returned) and continues where the log ends. Records carry no clock time: the log of
a resumed run is the log of an uninterrupted one, byte for byte.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from distillery.orchestrator.state.ledger import read_json_record
from distillery.workers.storage import Location

log = logging.getLogger(__name__)

_NAME = re.compile(r"^(\d{6})-(\d{4})\.json$")


class Journal:
    """The records of one stage, by (task index, seq)."""

    def __init__(self, folder: Location) -> None:
        self.folder = folder
        self._records: dict[tuple[int, int], dict[str, Any]] | None = None

    @staticmethod
    def name(index: int, seq: int) -> str:
        return f"{index:06d}-{seq:04d}.json"

    def records(self) -> dict[tuple[int, int], dict[str, Any]]:
        """Every readable record (a damaged one is reported; it and what follows it in
        its task are run again)."""
        if self._records is None:
            found: dict[tuple[int, int], dict[str, Any]] = {}
            for target in self.folder.listdir(".json"):
                match = _NAME.match(target.name)
                if match is None:
                    continue
                data = read_json_record(target, "journal record")
                if isinstance(data, dict):
                    found[(int(match[1]), int(match[2]))] = data
            self._records = dict(sorted(found.items()))
        return self._records

    def get(self, index: int, seq: int) -> dict[str, Any] | None:
        return self.records().get((index, seq))

    def write(self, index: int, seq: int, record: dict[str, Any]) -> None:
        (self.folder / self.name(index, seq)).write_json(record)
        self.records()[(index, seq)] = record

    def drop_from(self, index: int, seq: int) -> None:
        """Forget the records from (index, seq) on: those of that task from `seq`, and
        every later task's (they were decided on what is dropped)."""
        for key in [k for k in self.records() if k >= (index, seq)]:
            (self.folder / self.name(*key)).delete()
            del self.records()[key]

    def ordered(self) -> list[dict[str, Any]]:
        """The log, in order (task by task, each task's records in order)."""
        return [self.records()[k] for k in sorted(self.records())]
