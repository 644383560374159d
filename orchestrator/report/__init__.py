"""`distillery report`: paper-style tables, paired tests, plots and costs of a sweep.

    distillery report [SWEEP_DIR | OUTPUT_ROOT] [--out DIR] [--no-mlflow]

Reads only the files a finished sweep leaves in `<output_root>/sweeps/<sweep_id>/`:

- `sweep.json`: sweep_id, tracking_uri, parent_run_id, experiment, created_at, prices,
  git_sha;
- `points.parquet`: one row per evaluation point (method, role, agent, student, teacher,
  student_params_b, benchmark, protocol, memory_types, seed, eval_task_ids_sha, upstream
  stage hashes (its own included), mlflow_run_id) plus its memory method's own report
  columns (`MemoryMethod.report_columns`, listed per row in `method_columns`);
- `episodes.parquet`: one row per (point, task): its group id (the scenario), success
  (null = infrastructure failure, not scored), termination, total_steps, n_llm_calls,
  tokens_in, tokens_out, wall_s;
- `stages.parquet`: one row per distinct stage: kind, model, tokens, embed_tokens,
  wall_s, gpu_s, ran (see `costs.py`).

Their columns are stated once, in `orchestrator/state/sweep_tables.py`: the runner writes the
tables with it and the report checks what it reads against it (a file of another
version names the column it lacks or does not know).

and writes `report.md`, the tables as CSV and the plots as PNG into `--out` (default
`<sweep_dir>/report`), then logs them to the sweep's MLflow parent run under `report/`.

A *cell* is a set of points with the same descriptors except the seed. Its success
rate is pooled over its seeds' scored episodes (n), with a 95 % Wilson interval, and,
when it has several seeds, the mean ± sample std of the per-seed rates. Infrastructure
failures are never scored: they are out of n and counted apart.

A benchmark whose groups are scenarios (AppWorld) also gets scenario goal completion
per point: the share of scenarios all of whose tasks succeeded (`scenarios`).

The package, by job: `load` (the sweep's files), `stats` (rates, intervals, paired
tests), `scenarios` (scenario goal completion), `tables` (paper-style pivots), `plots` (figures), `markdown` (report.md and its
formats), `build` (compute and write a report), `publish` (log it to MLflow), `cli`
(the command).
"""

from distillery.orchestrator.report.build import PLOT_FILES, TABLE_FILES, Report, build_report
from distillery.orchestrator.report.cli import main
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
from distillery.orchestrator.report.plots import (
    plot_steps_vs_teacher,
    plot_student_size,
    plot_success_vs_cost,
    plot_success_vs_k,
)
from distillery.orchestrator.report.publish import log_report
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
    "PLOT_FILES",
    "TABLE_FILES",
    "Report",
    "ReportError",
    "SweepData",
    "Table",
    "build_report",
    "cell_label",
    "cell_table",
    "disambiguators",
    "distinguishing",
    "find_sweep",
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
    "point_stats",
    "render_markdown",
    "representation_label",
    "steps_against_teacher",
    "steps_summary",
]
