"""Table 1 laid out as the AgentBrew paper lays it out: the student's methods in groups
by what acts at test time, each with its teacher and test-time columns, then one column
per benchmark (success [95 % Wilson interval] n, and the paired tests against every
reference method: zero-shot and AgentBrew in its experiments).

A point's group follows from what the sweep recorded of it (points.parquet), never from
its method's name:

- I: student only, single rollout (no stage of it plays or calls the teacher, one play
  per task): zero-shot, the student's own memory;
- II: student only, several rollouts with the environment's verdict fed back between
  them (Reflexion);
- III: teacher-augmented, single rollout (a memory the teacher's stages wrote: Simple
  RAG, ExpeL, ACE, AgentBrew, AMD...);
- IV: teacher-augmented, several rollouts (not in the paper; shown where a sweep has it).

The test-time column is the budget ("1 rollout", "3 rollouts + fb"); "Learns from" is
what the method's learning step read of a failed play (its `learning_feedback` report
column, the one feedback setting of every method: binary, category, message, none; "–"
for a method that learns from no failure); the
`table1_test_time` table next to it says what was spent: plays per task (mean, from the
episodes' `attempt`) and the tokens per task of the stage that scores the point, all
its models together (a Reflexion point's plays and its reflections).

Turned on by the sweep's `report.groups` (an AgentBrew Table 1 experiment sets it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from distillery.orchestrator.report.references import with_tests
from distillery.orchestrator.report.tables import Table, pivot

GROUPS = {
    "I": "I: student-only, single rollout",
    "II": "II: student-only, multi-rollout + test-time feedback",
    "III": "III: teacher-augmented, single rollout",
    "IV": "IV: teacher-augmented, multi-rollout + test-time feedback",
}
_FACTS = ("uses_teacher", "test_time_rollouts", "test_time_feedback")


def group_of(uses_teacher: bool, rollouts: int) -> str:
    if uses_teacher:
        return "IV" if rollouts > 1 else "III"
    return "II" if rollouts > 1 else "I"


def rollouts_label(rollouts: int, feedback: bool) -> str:
    if rollouts <= 1:
        return "1 rollout"
    return f"{rollouts} rollouts" + (" + fb" if feedback else "")


def _flag(value: Any) -> bool:
    return bool(value) if value is not None and not pd.isna(value) else False


def _text(value: Any) -> str:
    return str(value) if value is not None and not pd.isna(value) and value != "" else "–"


def _stage_tokens(stages: pd.DataFrame) -> dict[str, float]:
    """Tokens (in + out, every model and role) of each stage, by its hash."""
    if stages.empty:
        return {}
    tokens = stages["tokens_in"].fillna(0) + stages["tokens_out"].fillna(0)
    return {str(k): float(v) for k, v in tokens.groupby(stages["stage_hash"]).sum().items()}


def point_test_time(
    stats: pd.DataFrame, episodes: pd.DataFrame, stages: pd.DataFrame
) -> pd.DataFrame:
    """Per student point: its group, test-time label, plays per task (mean over its
    scored episodes) and the tokens per task of its scoring stage (its tokens over the
    tasks the sweep's points played on it)."""
    columns = ["point_id", "group", "teacher_used", "test_time", "learning_feedback",
               "plays_per_task", "tokens_per_task"]  # fmt: skip
    students = stats[stats["role"] == "student"]
    if students.empty or not all(c in students.columns for c in _FACTS):
        return pd.DataFrame(columns=columns)
    # A point of a sweep written before these facts has none (null): no group to give.
    students = students[students["test_time_rollouts"].notna()]
    attempt = episodes.get("attempt", pd.Series(1, index=episodes.index))
    plays = (
        episodes.assign(attempt=pd.to_numeric(attempt, errors="coerce").fillna(1))
        .dropna(subset=["success"])
        .groupby("point_id")["attempt"]
        .mean()
    )
    tasks_on_stage: dict[str, set[str]] = {}
    stage_of = dict(zip(stats["point_id"], stats["stage"].astype(str), strict=True))
    for pid, frame in episodes.groupby("point_id"):
        stage = stage_of.get(str(pid))
        if stage:
            tasks_on_stage.setdefault(stage, set()).update(frame["task_id"])
    tokens = _stage_tokens(stages)
    rows = []
    for point in students.to_dict("records"):
        teacher = _flag(point.get("uses_teacher"))
        raw = point.get("test_time_rollouts")
        rollouts = int(raw) if raw is not None and not pd.isna(raw) else 1
        stage = str(point.get("stage") or "")
        n_tasks = len(tasks_on_stage.get(stage, ()))
        rows.append(
            {
                "point_id": point["point_id"],
                "group": group_of(teacher, rollouts),
                "teacher_used": teacher,
                "test_time": rollouts_label(rollouts, _flag(point.get("test_time_feedback"))),
                "learning_feedback": _text(point.get("learning_feedback")),
                "plays_per_task": float(plays.get(point["point_id"], np.nan)),
                "tokens_per_task": tokens.get(stage, np.nan) / n_tasks if n_tasks else np.nan,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def grouped_table1(
    cells: pd.DataFrame,
    stats: pd.DataFrame,
    episodes: pd.DataFrame,
    stages: pd.DataFrame,
    pooled: pd.DataFrame,
    keys: Sequence[str],
    candidates: Sequence[str],
    title: str,
) -> tuple[list[Table], list[str]]:
    """The grouped Table 1 and its test-time cost table (see the module docstring), or
    a note saying why there is none."""
    facts = point_test_time(stats, episodes, stages)
    recorded = set(facts["point_id"])
    students = cells[cells["role"] == "student"]
    students = students[[str(ids).split(",")[0] in recorded for ids in students["point_ids"]]]
    if facts.empty or students.empty:
        return [], [
            "grouped table 1: no student point records its test-time facts (a sweep "
            "written before them: re-run its command to rewrite its tables)"
        ]
    by_point = facts.set_index("point_id")
    facts_of = {str(r["point_id"]): r for r in facts.to_dict("records")}
    first = [str(ids).split(",")[0] for ids in students["point_ids"]]
    point_ids = [str(ids).split(",") for ids in students["point_ids"]]
    cell_facts = by_point.reindex(first).reset_index(drop=True)
    plays = [_mean(facts_of, "plays_per_task", ids) for ids in point_ids]
    tokens = [_mean(facts_of, "tokens_per_task", ids) for ids in point_ids]
    grouped = students.reset_index(drop=True).assign(
        group=cell_facts["group"].map(GROUPS),
        teacher_col=cell_facts["teacher_used"].map({True: "✓", False: "✗"}),
        test_time=cell_facts["test_time"],
        feedback_col=cell_facts["learning_feedback"],
        plays_per_task=plays,
        tokens_per_task=tokens,
    )
    labelled = with_tests(grouped, pooled, keys)
    rows = ["group", "student", "method", "teacher_col", "test_time", "feedback_col"]
    order = {label: i for i, label in enumerate(GROUPS.values())}
    labelled = labelled.assign(_group=labelled["group"].map(order)).sort_values(
        ["_group"], kind="stable"
    )
    frame = _grouped_pivot(labelled, rows, candidates, "label")
    linked = (
        _grouped_pivot(labelled, rows, candidates, "label_md") if "label_md" in labelled else None
    )
    caption = (
        "Groups by what acts at test time (recorded per point, not by name); Teacher: a "
        "stage of the point plays or calls the teacher; Test-time: the plays a task may "
        "get (+ fb: the environment's verdict fed back between them); Learns from: what "
        "the method's learning step read of a failed play (binary: solved or not; "
        "category: its failure category too). Cells: success % "
        "[95 % Wilson interval] n, then per reference method the gain in percentage "
        "points and McNemar's p on the tasks both scored (seeds pooled). The paper marks "
        "significance with a two-proportion z-test; these tests are paired by task."
    )
    table = Table("table1_groups", title, frame, caption, linked)
    cost = grouped.assign(
        plays_per_task=[f"{v:.2f}" if not np.isnan(v) else "–" for v in plays],
        tokens_per_task=[f"{v:,.0f}" if not np.isnan(v) else "–" for v in tokens],
    )
    cost = cost.assign(
        label=cost["plays_per_task"] + " plays · " + cost["tokens_per_task"] + " tok"
    )
    cost_frame = _grouped_pivot(
        cost.assign(_group=cost["group"].map(order)).sort_values(["_group"], kind="stable"),
        rows, candidates, "label",
    )  # fmt: skip
    cost_table = Table(
        "table1_test_time",
        "Test-time cost per task (plays, tokens of every model of the scoring stage)",
        cost_frame,
        "Plays per task: mean over scored episodes; tokens: the scoring stage's, all its "
        "models (a Reflexion point's plays and reflections), per task it played.",
    )
    return [table, cost_table], []


def _mean(facts: Mapping[str, Mapping[Any, Any]], column: str, point_ids: Sequence[str]) -> float:
    """The mean of a fact over a cell's points (its seeds), NaN where none has it."""
    values = [float(facts[p][column]) for p in point_ids if p in facts]
    values = [v for v in values if not np.isnan(v)]
    return sum(values) / len(values) if values else float("nan")


def _grouped_pivot(
    frame: pd.DataFrame, rows: Sequence[str], candidates: Sequence[str], value: str
) -> pd.DataFrame:
    """`pivot` by benchmark (and its variant: AppWorld's test_normal and
    test_challenge are two columns) with the group columns first, renamed for people."""
    skip = {"benchmark", "benchmark_variant"}
    keep = [c for c in candidates if c not in rows and c not in skip]
    variant = frame.get("benchmark_variant", pd.Series("", index=frame.index)).fillna("")
    column = [
        b if not v else f"{b} ({v})" for b, v in zip(frame["benchmark"], variant, strict=True)
    ]
    frame = frame.drop(columns="_group").assign(benchmark_column=column)
    out = pivot(frame, list(rows), "benchmark_column", value, [*rows, *keep])
    names: Mapping[str, str] = {"group": "Group", "method": "Method", "student": "Student",
                                "teacher_col": "Teacher", "test_time": "Test-time",
                                "feedback_col": "Learns from"}  # fmt: skip
    return out.rename(columns=dict(names))
