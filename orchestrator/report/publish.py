"""Logging a written report to the sweep's MLflow parent run."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distillery.redaction import REDACTED

if TYPE_CHECKING:
    from distillery.orchestrator.report.build import Report


def _tracking_store_missing(uri: str) -> str | None:
    """A local store that does not exist: MLflow would silently create an empty one."""
    if uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///"))
    elif uri.startswith("file://"):
        path = Path(uri.removeprefix("file://"))
    elif "://" not in uri:
        path = Path(uri)
    else:
        return None
    return None if path.exists() else str(path)


def log_report(out_dir: Path, tracking_uri: str, run_id: str) -> str:
    """Log every file of `out_dir` to run `run_id` under `report/`; returns the
    artifact URI. Raises on a missing run or store (callers decide how loud to be)."""
    import os

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    missing = _tracking_store_missing(tracking_uri)
    if missing:
        raise FileNotFoundError(
            f"tracking store {missing} not found (a relative tracking URI is resolved from "
            "the directory the report runs in: run it where the sweep ran)"
        )
    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)  # fails loudly for a deleted/unknown run
    client.log_artifacts(run_id, str(out_dir), artifact_path="report")
    client.set_tag(run_id, "distillery.report", "report/report.md")
    return f"{run.info.artifact_uri}/report"


def _with_mlflow(report: Report, meta: Mapping[str, Any], enabled: bool) -> Report:
    run_id = meta.get("parent_run_id")
    uri = meta.get("tracking_uri")
    if not enabled:
        return replace(report, mlflow_note="not logged to MLflow (--no-mlflow)")
    if not run_id or not uri:
        return replace(
            report,
            mlflow_note="not logged to MLflow: sweep.json names no "
            "parent run (the sweep ran without tracking)",
        )
    if REDACTED in str(uri):  # a key in the URI is never stored: the user's own URI
        uri = os.environ.get("MLFLOW_TRACKING_URI", "")
        if not uri:
            return replace(
                report,
                mlflow_failed=True,
                mlflow_note="not logged to MLflow: the sweep's tracking URI held a key, which "
                "is never stored; set MLFLOW_TRACKING_URI to it and run the report again",
            )
    try:
        where = log_report(report.out_dir, str(uri), str(run_id))
    except Exception as exc:  # any store/network error: the files are written anyway
        return replace(
            report,
            mlflow_failed=True,
            mlflow_note=f"could not log to MLflow run {run_id} at {uri}: {exc}",
        )
    return replace(
        report,
        mlflow_run_id=str(run_id),
        mlflow_note=f"logged to MLflow run {run_id} under report/ ({where})",
    )
