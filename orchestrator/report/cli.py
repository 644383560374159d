"""`distillery report`: the command line over `build_report`.

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

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from distillery.orchestrator.report.build import build_report
from distillery.orchestrator.report.load import ReportError


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="distillery report",
        description="Tables with 95 % CIs, McNemar tests, plots and costs of a sweep.",
    )
    parser.add_argument(
        "path",
        nargs="?",
        default="distillery_runs",
        help="a sweep directory (<output_dir>/sweeps/<id>) or an output root, whose most "
        "recent sweep is reported (default: distillery_runs)",
    )
    parser.add_argument("--out", default=None, help="where to write (default: SWEEP_DIR/report)")
    parser.add_argument(
        "--no-mlflow",
        action="store_true",
        help="do not log the report to the sweep's MLflow parent run",
    )
    parser.add_argument(
        "--mlflow-ui",
        default=None,
        help="MLflow UI address the table cells link to (default: the tracking server, or "
        "http://127.0.0.1:5000 for a local store)",
    )
    parser.add_argument(
        "--against",
        action="append",
        default=None,
        metavar="METHOD",
        help="a method (catalog name or kind) every student method is tested against "
        "(McNemar, table 1); repeat for several (default: the sweep's report.references)",
    )
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        report = build_report(
            args.path,
            args.out,
            log_to_mlflow=not args.no_mlflow,
            mlflow_ui=args.mlflow_ui,
            references=args.against,
        )
    except ReportError as exc:
        print(f"distillery report: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a folder or file the report reads or writes: the user's to fix
        print(f"distillery report: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    print(report.console())
    if report.mlflow_failed:
        print(f"distillery report: {report.mlflow_note}", file=sys.stderr)
        return 1
    return 0
