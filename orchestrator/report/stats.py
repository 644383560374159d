"""The report's numbers: cell rates, Wilson CIs, seed mean ± std, McNemar, steps vs teacher."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import numpy as np
import pandas as pd

from distillery.orchestrator.core.stats import NO_SCORED_EPISODES, mcnemar, wilson_interval
from distillery.orchestrator.report.load import BASE_CELL_KEYS, kind_rank

_NA = "–"  # a missing number or descriptor in tables


def point_stats(points: pd.DataFrame, episodes: pd.DataFrame) -> pd.DataFrame:
    """Per point: tasks, scored episodes, successes, infrastructure failures, mean steps
    over scored episodes, and the success rate over scored episodes."""
    scored = episodes["success"].notna()
    frame = episodes.assign(
        scored=scored.astype("int64"),
        won=(episodes["success"].fillna(False)).astype("int64"),
        infra=(~scored).astype("int64"),
        steps=episodes["total_steps"].where(scored),
    )
    agg = frame.groupby("point_id").agg(
        n_tasks=("task_id", "size"),
        n_scored=("scored", "sum"),
        n_success=("won", "sum"),
        n_infra=("infra", "sum"),
        mean_steps=("steps", "mean"),
    )
    # The counts come from the episodes, the one source of truth: a points table that
    # also records them (results.py writes n_scored) must not collide with them.
    recounted = [column for column in agg.columns if column in points.columns]
    out = points.drop(columns=recounted).set_index("point_id").join(agg)
    for column in ("n_tasks", "n_scored", "n_success", "n_infra"):
        out[column] = out[column].fillna(0).astype("int64")
    out["rate"] = out["n_success"] / out["n_scored"].where(out["n_scored"] > 0)
    return out.reset_index()


def cell_label(successes: int, n: int, seed_mean: float, seed_std: float, n_seeds: int) -> str:
    """A cell as shown: `62.5% [42.7–78.8] n=24`, then `· 62.5 ± 3.5 (3 seeds)` when
    the cell has several seeds."""
    if n <= 0:  # every episode unscored: no rate to show, said as everywhere else
        return NO_SCORED_EPISODES
    low, high = wilson_interval(successes, n)
    label = f"{100 * successes / n:.1f}% [{100 * low:.1f}–{100 * high:.1f}] n={n}"
    if n_seeds > 1 and not math.isnan(seed_std):
        label += f" · {100 * seed_mean:.1f} ± {100 * seed_std:.1f} ({n_seeds} seeds)"
    return label


def cell_table(stats: pd.DataFrame, keys: Sequence[str] = BASE_CELL_KEYS) -> pd.DataFrame:
    """One row per cell (same descriptors but the seed): pooled n / successes / rate,
    95 % Wilson bounds, per-seed mean and sample std (NaN with one seed), the gain over
    the zero-shot cell of the same student, benchmark and protocol (percentage points),
    and the display label. `keys`: the sweep's cell keys (`SweepData.cell_keys`)."""
    keys = list(keys)
    if stats.empty:
        return pd.DataFrame(columns=[*keys, "n", "successes", "rate", "label"])
    per_seed = stats.groupby([*keys, "seed"], sort=False).agg(
        n=("n_scored", "sum"), successes=("n_success", "sum")
    )
    per_seed["seed_rate"] = per_seed["successes"] / per_seed["n"].where(per_seed["n"] > 0)
    seeds = per_seed.reset_index()
    cells = seeds.groupby(keys, sort=False).agg(
        n=("n", "sum"),
        successes=("successes", "sum"),
        n_seeds=("seed_rate", "count"),
        seed_mean=("seed_rate", "mean"),
        seed_std=("seed_rate", "std"),  # ddof=1: the spread a reader expects from "± std"
        seeds=("seed", lambda s: ",".join(str(v) for v in sorted(s))),
    )
    extra = stats.groupby(keys, sort=False).agg(
        n_points=("point_id", "size"),
        n_infra=("n_infra", "sum"),
        mean_steps=("mean_steps", "mean"),
        student_params_b=("student_params_b", "first"),
        point_ids=("point_id", lambda s: ",".join(s)),
    )
    cells = cells.join(extra).reset_index()
    cells["rate"] = cells["successes"] / cells["n"].where(cells["n"] > 0)
    bounds = [
        wilson_interval(int(s), int(n)) for s, n in zip(cells["successes"], cells["n"], strict=True)
    ]
    cells["ci_low"] = [b[0] for b in bounds]
    cells["ci_high"] = [b[1] for b in bounds]
    cells["label"] = [
        cell_label(int(s), int(n), m, d, int(k))
        for s, n, m, d, k in zip(
            cells["successes"],
            cells["n"],
            cells["seed_mean"],
            cells["seed_std"],
            cells["n_seeds"],
            strict=True,
        )
    ]
    # Zero-shot reference: all zero-shot episodes of the student/benchmark/protocol.
    ref_keys = ["student", "benchmark", "protocol"]
    zero = cells[cells["method_kind"] == "zero_shot"].groupby(ref_keys)[["successes", "n"]].sum()
    zero_rate = (zero["successes"] / zero["n"].where(zero["n"] > 0)).rename("zero_shot_rate")
    cells = cells.join(zero_rate, on=ref_keys)
    cells.loc[cells["role"] != "student", "zero_shot_rate"] = np.nan
    cells["gain_pp"] = 100 * (cells["rate"] - cells["zero_shot_rate"])
    order = cells["method_kind"].map(kind_rank)
    return (
        cells.assign(_order=order)
        .sort_values(["benchmark", "protocol", "student", "_order", "method", "memory_types"])
        .drop(columns="_order")
        .reset_index(drop=True)
    )


