"""Building a sweep's report: compute, write and log every table, test, cost and plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pandas as pd

from distillery.orchestrator.report.costs import (
    cost_breakdown,
    gpu_time,
    model_costs,
    point_costs,
    stage_costs,
    unpriced_models,
)
from distillery.orchestrator.report.groups import grouped_table1
from distillery.orchestrator.report.load import ReportError, SweepData, load_sweep
from distillery.orchestrator.report.markdown import _cost_line, markdown_table, render_markdown
from distillery.orchestrator.report.memory_bounds import mark_cells, scoring_episodes
from distillery.orchestrator.report.note_usage import note_usage_table
from distillery.orchestrator.report.plots import (
    plot_steps_by_method,
    plot_steps_vs_teacher,
    plot_student_size,
    plot_success_vs_cost,
    plot_success_vs_k,
)
from distillery.orchestrator.report.publish import _with_mlflow
from distillery.orchestrator.report.references import (
    pairing_notes,
    pooled_tests,
    reference_tests,
    steps_by_method,
    sweep_references,
    table1,
)
from distillery.orchestrator.report.repeats import repeat_notes
from distillery.orchestrator.report.scenarios import scenario_table
from distillery.orchestrator.report.stage_tables import (
    load_stage_figures,
    render_stage_tables,
    stage_tables,
)
from distillery.orchestrator.report.stats import (
    cell_table,
    mcnemar_table,
    point_stats,
    steps_against_teacher,
    steps_summary,
)
from distillery.orchestrator.report.tables import (
    CELL_LABELS,
    _preferred_protocol,
    disambiguators,
    link_cells,
    paper_tables,
)

PLOT_FILES = MappingProxyType(
    {
        "success_vs_k": "success_vs_k.png",
        "student_size": "student_size.png",
        "steps_vs_teacher": "steps_vs_teacher.png",
        "success_vs_cost": "success_vs_cost.png",
        "steps_by_method": "steps_by_method.png",
    }
)
TABLE_FILES = (
    "cells",
    "table_main",  # written by reports before Table 1 replaced it: removed by _clean
    "table_memory",
    "table_representation",
    "table_protocol",
    "table1",
    "table1_groups",
    "table1_test_time",
    "mcnemar",
    "mcnemar_references",
    "table1_tests",
    "steps_by_method",
    "steps_vs_teacher",
    "scenario_goal_completion",
    "costs_breakdown",
    "costs_stages",
    "costs_points",
)


@dataclass(frozen=True)
class Report:
    sweep_id: str
    sweep_dir: str
    out_dir: Path
    markdown: str
    tables: Mapping[str, pd.DataFrame]  # CSV stem -> table (also written as CSV)
    plots: Mapping[str, Path]  # plot name -> PNG written
    notes: tuple[str, ...]  # what was skipped and why, data warnings
    files: tuple[Path, ...]
    picked: str | None = None  # which sweep of an output root was chosen, and why
    mlflow_run_id: str | None = None  # the parent run the files were logged to
    mlflow_note: str = ""  # why they were not (or where they went)
    mlflow_failed: bool = False
    summary: Mapping[str, Any] = field(default_factory=dict)
    # The paper-style tables as report.md shows them (formatted cells, by table name);
    # `tables` holds the numbers the CSVs are written from.
    views: Mapping[str, pd.DataFrame] = field(default_factory=dict)

    def console(self) -> str:
        """What `distillery report` prints."""
        s = self.summary
        lines = []
        if self.picked:
            lines.append(self.picked)
        lines.append(
            f"sweep {self.sweep_id} ({s.get('experiment') or 'experiment ?'}): "
            f"{s.get('n_points', 0)} points, {s.get('n_episodes', 0)} episodes "
            f"({s.get('n_scored', 0)} scored, {s.get('n_infra', 0)} infrastructure failures)"
        )
        main = self.tables.get("table1")
        if main is not None and not main.empty:
            lines += ["", markdown_table(self.views["table1"]), ""]
        lines.append(f"cost: {s.get('cost_line', '')}")
        lines += [f"note: {n}" for n in self.notes]
        n_png = len(self.plots)
        n_csv = sum(1 for f in self.files if f.suffix == ".csv")
        lines.append(
            f"wrote {len(self.files)} files to {self.out_dir} (report.md, {n_png} plots, "
            f"{n_csv} tables)"
        )
        lines.append(self.mlflow_note)
        return "\n".join(line for line in lines if line is not None)


def _references_zero_shot(against: pd.DataFrame) -> bool:
    """Whether the reference tests hold the tests against zero-shot already (its own
    section would repeat them)."""
    if against.empty:
        return False
    kinds = set(against["reference"])
    return "zero_shot" in kinds or bool((against["reference_method"] == "zero_shot").any())


def _clean(out_dir: Path) -> None:
    """Remove this module's own files from an earlier report (a plot that is skipped
    now must not linger); nothing else in the folder is touched."""
    for name in ["report.md", *PLOT_FILES.values(), *(f"{t}.csv" for t in TABLE_FILES)]:
        (out_dir / name).unlink(missing_ok=True)


def _default_out(data: SweepData) -> Path:
    if data.location.is_local:
        return data.location.local_path / "report"
    return Path("distillery_reports") / data.sweep_id  # a remote sweep: report locally


def _writable(out: Path) -> None:
    """The report's folder exists and can be written (a ReportError says why not)."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file, not a folder: give a folder to write to")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".distillery-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ReportError(
            f"--out {out}: cannot write there ({exc.strerror or exc}); give a folder you can "
            "write to"
        ) from None


