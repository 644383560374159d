"""A brew's training statistics from its event log: the AgentBrew paper's Table 3 (its
rows, in its order and words) and what we count besides, with the identity every brew
must satisfy checked:

    F = Ralph committed + direct writes + curator rejections
        + rolled back + teacher invalid + gold refused

(the paper's Full Ralph hands every failure's note to the curator, `unvalidated:
curate`, the default, so its last three are 0 there; with `unvalidated: rollback`,
ours, a note never certified is rolled back instead).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distillery.workers.memory.agentbrew.leakage import SameAnswer, check_truth
from distillery.workers.memory.agentbrew.notes import NOTES, SCOPES, Note


@dataclass(frozen=True)
class Figure:
    metric: str
    label: str
    value: float
    unit: str = "count"  # count | rate | check


def final_entries(records: Sequence[dict[str, Any]], collection: str) -> dict[str, dict[str, Any]]:
    """memory_id -> the last committed version of each entry of `collection` (as JSON)."""
    out: dict[str, dict[str, Any]] = {}
    for record in records:
        if record.get("kind") != "committed":
            continue
        for entry in record.get("entries", []):
            if entry.get("collection") == collection:
                out[entry["memory_id"]] = entry
    return out


def brew_figures(
    records: Sequence[dict[str, Any]],
    truths: Callable[[str], tuple[str, ...]],
    gold_min_chars: int,
    same: SameAnswer | None = None,
) -> list[Figure]:
    """Table 3 and ours (see the module docstring), from the stage's event log."""
    first: dict[str, bool] = {}
    replays = 0
    asked: Counter[str] = Counter()
    events: Counter[str] = Counter()
    curated: Counter[tuple[str, bool]] = Counter()
    gates: Counter[str] = Counter()
    for record in records:
        kind = record.get("kind")
        if kind == "played":
            if record.get("attempt", 1) == 1:
                first[record["task"]] = bool(record["summary"].get("success"))
            else:
                replays += 1
        elif kind == "asked":
            asked[record.get("role", "")] += 1
        elif kind == "curated":
            certified = bool(record.get("certified"))
            curated[(record.get("decision", ""), certified)] += 1
            if record.get("decision") == "reject":
                gates[record.get("gate") or "curator"] += 1
        elif kind in (
            "teacher_invalid",
            "gold_refused",
            "gold_found",
            "not_certified",
            "validated",
            "revised",
            "drafted",
            "curator_invalid",
        ):
            if kind == "teacher_invalid" and record.get("revision", 0) != 0:
                events["teacher_invalid_revision"] += 1
            elif kind == "not_certified" and record.get("policy") == "rollback":
                events["rolled_back"] += 1
            else:
                events[kind] += 1
    n = len(first)
    failed = sum(1 for ok in first.values() if not ok)
    committed = curated[("add", True)] + curated[("merge", True)]
    direct = curated[("add", False)] + curated[("merge", False)]
    rejected = curated[("reject", True)] + curated[("reject", False)]
    writes = committed + direct
    notes = final_entries(records, NOTES)
    with_gold = 0
    for entry in notes.values():
        tasks = [entry["source"]["task_id"], *entry.get("merged_from", [])]
        texts = [entry[k] for k in ("trigger_pattern", "corrective_rule", "not_applicable_when")]
        texts += [*entry.get("minimal_steps", []), *entry.get("tags", [])]
        if any(check_truth(texts, truths(t), gold_min_chars, same).leaks for t in tasks):
            with_gold += 1
    terminal = committed + direct + rejected + events["rolled_back"]
    terminal += events["teacher_invalid"] + events["gold_refused"]

    def rate(part: float, whole: float) -> float:
        return part / whole if whole else float("nan")

    return [
        # The paper's Table 3, in its order and words.
        Figure("brew.training_success_rate", "Training success rate", rate(n - failed, n), "rate"),
        Figure("brew.failed_tasks", "Failed tasks", failed),
        Figure("brew.ralph_committed", "Ralph committed tasks", committed),
        Figure("brew.direct_writes", "Direct-write tasks", direct),
        Figure("brew.total_writes", "Total write tasks", writes),
        Figure("brew.note_write_rate", "Note write rate", rate(writes, failed), "rate"),
        Figure("brew.curator_rejections", "Curator rejections", rejected),
        Figure(
            "brew.curator_rejection_rate", "Curator rejection rate", rate(rejected, failed), "rate"
        ),
        Figure("brew.notes", "Notes in knowledge base", len(notes)),
        # Ours: what else decided each failure, and what the brew did.
        Figure("brew.tasks", "Brew tasks (N)", n),
        Figure("brew.first_attempt_successes", "First-attempt successes", n - failed),
        Figure("brew.certified", "Ralph-certified notes (recoveries)", events["validated"]),
        Figure("brew.rolled_back", "Rolled back (never certified)", events["rolled_back"]),
        Figure(
            "brew.teacher_invalid",
            "Teacher answers invalid twice (failure skipped)",
            events["teacher_invalid"],
        ),
        Figure(
            "brew.gold_refused",
            "Notes refused for holding the task's ground truth",
            events["gold_refused"],
        ),
        Figure(
            "brew.rejected_by_quality", "Curator rejections by the quality gate", gates["quality"]
        ),
        Figure(
            "brew.merges",
            "Merges into an existing note",
            curated[("merge", True)] + curated[("merge", False)],
        ),
        Figure("brew.scopes", "Skill scopes", len(final_entries(records, SCOPES))),
        Figure("brew.notes_with_gold", "Notes in memory holding a task's ground truth", with_gold),
        Figure("brew.replays", "Re-plays (Ralph loop)", replays),
        Figure("brew.revisions", "Teacher revisions", events["revised"]),
        Figure(
            "brew.teacher_calls", "Teacher calls (drafts, revisions, retries)", asked["teacher"]
        ),
        Figure("brew.curator_calls", "Curator calls (with retries)", asked["curator"]),
        Figure(
            "brew.curator_invalid",
            "Curator answers invalid twice (fallback)",
            events["curator_invalid"],
        ),
        Figure(
            "brew.identity_holds",
            "F = committed + direct + rejected + rolled back + teacher invalid + gold refused",
            float(terminal == failed),
            "check",
        ),
    ]


def final_notes(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The brewed memory as JSON (the notes, then the scopes), for people."""
    notes = sorted(final_entries(records, NOTES).values(), key=lambda e: e["memory_id"])
    scopes = sorted(final_entries(records, SCOPES).values(), key=lambda e: e["memory_id"])
    return [*notes, *scopes]


def note_of(entry: dict[str, Any]) -> Note:
    """A note's JSON back as a `Note` (for checks)."""
    from distillery.workers.memory.store import entry_from_dict

    return entry_from_dict(Note, {k: v for k, v in entry.items() if k != "collection"})
