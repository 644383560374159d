"""`distillery report`: the command line over `build_report`."""

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
