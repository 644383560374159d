"""Logging a written report to the sweep's MLflow parent run."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from distillery.redaction import REDACTED, redact

if TYPE_CHECKING:
    from distillery.orchestrator.report.build import Report


def tracking_store_missing(uri: str) -> str | None:
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


# A tracking server that is down or silent costs the report seconds, not MLflow's
# default minutes of retries (7, exponential backoff, 120 s a request).
ANSWER_TIMEOUT_S = 5.0
REPORT_REQUEST_TIMEOUT_S = 20


def _server_silent(uri: str) -> str | None:
    """Why an http(s) tracking server cannot take the report (None: it answers)."""
    if urlsplit(uri).scheme.lower() not in ("http", "https"):
        return None  # a local store or a database: MLflow's own errors are quick
    import httpx

    try:
        httpx.get(uri.rstrip("/") + "/health", timeout=ANSWER_TIMEOUT_S)
    except httpx.HTTPError as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        return f"the tracking server did not answer within {ANSWER_TIMEOUT_S:g} s ({text[:200]})"
    return None


@contextmanager
def bounded_mlflow(timeout_s: int = REPORT_REQUEST_TIMEOUT_S) -> Iterator[None]:
    """MLflow's HTTP retries bounded (one retry, `timeout_s` a request) for the block
    only (the user's own settings win), so a one-off lookup never leaves its bound in
    the process's environment for what runs after it (a sweep's own tracking, or a
    subprocess that inherits the environment)."""
    bounds = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout_s)}
    set_here = [k for k in bounds if k not in os.environ]
    os.environ.update({k: bounds[k] for k in set_here})
    try:
        yield
    finally:
        for key in set_here:
            os.environ.pop(key, None)


def log_report(out_dir: Path, tracking_uri: str, run_id: str) -> str:
    """Log every file of `out_dir` to run `run_id` under `report/`; returns the
    artifact URI. Raises on a missing run or store (callers decide how loud to be)."""
    import os

    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.tracking import MlflowClient

    missing = tracking_store_missing(tracking_uri)
    if missing:
        raise FileNotFoundError(
            f"tracking store {missing} not found (a relative tracking URI is resolved from "
            "the directory the report runs in: run it where the sweep ran)"
        )
    silent = _server_silent(tracking_uri)
    if silent:
        raise ConnectionError(silent)
    with bounded_mlflow():
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
        reason = " ".join(str(exc).split())[:400] or type(exc).__name__
        return replace(
            report,
            mlflow_failed=True,
            mlflow_note=f"not logged to MLflow (run {run_id} at {redact(str(uri))}): {reason}; "
            f"the report's files are in {report.out_dir}",
        )
    return replace(
        report,
        mlflow_run_id=str(run_id),
        mlflow_note=f"logged to MLflow run {run_id} under report/ ({where})",
    )
