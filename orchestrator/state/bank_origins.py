"""Where each memory bank of a store came from, read from an output root's ledger:
the stage that built it (its label names the method, whose trajectories and how many
tasks), the stage whose episodes it was built from and that stage's benchmark.

Banks are content-addressed and a store may be shared by several output roots, so a
bank of another root is simply not found here (`memory list` says so)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from distillery.orchestrator.state.ledger import read_json_record
from distillery.workers.storage import Location

BANK_STAGE_KINDS = ("build", "render")


@dataclass(frozen=True)
class BankOrigin:
    bank_id: str
    stage: str  # the stage that wrote it, kind:key16
    label: (
        str  # its label, e.g. "build amd from teacher=gpt-5-mini bfcl_multi_turn_base (140 tasks)"
    )
    source: str  # the episode stage it was built from, kind:key16 ("" when unknown)
    source_label: str
    benchmark: str

    @property
    def agent(self) -> str:
        """Whose trajectories: `teacher=NAME` or `student=NAME` (from the source's label)."""
        found = re.search(r"\b((?:teacher|student)=\S+)", self.source_label or self.label)
        return found.group(1) if found else "?"

    @property
    def method(self) -> str | None:
        """The memory method (kind) that built it, as its build stage's label names it."""
        found = re.match(r"build (\S+) from ", self.label)
        return found.group(1) if found else None

    @property
    def memory_tasks(self) -> str:
        found = re.search(r"\((\d+) tasks\)", self.label)
        return found.group(1) if found else "?"


def bank_origins(root: str | Location) -> dict[str, BankOrigin]:
    """bank id -> its origin, for every bank stage recorded under the output root (an
    unreadable record is skipped: `read_json_record` names it)."""
    base = root if isinstance(root, Location) else Location.of(str(root))
    stages = base / "stages"
    out: dict[str, BankOrigin] = {}
    for kind in BANK_STAGE_KINDS:
        for folder in _folders(stages / kind):
            output = read_json_record(folder / "output.json", "bank output")
            stage = read_json_record(folder / "stage.json", "stage record")
            if not isinstance(output, dict) or not isinstance(stage, dict):
                continue
            bank_id = output.get("bank_id")
            if not isinstance(bank_id, str) or not bank_id:
                continue
            source = _episode_source(stages, stage)
            label = str(stage.get("label", ""))
            if kind == "render":  # text renderings of a bank: its build says what it is
                build = _parent(stages, stage)
                label = str(build.get("label", label)) if build else label
            out[bank_id] = BankOrigin(
                bank_id=bank_id,
                stage=f"{kind}:{str(stage.get('key', ''))[:16]}",
                label=label,
                source=source[0],
                source_label=source[1],
                benchmark=source[2],
            )
    return out


def _folders(where: Location) -> list[Location]:
    try:
        return where.subdirs()
    except OSError:
        return []


def _parent(stages: Location, stage: dict[str, Any]) -> dict[str, Any] | None:
    upstream = stage.get("upstream") or []
    if not upstream:
        return None
    kind, _, short = str(upstream[0]).partition(":")
    parent = read_json_record(stages / kind / short / "stage.json", "stage record")
    return parent if isinstance(parent, dict) else None


def _episode_source(stages: Location, stage: dict[str, Any]) -> tuple[str, str, str]:
    """The episode stage at the root of a bank stage's upstream (a render stage's is
    its build's): its name, label and benchmark."""
    seen = 0
    while seen < 4:  # build <- collect/evaluate; render <- build <- ...
        upstream = stage.get("upstream") or []
        if not upstream:
            return "", "", "?"
        kind, _, short = str(upstream[0]).partition(":")
        parent = read_json_record(stages / kind / short / "stage.json", "stage record")
        if not isinstance(parent, dict):
            return str(upstream[0]), "", "?"
        if kind not in BANK_STAGE_KINDS:
            benchmark = (parent.get("identity") or {}).get("benchmark") or "?"
            return str(upstream[0]), str(parent.get("label", "")), str(benchmark)
        stage, seen = parent, seen + 1
    return "", "", "?"
