"""Where the data of the answer benchmarks (GSM8K, MATH, MBPP, HumanEval) comes from.

Two sources, the same records from either:

- a folder the user names (``benchmark.options.data_path``) holding the official
  release's files in their own layout (each benchmark's docs page lists them and
  where to get them); read with the standard library;
- the Hugging Face hub, through the `datasets` library (``load_dataset(hub_id, ...)``)
  where there is network or a warm cache; ``hub_id`` may also be a local folder laid
  out as the hub repository (what the tests use).

Each benchmark turns what it read into plain records (dicts, in the benchmark's task
order) and checks them: a file or field that is missing or malformed is a
`BenchmarkUnavailable` naming it and saying where to get the data, raised when the
benchmark is built (before any worker or model starts). `records_digest` hashes the
records of the chosen split: it is part of episode identity, so the same data at two
paths shares stage keys and two releases never do.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distillery.workers.envs.base import BenchmarkUnavailable


@dataclass(frozen=True)
class HubSource:
    """How `datasets.load_dataset` reaches a benchmark's data: its path (a hub id, a
    builder such as ``json``, or a local folder laid out as the hub repository), the
    config name, the revision and, for a builder, its data files."""

    path: str
    name: str | None = None
    revision: str | None = None
    data_files: str | None = None

    def describe(self) -> str:
        parts = [self.path]
        if self.name:
            parts.append(f"config {self.name}")
        if self.revision:
            parts.append(f"revision {self.revision}")
        if self.data_files:
            parts.append(f"files {self.data_files}")
        return ", ".join(parts)


class DataProblem(BenchmarkUnavailable):
    """The benchmark's data is missing or malformed (`what`), and how to get it."""


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """One JSON object a line (``.gz`` read as gzip); a bad line names its number."""
    opener: Callable[..., Any] = gzip.open if path.suffix == ".gz" else open
    rows = []
    try:
        with opener(path, "rt", encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as exc:
                    raise ValueError(f"{path}, line {number}: not JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise ValueError(f"{path}, line {number}: not a JSON object")
                rows.append(row)
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: unreadable ({exc})") from None
    return rows


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not readable as JSON ({exc})") from None


def require_fields(
    rows: Iterable[dict[str, Any]], fields: Mapping[str, type | tuple[type, ...]], where: str
) -> None:
    """Every row has every field, of its type; else a ValueError naming the first bad
    row (by position) and field."""
    for index, row in enumerate(rows):
        for name, kind in fields.items():
            if name not in row:
                raise ValueError(f"{where}: record {index + 1} has no {name!r} field")
            if not isinstance(row[name], kind):
                raise ValueError(
                    f"{where}: record {index + 1}: {name!r} is a {type(row[name]).__name__}"
                )


def hub_rows(source: HubSource, split: str, help_text: str) -> list[dict[str, Any]]:
    """The rows of `split` through `datasets.load_dataset`."""
    try:
        import datasets
    except ImportError:
        raise DataProblem(
            "no data_path is set and the `datasets` library is not installed",
            f"pip install datasets, or {help_text}",
        ) from None
    try:
        dataset = datasets.load_dataset(
            source.path,
            source.name,
            split=split,
            revision=source.revision,
            data_files=source.data_files,
        )
    except Exception as exc:  # noqa: BLE001 - offline, no such repo, a bad cache: all said
        message = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
        raise DataProblem(
            f"could not load {source.describe()} (split {split}) through `datasets`: "
            f"{type(exc).__name__}: {message}",
            help_text,
        ) from None
    return [dict(row) for row in dataset]


def records_digest(records: Iterable[dict[str, Any]]) -> str:
    """A hash of the records (canonical JSON, in order): what defines the tasks."""
    digest = hashlib.sha256()
    for record in records:
        digest.update(json.dumps(record, sort_keys=True, default=repr).encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16]


def folder_signature(paths: Iterable[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, size, mtime) of each existing file: a changed file is read again."""
    out = []
    for path in paths:
        try:
            stat = path.stat()
        except OSError:
            continue
        out.append((str(path.resolve()), stat.st_size, stat.st_mtime_ns))
    return tuple(out)


class Memo:
    """Loaded record lists by key, once per process (planning and every episode
    worker ask for the same split)."""

    def __init__(self) -> None:
        self._values: dict[Any, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Any, load: Callable[[], Any]) -> Any:
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = load()
        with self._lock:
            self._values.setdefault(key, value)
            return self._values[key]
