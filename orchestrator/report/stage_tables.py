"""The report's tables of what stages report of themselves (`stage_figures.parquet`,
written from `stages.StageReport`): one table per title (AgentBrew's brew: its training
statistics, the AgentBrew paper's Table 3), a column per stage, a row per figure in the
stage's order, each identity it checks said to hold or not; and next to it what each
such stage cost and what the evaluations that read it cost (a brew against its serve).

The module names no stage kind: a kind's figures, labels and checks are its own.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from distillery.orchestrator.report.load import SweepData
from distillery.orchestrator.state.sweep_tables import (
    STAGE_FIGURES,
    SweepTableError,
    read_sweep_table,
)


@dataclass(frozen=True)
class StageTable:
    title: str
    name: str  # CSV stem
    frame: pd.DataFrame  # rows: figures; columns: "figure", then one per stage
    costs: pd.DataFrame  # each stage's cost, then each evaluation's that reads it
    notes: tuple[str, ...]  # identities that do not hold


def load_stage_figures(data: SweepData) -> tuple[pd.DataFrame, list[str]]:
    """The sweep's stage figures (empty when none of its stages reports any)."""
    target = data.location / STAGE_FIGURES.file
    if not target.exists():
        return pd.DataFrame(columns=list(STAGE_FIGURES.names)), []
    try:
        table = read_sweep_table(STAGE_FIGURES, target.read_bytes(), str(target))
    except (SweepTableError, OSError, ValueError) as exc:
        return pd.DataFrame(columns=list(STAGE_FIGURES.names)), [f"{target}: {exc}; skipped"]
    return table.to_pandas(), []


def _shown(value: float, unit: str) -> str:
    if unit == "rate":
        return "n/a" if pd.isna(value) else f"{100 * value:.1f}%"
    if unit == "check":
        return "holds" if value == 1 else "DOES NOT HOLD"
    if pd.isna(value):
        return ""
    return str(int(value)) if float(value).is_integer() else f"{value:.2f}"


def stage_tables(
    data: SweepData, figures: pd.DataFrame, stage_costs: pd.DataFrame
) -> list[StageTable]:
    """One `StageTable` per title of `figures` (`stage_costs`: `costs.stage_costs`)."""
    out: list[StageTable] = []
    if figures.empty:
        return out
    for index, (title, rows) in enumerate(figures.groupby("title", sort=False)):
        stages = list(dict.fromkeys(rows["stage_hash"]))
        columns = {h: _column_name(rows[rows["stage_hash"] == h].iloc[0]) for h in stages}
        first = rows[rows["stage_hash"] == stages[0]].sort_values("position")
        table: dict[str, list[str]] = {"figure": list(first["name"])}
        notes: list[str] = []
        for stage_hash in stages:
            mine = rows[rows["stage_hash"] == stage_hash].set_index("metric")
            values = []
            for metric in first["metric"]:
                if metric not in mine.index:
                    values.append("")
                    continue
                row = mine.loc[metric]
                values.append(_shown(float(row["value"]), str(row["unit"])))
                if row["unit"] == "check" and float(row["value"]) != 1:
                    notes.append(f"{columns[stage_hash]}: {row['name']} does not hold")
            table[columns[stage_hash]] = values
        kind = str(rows.iloc[0]["kind"])
        out.append(
            StageTable(
                title=str(title),
                name=f"stage_{kind}_figures" if index == 0 else f"stage_{kind}_figures_{index}",
                frame=pd.DataFrame(table),
                costs=_costs(data, stages, columns, stage_costs),
                notes=tuple(notes),
            )
        )
    return out


def _column_name(row: pd.Series) -> str:
    return f"{row['kind']}:{str(row['stage_hash'])[:8]} {row['label'] or ''}".strip()


def _costs(
    data: SweepData, stages: list[str], columns: dict[str, str], costs: pd.DataFrame
) -> pd.DataFrame:
    """Per reporting stage: its own cost by role, then the evaluation stage of every
    point that reads it (its upstream holds the stage) by role."""
    keep = ["role", "model", "tokens_in", "tokens_out", "n_llm_calls", "wall_s", "usd"]
    rows = []
    for stage_hash in stages:
        for _, cost in costs[costs["stage_hash"] == stage_hash].iterrows():
            rows.append({"stage": columns[stage_hash], "what": "itself",
                         **{k: cost[k] for k in keep}})  # fmt: skip
        points = data.points
        readers = points[points["upstream"].map(lambda up, h=stage_hash: h in _hashes(up))]
        for _, point in readers.iterrows():
            own = point.get("stage")
            if not isinstance(own, str) or own == stage_hash:
                continue
            what = f"evaluation: {point['method']} student={point['student']} seed={point['seed']}"
            for _, cost in costs[costs["stage_hash"] == own].iterrows():
                rows.append({"stage": columns[stage_hash], "what": what,
                             **{k: cost[k] for k in keep}})  # fmt: skip
    return pd.DataFrame(rows, columns=["stage", "what", *keep])


def _hashes(value: object) -> list[str]:
    if value is None or isinstance(value, float):  # none (NaN from a join)
        return []
    if isinstance(value, str):
        return [v for v in value.split(",") if v]
    return [str(v) for v in value]  # type: ignore[union-attr]


def render_stage_tables(tables: list[StageTable], use_usd: bool) -> str:
    """The tables' section of report.md ("" when there is none)."""
    from distillery.orchestrator.report.markdown import markdown_table

    if not tables:
        return ""
    parts = []
    for table in tables:
        parts += [f"## {table.title}", "", markdown_table(table.frame), ""]
        parts += [f"- {note}" for note in table.notes]
        if table.notes:
            parts.append("")
        if not table.costs.empty:
            shown = table.costs.copy()
            if not use_usd:
                shown = shown.drop(columns=["usd"])
            else:
                shown["usd"] = shown["usd"].map(lambda v: f"{v:.4f}")
            shown["wall_s"] = shown["wall_s"].map(lambda v: f"{v:.1f}")
            parts += ["Cost of each, and of the evaluations that read it:", ""]
            parts += [markdown_table(shown), ""]
    return "\n".join(parts)
