"""`distillery report`: paper-style tables with intervals and paired tests, plots and costs of
a finished sweep, read from its files alone (`report/cli.py` says which) and logged to MLflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.report.build import PLOT_FILES, TABLE_FILES, Report, build_report
    from distillery.orchestrator.report.cli import main
    from distillery.orchestrator.report.costs import (
        PriceTable,
        cost_breakdown,
        point_costs,
        stage_costs,
        unpriced_models,
    )
    from distillery.orchestrator.report.groups import group_of, rollouts_label
    from distillery.orchestrator.report.load import (
        BASE_CELL_KEYS,
        ReportError,
        SweepData,
        find_sweep,
        load_sweep,
        normalize_episodes,
        normalize_points,
    )
    from distillery.orchestrator.report.markdown import markdown_table, render_markdown
    from distillery.orchestrator.report.memory_bounds import MARK, stage_bounds
    from distillery.orchestrator.report.plots import (
        plot_steps_vs_teacher,
        plot_student_size,
        plot_success_vs_cost,
        plot_success_vs_k,
        steps_by_method_figure,
        success_vs_cost_figure,
    )
    from distillery.orchestrator.report.publish import (
        bounded_mlflow,
        log_report,
        tracking_store_missing,
    )
    from distillery.orchestrator.report.repeats import repeat_notes
    from distillery.orchestrator.report.scenarios import scenario_benchmarks
    from distillery.orchestrator.report.stats import (
        cell_label,
        cell_table,
        mcnemar_table,
        point_stats,
        steps_against_teacher,
        steps_summary,
    )
    from distillery.orchestrator.report.tables import (
        DISAMBIGUATORS,
        Table,
        disambiguators,
        distinguishing,
        link_cells,
        paper_tables,
        pivot,
        representation_label,
    )

__all__ = [
    "BASE_CELL_KEYS",
    "DISAMBIGUATORS",
    "MARK",
    "PLOT_FILES",
    "PriceTable",
    "Report",
    "ReportError",
    "SweepData",
    "TABLE_FILES",
    "Table",
    "bounded_mlflow",
    "build_report",
    "cell_label",
    "cell_table",
    "cost_breakdown",
    "disambiguators",
    "distinguishing",
    "find_sweep",
    "group_of",
    "link_cells",
    "load_sweep",
    "log_report",
    "main",
    "markdown_table",
    "mcnemar_table",
    "normalize_episodes",
    "normalize_points",
    "paper_tables",
    "pivot",
    "plot_steps_vs_teacher",
    "plot_student_size",
    "plot_success_vs_cost",
    "plot_success_vs_k",
    "point_costs",
    "point_stats",
    "render_markdown",
    "repeat_notes",
    "representation_label",
    "rollouts_label",
    "scenario_benchmarks",
    "stage_bounds",
    "stage_costs",
    "steps_against_teacher",
    "steps_by_method_figure",
    "steps_summary",
    "success_vs_cost_figure",
    "tracking_store_missing",
    "unpriced_models",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (pandas); pyright sees the imports above
# (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "build": ("PLOT_FILES", "TABLE_FILES", "Report", "build_report"),
            "cli": ("main",),
            "costs": (
                "PriceTable",
                "cost_breakdown",
                "point_costs",
                "stage_costs",
                "unpriced_models",
            ),
            "groups": ("group_of", "rollouts_label"),
            "load": (
                "BASE_CELL_KEYS",
                "ReportError",
                "SweepData",
                "find_sweep",
                "load_sweep",
                "normalize_episodes",
                "normalize_points",
            ),
            "markdown": ("markdown_table", "render_markdown"),
            "memory_bounds": ("MARK", "stage_bounds"),
            "plots": (
                "plot_steps_vs_teacher",
                "plot_student_size",
                "plot_success_vs_cost",
                "plot_success_vs_k",
                "steps_by_method_figure",
                "success_vs_cost_figure",
            ),
            "publish": ("bounded_mlflow", "log_report", "tracking_store_missing"),
            "repeats": ("repeat_notes",),
            "scenarios": ("scenario_benchmarks",),
            "stats": (
                "cell_label",
                "cell_table",
                "mcnemar_table",
                "point_stats",
                "steps_against_teacher",
                "steps_summary",
            ),
            "tables": (
                "DISAMBIGUATORS",
                "Table",
                "disambiguators",
                "distinguishing",
                "link_cells",
                "paper_tables",
                "pivot",
                "representation_label",
            ),
        },
    )
