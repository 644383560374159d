"""Addresses of MLflow runs in the MLflow UI, for reports and `distillery compare`.

Kept free of MLflow imports: a report or a comparison only formats links.
"""

from __future__ import annotations

# The port `distillery` tells users to open the UI on (tracking.ui_hint).
LOCAL_UI = "http://127.0.0.1:5000"


def ui_base(tracking_uri: str | None, ui_url: str | None = None) -> str | None:
    """Where the MLflow UI of `tracking_uri` is served: `ui_url` when given, the server
    itself for an http(s) tracking URI, else the local `mlflow ui` of the hint (a local
    SQLite or file store has no UI until one is started on it). None for stores whose
    UI address cannot be known (e.g. databricks)."""
    if ui_url:
        return ui_url.rstrip("/")
    uri = tracking_uri or ""
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    if uri.startswith("databricks"):
        return None
    if uri.startswith(("sqlite:", "file:")) or "://" not in uri:
        return LOCAL_UI
    return None


def run_url(
    tracking_uri: str | None,
    run_id: str | None,
    experiment_id: str | None = None,
    ui_url: str | None = None,
) -> str | None:
    """The UI page of run `run_id`; None without a run id or a known UI address.

    Without the experiment id the UI's `#/runs/<id>` route is used, which redirects to
    the run's experiment page."""
    base = ui_base(tracking_uri, ui_url)
    if not run_id or base is None:
        return None
    if experiment_id:
        return f"{base}/#/experiments/{experiment_id}/runs/{run_id}"
    return f"{base}/#/runs/{run_id}"


def markdown_link(text: str, url: str | None) -> str:
    """`[text](url)`, or the text alone without a url. Brackets in `text` are escaped so
    a cell label like `62.5% [42.7–78.8]` stays one link."""
    if not url:
        return text
    escaped = text.replace("[", "\\[").replace("]", "\\]")
    return f"[{escaped}]({url})"
