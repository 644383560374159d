"""The sources the paper settings table cites, checked: every citation of the AMD
authors' repository or of ACE's AppWorld harness names a file and line (or a file, for
what a file lacks), and the text there is pinned by a hash recorded when the row was
checked by hand (`paper_sources.json`). tests/workers/envs/appworld/test_settings_table.py
checks each hash against a checkout of the authors' repository when one is given
($DISTILLERY_AMD_REPO; against the recorded hashes otherwise: every citation must have
one) and against the vendored harness (../shared/vendor/ace-appworld) always.

Re-record after checking a changed row by hand:

    DISTILLERY_AMD_REPO=<checkout> python -m distillery.conf.paper_sources --record
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from distillery.conf.paper_settings import ACE, AMD, experiments, rows_of

RECORDED = Path(__file__).with_name("paper_sources.json")
AMD_CHECKOUT = "DISTILLERY_AMD_REPO"
# The vendored harness beside the repository (../shared/vendor/ace-appworld).
VENDORED_ACE = Path(__file__).resolve().parents[1].parent / "shared/vendor/ace-appworld"
_CITATION = re.compile(
    rf"({re.escape(AMD)}|{re.escape(ACE)}) ([\w./-]+?)(?::(\d+)(?:-(\d+))?)?(?=[\s),;]|$)"
)


@dataclass(frozen=True)
class Citation:
    repository: str  # AMD | ACE
    path: str
    line: int | None  # None: the file as a whole (what it lacks)
    last: int | None = None  # a range's last line (`file:322-352`)

    @property
    def key(self) -> str:
        lines = f":{self.line}" + (f"-{self.last}" if self.last else "") if self.line else ""
        return f"{self.repository} {self.path}{lines}"

    def text(self, root: Path) -> str:
        """The cited lines (each stripped) or the whole file, from a checkout at `root`."""
        content = (root / self.path).read_text(encoding="utf-8")
        if self.line is None:
            return content
        lines = content.splitlines()[self.line - 1 : self.last or self.line]
        return "\n".join(line.strip() for line in lines)

    def digest(self, root: Path) -> str:
        return hashlib.sha256(self.text(root).encode()).hexdigest()[:16]


def citations_in(source: str) -> list[Citation]:
    return [
        Citation(
            m.group(1),
            m.group(2),
            int(m.group(3)) if m.group(3) else None,
            int(m.group(4)) if m.group(4) else None,
        )
        for m in _CITATION.finditer(source)
    ]


def table_citations() -> dict[str, Citation]:
    """Every citation of the table, once, by key."""
    found = {}
    for experiment in experiments():
        for row in rows_of(experiment):
            for citation in citations_in(row.source):
                found[citation.key] = citation
    return dict(sorted(found.items()))


def checkout(repository: str) -> Path | None:
    if repository == ACE:
        return VENDORED_ACE if VENDORED_ACE.is_dir() else None
    chosen = os.environ.get(AMD_CHECKOUT)
    return Path(chosen) if chosen else None


def recorded() -> dict[str, str]:
    return json.loads(RECORDED.read_text()) if RECORDED.exists() else {}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="The settings table's cited sources.")
    parser.add_argument("--record", action="store_true", help="write paper_sources.json")
    args = parser.parse_args(argv)
    out: dict[str, str] = {}
    for key, citation in table_citations().items():
        root = checkout(citation.repository)
        if root is None:
            print(f"no checkout of {citation.repository}: set {AMD_CHECKOUT}")
            return 2
        out[key] = citation.digest(root)
        print(f"{out[key]}  {key}")
    if args.record:
        RECORDED.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
        print(f"recorded {len(out)} citations in {RECORDED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
