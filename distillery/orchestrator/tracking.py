"""MLflow: one parent run per invocation, one child run per evaluated agent.

Params are the flattened validated config. Keys are never in the config (only the
NAMES of the environment variables holding them), and anything whose name looks like a
secret is redacted anyway before it reaches MLflow.
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

import mlflow  # noqa: E402
import pandas as pd  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

_SECRET_NAME = re.compile(r"(api_?key|token|secret|password)(?!_env)", re.IGNORECASE)
_MAX_PARAM_LEN = 6000


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): data}


def safe_params(config: dict[str, Any]) -> dict[str, str]:
    params = {}
    for key, value in flatten(config).items():
        if _SECRET_NAME.search(key.rsplit(".", 1)[-1]):
            value = "<redacted>"
        text = "" if value is None else str(value)
        params[key] = text[:_MAX_PARAM_LEN]
    return params


def artifact_root_for(uri: str) -> str | None:
    """Artifacts of a local SQLite store go beside the database file."""
    if uri.startswith("sqlite:///"):
        db = Path(uri.removeprefix("sqlite:///"))
        return (db.parent / "mlartifacts").resolve().as_uri()
    return None


class Tracker:
    def __init__(self, uri: str, experiment: str) -> None:
        self.uri = uri
        mlflow.set_tracking_uri(uri)
        client = MlflowClient(uri)
        found = client.get_experiment_by_name(experiment)
        if found is None:
            self.experiment_id = client.create_experiment(
                experiment, artifact_location=artifact_root_for(uri)
            )
        else:
            self.experiment_id = found.experiment_id
        self.experiment = experiment
        self.parent_run_id: str | None = None

    @contextmanager
    def parent(self, run_name: str, params: dict[str, str], tags: dict[str, str]) -> Iterator[str]:
        with mlflow.start_run(
            experiment_id=self.experiment_id, run_name=run_name, tags=tags
        ) as run:
            self.parent_run_id = run.info.run_id
            _log_params(params)
            yield run.info.run_id

    def log_agent(
        self,
        run_name: str,
        params: dict[str, str],
        tags: dict[str, str],
        metrics: dict[str, float],
        results: pd.DataFrame,
        episodes_dir: Path | None,
        documents: dict[str, Any] | None = None,
    ) -> str:
        """A finished child run: params, metrics, the per-task table, the trajectories,
        and small JSON documents (e.g. the evaluated task ids)."""
        with mlflow.start_run(
            experiment_id=self.experiment_id, run_name=run_name, nested=True, tags=tags
        ) as run:
            _log_params(params)
            mlflow.log_metrics(metrics)
            with tempfile.TemporaryDirectory() as tmp:
                table = Path(tmp) / "results.csv"
                results.to_csv(table, index=False)
                mlflow.log_artifact(str(table))
            mlflow.log_table(results, artifact_file="results.json")
            for name, document in (documents or {}).items():
                mlflow.log_dict(document, name)
            if episodes_dir is not None and episodes_dir.exists():
                mlflow.log_artifacts(str(episodes_dir), artifact_path="trajectories")
            return run.info.run_id


def _log_params(params: dict[str, str]) -> None:
    items = list(params.items())
    for i in range(0, len(items), 100):  # MLflow's batch limit
        mlflow.log_params(dict(items[i : i + 100]))


def ui_hint(uri: str) -> str:
    if uri.startswith("sqlite:///"):
        root = artifact_root_for(uri) or ""
        return (
            f"mlflow ui --backend-store-uri {uri} --default-artifact-root {root}"
            " --port 5000   # then open http://127.0.0.1:5000"
        )
    if uri.startswith(("http://", "https://")):
        return f"open {uri} in a browser"
    return f"mlflow ui --backend-store-uri {uri}"