def mcnemar_table(
    stats: pd.DataFrame, episodes: pd.DataFrame, keys: Sequence[str] = BASE_CELL_KEYS
) -> pd.DataFrame:
    """Each student method point against the zero-shot point of the same student,
    benchmark, protocol and seed, on the tasks scored in both (preferring a zero-shot
    point evaluated on the same task split). b = tasks only the method solved, c = tasks
    only zero-shot solved; exact binomial when b + c < 25, else chi-square with
    continuity correction."""
    match = ["student", "benchmark", "protocol", "seed"]
    zero = stats[stats["method_kind"] == "zero_shot"]
    others = stats[(stats["role"] == "student") & (stats["method_kind"] != "zero_shot")]
    outcome = {
        pid: frame.dropna(subset=["success"]).set_index("task_id")["success"].astype(bool)
        for pid, frame in episodes.groupby("point_id")
    }
    rows = []
    # Rows as mappings: a method's column need not be a Python identifier.
    for point in others.to_dict("records"):
        candidates = zero
        for key in match:
            candidates = candidates[candidates[key] == point[key]]
        if candidates.empty:
            continue
        mine = outcome.get(point["point_id"], pd.Series(dtype=bool))
        best: tuple[int, int, str, pd.DataFrame] | None = None
        for ref in candidates.itertuples(index=False):
            theirs = outcome.get(cast(str, ref.point_id), pd.Series(dtype=bool))
            paired = pd.concat([mine.rename("m"), theirs.rename("z")], axis=1, join="inner")
            rank = (int(ref.eval_task_ids_sha == point["eval_task_ids_sha"]), len(paired))
            if best is None or rank > best[:2]:
                best = (*rank, cast(str, ref.point_id), paired)
        assert best is not None
        paired, ref_id = best[3], best[2]
        b = int((paired["m"] & ~paired["z"]).sum())
        c = int((~paired["m"] & paired["z"]).sum())
        test = mcnemar(b, c)
        n = len(paired)
        rows.append(
            {
                **{k: point[k] for k in keys},
                "seed": point["seed"],
                "point_id": point["point_id"],
                "zero_shot_point_id": ref_id,
                "n_pairs": n,
                "rate": paired["m"].mean() if n else np.nan,
                "zero_shot_rate": paired["z"].mean() if n else np.nan,
                "both": int((paired["m"] & paired["z"]).sum()),
                "neither": int((~paired["m"] & ~paired["z"]).sum()),
                "b": b,
                "c": c,
                "test": test.method,
                "statistic": test.statistic,
                "p": test.p,
            }
        )
    columns = [
        *keys,
        "seed",
        "point_id",
        "zero_shot_point_id",
        "n_pairs",
        "rate",
        "zero_shot_rate",
        "both",
        "neither",
        "b",
        "c",
        "test",
        "statistic",
        "p",
    ]
    return pd.DataFrame(rows, columns=columns)


def steps_against_teacher(
    stats: pd.DataFrame, episodes: pd.DataFrame, keys: Sequence[str] = BASE_CELL_KEYS
) -> pd.DataFrame:
    """Per (student point, task) scored on both sides: the student's steps and the
    teacher's (mean over the teacher's points of that benchmark) on the same task. A
    point with a teacher is compared with that teacher; zero-shot and student-memory
    points with every teacher of their benchmark."""
    scored = episodes[episodes["success"].notna()]
    teachers = stats[stats["role"] == "teacher"][["point_id", "teacher", "benchmark"]]
    t_eps = scored.merge(teachers, on="point_id")
    if t_eps.empty:
        return pd.DataFrame()
    t_steps = (
        t_eps.groupby(["teacher", "benchmark", "task_id"])
        .agg(teacher_steps=("total_steps", "mean"), teacher_success=("success", "max"))
        .reset_index()
    )
    students = stats[stats["role"] == "student"][
        ["point_id", *(k for k in keys if k != "teacher"), "teacher", "seed"]
    ]
    s_eps = scored.merge(students, on="point_id")
    with_teacher = s_eps[s_eps["teacher"] != ""].merge(
        t_steps, on=["teacher", "benchmark", "task_id"]
    )
    without = (
        s_eps[s_eps["teacher"] == ""]
        .drop(columns="teacher")
        .merge(t_steps, on=["benchmark", "task_id"])
    )
    out = pd.concat([with_teacher, without], ignore_index=True)
    return out.rename(columns={"total_steps": "student_steps"})


def steps_summary(pairs: pd.DataFrame, keys: Sequence[str] = BASE_CELL_KEYS) -> pd.DataFrame:
    """Per cell and teacher: mean steps per task of student and teacher on the shared
    scored tasks, and on the tasks both solved (the paper's efficiency comparison)."""
    if pairs.empty:
        return pd.DataFrame()
    keys = [k for k in keys if k in pairs.columns]
    both = pairs["success"].astype(bool) & pairs["teacher_success"].astype(bool)
    frame = pairs.assign(
        s_both=pairs["student_steps"].where(both), t_both=pairs["teacher_steps"].where(both)
    )
    out = (
        frame.groupby(keys, sort=False)
        .agg(
            n_tasks=("task_id", "size"),
            student_steps=("student_steps", "mean"),
            teacher_steps=("teacher_steps", "mean"),
            n_both_solved=("s_both", "count"),
            student_steps_both_solved=("s_both", "mean"),
            teacher_steps_both_solved=("t_both", "mean"),
        )
        .reset_index()
    )
    out["ratio"] = out["student_steps"] / out["teacher_steps"].where(out["teacher_steps"] > 0)
    return out
