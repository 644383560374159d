"""Paper table 1 and figure 3: every student method against reference methods.

A *reference* names the methods others are tested against, by catalog name (`method`)
or by kind (`method_kind`). Which ones is configuration, not code: the sweep's
`report.references` (conf/config.yaml, recorded in sweep.json), or `distillery report
--against NAME ...`; a sweep recorded before there was such a setting is tested
against zero-shot only, as the report always did.

- `reference_tests`: per student point and reference, McNemar on the tasks scored in
  both, against the reference's point of the same student, benchmark, protocol and
  seed (preferring one evaluated on the same task split). A point is not tested
  against a reference it is itself, nor against a later reference when it is an
  earlier one (zero-shot vs AMD is AMD vs zero-shot, already in the table).
- `pooled_tests`: the same per cell (all its seeds' pairs pooled, a pair being a task
  of one seed).
- `table1`: method x student x benchmark; each cell its success rate, 95 % Wilson
  interval and n, then per reference the gain in percentage points and McNemar's p.
- `steps_by_method`: mean steps per scored episode per method (the teacher included),
  student and benchmark: paper figure 3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from distillery.orchestrator.core.stats import mcnemar
from distillery.orchestrator.report.load import kind_rank
from distillery.orchestrator.report.tables import Table, _pivots

# A sweep that recorded no `report.references` (written before the setting existed).
FALLBACK_REFERENCES: tuple[str, ...] = ("zero_shot",)
_MATCH = ("student", "benchmark", "protocol", "seed")
_TEST_COLUMNS = [
    "reference",
    "seed",
    "point_id",
    "reference_method",
    "reference_point_id",
    "n_pairs",
    "rate",
    "reference_rate",
    "both",
    "neither",
    "b",
    "c",
    "test",
    "statistic",
    "p",
]


def sweep_references(meta: Mapping[str, Any], given: Sequence[str] | None = None) -> list[str]:
    """The references of a report: `given` (the command line), else the sweep's
    recorded `report.references`, else `FALLBACK_REFERENCES`; each once, in order."""
    if given:
        chosen: Sequence[str] = given
    else:
        recorded = (meta.get("report") or {}).get("references")
        chosen = recorded if recorded else FALLBACK_REFERENCES
    return list(dict.fromkeys(str(r) for r in chosen))


def _is(frame: pd.DataFrame, reference: str) -> pd.Series:
    return (frame["method"] == reference) | (frame["method_kind"] == reference)


def present_references(stats: pd.DataFrame, references: Sequence[str]) -> list[str]:
    """The references some student point of the sweep is."""
    students = stats[stats["role"] == "student"]
    return [r for r in references if _is(students, r).any()]


def _outcomes(episodes: pd.DataFrame) -> dict[Any, pd.Series]:
    return {
        pid: frame.dropna(subset=["success"]).set_index("task_id")["success"].astype(bool)
        for pid, frame in episodes.groupby("point_id")
    }


def reference_tests(
    stats: pd.DataFrame,
    episodes: pd.DataFrame,
    keys: Sequence[str],
    references: Sequence[str],
) -> pd.DataFrame:
    """One row per (student point, reference it is tested against); see the module."""
    keys = list(keys)
    students = stats[stats["role"] == "student"]
    outcome = _outcomes(episodes)
    rows = []
    earlier = pd.Series(False, index=students.index)
    for reference in present_references(stats, references):
        is_ref = _is(students, reference)
        refs = students[is_ref]
        for point in students[~is_ref & ~earlier].to_dict("records"):
            candidates = refs
            for key in _MATCH:
                candidates = candidates[candidates[key] == point[key]]
            mine = outcome.get(point["point_id"], pd.Series(dtype=bool))
            # Rows as mappings: a method's column need not be a Python identifier.
            for ref in _best_per_method(candidates, point, mine, outcome):
                paired, ref_row = ref
                b = int((paired["m"] & ~paired["r"]).sum())
                c = int((~paired["m"] & paired["r"]).sum())
                test = mcnemar(b, c)
                n = len(paired)
                rows.append(
                    {
                        **{k: point[k] for k in keys},
                        "reference": reference,
                        "seed": point["seed"],
                        "point_id": point["point_id"],
                        "reference_method": ref_row["method"],
                        "reference_point_id": ref_row["point_id"],
                        "n_pairs": n,
                        "rate": paired["m"].mean() if n else np.nan,
                        "reference_rate": paired["r"].mean() if n else np.nan,
                        "both": int((paired["m"] & paired["r"]).sum()),
                        "neither": int((~paired["m"] & ~paired["r"]).sum()),
                        "b": b,
                        "c": c,
                        "test": test.method,
                        "statistic": test.statistic,
                        "p": test.p,
                    }
                )
        earlier |= is_ref
    return pd.DataFrame(rows, columns=[*keys, *_TEST_COLUMNS])


def _best_per_method(
    candidates: pd.DataFrame,
    point: Mapping[Any, Any],
    mine: pd.Series,
    outcome: Mapping[Any, pd.Series],
) -> list[tuple[pd.DataFrame, Mapping[Any, Any]]]:
    """Per reference method (a kind may name several: `amd_wf` and `amd_wf_st_fn`), its
    point best paired with `point`: the same task split first, then the most pairs."""
    out = []
    for _, group in candidates.groupby("method", sort=False):
        best: tuple[tuple[int, int], pd.DataFrame, Mapping[Any, Any]] | None = None
        for ref in group.to_dict("records"):
            theirs = outcome.get(ref["point_id"], pd.Series(dtype=bool))
            paired = pd.concat([mine.rename("m"), theirs.rename("r")], axis=1, join="inner")
            rank = (int(ref["eval_task_ids_sha"] == point["eval_task_ids_sha"]), len(paired))
            if best is None or rank > best[0]:
                best = (rank, paired, ref)
        if best is not None:
            out.append((best[1], best[2]))
    return out


def pooled_tests(tests: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Per cell (`keys`) and reference method: the seeds' pairs pooled (b and c summed)
    and tested once; `gain_pp` is the method's rate minus the reference's on them."""
    columns = [*keys, "reference", "reference_method", "n_pairs", "gain_pp", "b", "c", "p"]
    if tests.empty:
        return pd.DataFrame(columns=columns)
    group = [*keys, "reference", "reference_method"]
    frame = tests.assign(
        won=tests["rate"] * tests["n_pairs"], ref_won=tests["reference_rate"] * tests["n_pairs"]
    )
    pooled = (
        frame.groupby(group, sort=False, dropna=False)[["n_pairs", "won", "ref_won", "b", "c"]]
        .sum()
        .reset_index()
    )
    n = pooled["n_pairs"].where(pooled["n_pairs"] > 0)
    pooled["gain_pp"] = 100 * (pooled["won"] - pooled["ref_won"]) / n
    pooled["p"] = [mcnemar(int(b), int(c)).p for b, c in zip(pooled["b"], pooled["c"], strict=True)]
    return pooled[columns]