def build_report(
    sweep_dir: str | Path,
    out_dir: str | Path | None = None,
    *,
    log_to_mlflow: bool = True,
    mlflow_ui: str | None = None,
    references: Sequence[str] | None = None,
) -> Report:
    """Compute every table, test, cost and plot of a sweep, write them into `out_dir`
    (default `<sweep_dir>/report`) and, unless `log_to_mlflow` is false or sweep.json has
    no parent run, log them to the parent run under `report/`. `sweep_dir` may be an
    output root: its most recent sweep is used. Table cells in report.md link to their
    MLflow child runs in the UI at `mlflow_ui` (default: the tracking server, or the
    local `mlflow ui` address for a local store). `references`: the methods (catalog
    names or kinds) every student method is tested against (default: the sweep's
    `report.references`; see `references.py`)."""
    data, picked = load_sweep(sweep_dir)
    out = Path(out_dir) if out_dir is not None else _default_out(data)
    _writable(out)
    _clean(out)
    notes = list(data.notes)

    keys = list(data.cell_keys)
    stats = point_stats(data.points, data.episodes)
    cells = cell_table(stats, keys)
    prices = data.prices
    # Each model's idle GPU time charged to its stages (so to the cells that held it).
    s_costs = stage_costs(data.stages, prices, gpu_time(data.location))
    p_costs = point_costs(data.points, s_costs)
    breakdown = cost_breakdown(s_costs)
    by_model = model_costs(s_costs)
    # With no price table at all every model is unpriced: say "no prices" once instead.
    unpriced = unpriced_models(s_costs) if prices.has_prices else []
    use_usd = prices.has_prices and bool(breakdown["usd"].sum() > 0)
    missing = int(p_costs["missing_stages"].sum()) if not p_costs.empty else 0
    if missing:
        notes.append(
            f"{missing} upstream stage reference(s) of points are not in stages.parquet; "
            "those points' costs are incomplete"
        )
    if not cells.empty:
        per_point = stats[["point_id", *keys]].merge(
            p_costs[["point_id", "usd", "tokens"]], on="point_id", how="left"
        )
        cell_cost = per_point.groupby(keys, sort=False)[["usd", "tokens"]].mean()
        cell_cost.columns = ["cost_usd", "cost_tokens"]
        cells = cells.join(cell_cost, on=keys)

    # What stages report of themselves (a brew's training statistics) and their cost.
    figures, figure_notes = load_stage_figures(data)
    notes += figure_notes
    own_tables = stage_tables(data, figures, s_costs)
    notes += [note for table in own_tables for note in table.notes]

    # What a method's own bound left out of its memory (ACE's playbook cut, ExpeL's
    # examples skipped), marked next to its cell before any table is built from them.
    episodes_read, read_notes = scoring_episodes(data)
    notes += read_notes
    cells, bound_notes = mark_cells(cells, data.points, episodes_read)
    notes += bound_notes
    cells = link_cells(cells, stats, data.meta, mlflow_ui)
    tables, table_notes = paper_tables(cells, data.columns)
    notes += table_notes
    notes += repeat_notes(data.points, data.episodes, keys)
    tests = mcnemar_table(stats, data.episodes, keys)
    pairs = steps_against_teacher(stats, data.episodes, keys)
    steps = steps_summary(pairs, keys)
    # Paper table 1 and figure 3: against every reference method, steps per method.
    against = reference_tests(stats, data.episodes, keys, sweep_references(data.meta, references))
    pooled = pooled_tests(against, keys)
    by_method = steps_by_method(cells, keys)
    # A benchmark whose groups are scenarios (AppWorld) has a second official metric.
    scenarios, scenario_notes = scenario_table(stats, data.episodes, keys)
    notes += scenario_notes
    notes += pairing_notes(stats, against, sweep_references(data.meta, references))
    if not cells.empty:
        # The main table's rows (the preferred protocol's cells), with the tests: the
        # report's one method x student x benchmark table, first.
        shown, protocol = _preferred_protocol(cells)
        where = f" (protocol: {protocol})" if protocol else ""
        title = f"Table 1: method × student × benchmark against the references{where}"
        tables.insert(0, table1(shown, pooled, keys, disambiguators(data.columns), title))
        if (data.meta.get("report") or {}).get("groups"):
            grouped, group_notes = grouped_table1(
                shown, stats, data.episodes, data.stages, pooled, keys,
                disambiguators(data.columns), f"Table 1 by test-time group{where}",
            )  # fmt: skip
            # The grouped layout (and its test-time cost table) right after table 1.
            tables[1:1] = grouped
            notes += group_notes

    # Per-note usage of the memories read (AgentBrew §3.5), after the paper's tables.
    usage, usage_notes = note_usage_table(data, episodes_read)
    tables += usage
    notes += usage_notes

    plots: dict[str, Path] = {}
    if not cells.empty:
        makers = {
            "success_vs_k": lambda p: plot_success_vs_k(cells, p, data.columns),
            "student_size": lambda p: plot_student_size(cells, p, data.columns),
            "steps_vs_teacher": lambda p: plot_steps_vs_teacher(pairs, p),
            "success_vs_cost": lambda p: plot_success_vs_cost(cells, use_usd, p, data.columns),
            "steps_by_method": lambda p: plot_steps_by_method(by_method, p, data.columns),
        }
        for name, make in makers.items():
            target = out / PLOT_FILES[name]
            note = make(target)
            if note:
                notes.append(note)
            else:
                plots[name] = target

    point_view = stats[["point_id", *keys, "seed", "n_scored", "rate"]].merge(
        p_costs, on="point_id"
    )
    all_tables: dict[str, pd.DataFrame] = {
        # Numbers only (the formatted labels and links are report.md's).
        "cells": cells.drop(columns=[c for c in CELL_LABELS if c in cells.columns]),
        **{t.name: t.csv for t in tables},
        "mcnemar": tests,
        "mcnemar_references": against,
        "table1_tests": pooled,
        "steps_by_method": by_method,
        "steps_vs_teacher": steps,
        # Only where a benchmark has scenarios: BFCL's report has no such table.
        **({"scenario_goal_completion": scenarios} if not scenarios.empty else {}),
        "costs_breakdown": breakdown,
        "costs_models": by_model,
        "costs_stages": s_costs,
        "costs_points": point_view,
        **{t.name: t.frame for t in own_tables},
        **{f"{t.name}_costs": t.costs for t in own_tables},
    }
    files: list[Path] = []
    for name, frame in all_tables.items():
        target = out / f"{name}.csv"
        frame.to_csv(target, index=False)
        files.append(target)
    summary = {
        "experiment": data.meta.get("experiment"),
        "n_points": len(data.points),
        "n_episodes": len(data.episodes),
        "n_scored": int(data.episodes["success"].notna().sum()),
        "n_infra": int(data.episodes["success"].isna().sum()),
        # Scored failures with their own cause: the conversation outgrew the context.
        "n_context_overflow": int((data.episodes["termination"] == "context_overflow").sum()),
        "seeds": sorted(int(s) for s in data.points["seed"].unique()),
        "cost_line": _cost_line(breakdown, use_usd, unpriced),
        "use_usd": use_usd,
        "unpriced": unpriced,
    }
    markdown = render_markdown(
        data,
        summary,
        tables,
        tests,
        steps,
        breakdown,
        point_view,
        plots,
        notes,
        use_usd,
        references=against,
        steps_method=by_method,
        scenarios=scenarios,
        zero_shot_referenced=_references_zero_shot(against),
        by_model=by_model,
    )
    own_section = render_stage_tables(own_tables, use_usd)
    if own_section:
        markdown = f"{markdown.rstrip()}\n\n{own_section}"
    (out / "report.md").write_text(markdown)
    files = [out / "report.md", *plots.values(), *files]

    report = Report(
        sweep_id=data.sweep_id,
        sweep_dir=data.location.uri,
        out_dir=out,
        markdown=markdown,
        tables=MappingProxyType(all_tables),
        plots=MappingProxyType(plots),
        notes=tuple(notes),
        files=tuple(files),
        picked=picked,
        summary=MappingProxyType(summary),
        views=MappingProxyType({t.name: t.frame for t in tables}),
    )
    return _with_mlflow(report, data.meta, log_to_mlflow)