def _versus(row: Mapping[Any, Any]) -> str:
    gain = row["gain_pp"]
    sign = "–" if pd.isna(gain) else f"{gain:+.1f} pp"
    return f"vs {row['reference_method']}: {sign} (p={_p(row['p'])})"


def _p(p: float) -> str:
    if pd.isna(p):
        return "–"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def with_tests(cells: pd.DataFrame, pooled: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """`cells` with each label (and linked label) followed by one `vs <reference
    method>: gain (p)` per reference its cell was tested against (`pooled_tests`)."""
    keys = list(keys)
    versus: dict[tuple[Any, ...], list[str]] = {}
    for row in pooled.to_dict("records"):
        versus.setdefault(tuple(row[k] for k in keys), []).append(_versus(row))
    extra = [
        " · ".join(versus.get(tuple(r[k] for k in keys), [])) for r in cells.to_dict("records")
    ]

    def joined(labels: pd.Series) -> list[str]:
        return [f"{lab} · {v}" if v else lab for lab, v in zip(labels, extra, strict=True)]

    labelled = cells.assign(label=joined(cells["label"]))
    if "label_md" in cells:
        labelled = labelled.assign(label_md=joined(cells["label_md"]))
    return labelled


def table1(
    cells: pd.DataFrame,
    pooled: pd.DataFrame,
    keys: Sequence[str],
    candidates: Sequence[str],
    title: str,
) -> Table:
    """Method x student x benchmark: each cell's label (rate, CI, n), then one
    `vs <reference method>: gain (p)` per reference it was tested against."""
    labelled = with_tests(cells, pooled, keys)
    table = _pivots("table1", title, labelled, ["student", "method"], "benchmark", candidates)
    caption = (
        "Success % [95 % Wilson interval] n, then per reference method the gain in "
        "percentage points and McNemar's p on the tasks both scored (seeds pooled)."
    )
    numbers = table.numbers if table.numbers is not None else cells
    # Per reference method: its gain, p and pairs as numbers (None where not tested).
    for ref in dict.fromkeys(pooled["reference_method"]) if not pooled.empty else []:
        tested = pooled[pooled["reference_method"] == ref]
        by_cell = {tuple(r[k] for k in keys): r for r in tested.to_dict("records")}
        rows = [by_cell.get(tuple(r[k] for k in keys)) for r in cells.to_dict("records")]
        for column in ("gain_pp", "p", "n_pairs"):
            values = [float("nan") if r is None else float(r[column]) for r in rows]
            numbers = numbers.assign(
                **{f"{column}_vs_{ref}": pd.Series(values, index=numbers.index, dtype="float64")}
            )
    return Table(table.name, table.title, table.frame, caption, table.linked, numbers)


def steps_by_method(cells: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """Paper figure 3: mean steps per scored episode of every method (the teacher too)
    per student, benchmark and protocol; the teacher's row is its own collection's."""
    columns = ["benchmark", "protocol", "student", "method", "method_kind", "role"]
    keep = [k for k in keys if k not in columns and k in cells.columns]
    if cells.empty:
        return pd.DataFrame(columns=[*columns, *keep, "n", "mean_steps"])
    out = cells[[*columns, *keep, "n", "mean_steps"]].copy()
    out["_order"] = out["method_kind"].map(kind_rank)
    return (
        out.sort_values(["benchmark", "protocol", "student", "_order", "method"], kind="stable")
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def pairing_notes(stats: pd.DataFrame, tests: pd.DataFrame, references: Sequence[str]) -> list[str]:
    """Why a reference pairs with nothing, in words (a report that silently has no
    tests against it would read as if there were none to make): not a method of this
    sweep, no point of the same student, benchmark, protocol and seed to pair with, or
    no task scored by both."""
    students = stats[stats["role"] == "student"]
    methods = sorted(set(students["method"]))
    notes = []
    present = present_references(stats, references)
    for reference in references:
        if reference not in present:
            notes.append(
                f"reference {reference!r}: no student method of this sweep is {reference!r} "
                f"(by name or kind); nothing is tested against it. Its student methods: "
                f"{', '.join(methods) or 'none'} (distillery report --against NAME ...)"
            )
            continue
        mine = tests[tests["reference"] == reference] if not tests.empty else tests
        others = students[~_is(students, reference)]
        if others.empty:
            continue  # nothing else to test: the reference is every student method
        if mine.empty:
            notes.append(
                f"reference {reference!r}: no other student point has a {reference} point of "
                f"the same {', '.join(_MATCH)} to pair with; nothing is tested against it"
            )
        elif int(mine["n_pairs"].sum()) == 0:
            notes.append(
                f"reference {reference!r}: its points and the others share no task scored by "
                "both (another split or only unscored episodes); its tests have no pairs"
            )
    return notes
