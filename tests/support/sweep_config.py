"""A sweep's config as the CLI composes it, for tests that run whole sweeps: every
method's catalog file included, outputs and tracking under the test's folder."""

from __future__ import annotations

from pathlib import Path

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides
from distillery.orchestrator.core.config import DistilleryConfig, to_config


def sweep_config(tmp_path: Path, *overrides: str) -> DistilleryConfig:
    cfg = compose(
        rewrite_role_overrides(
            [
                f"output_dir={tmp_path / 'runs'}",
                f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
                "agent.retry_backoff_s=0",
                *overrides,
            ]
        )
    )
    return to_config(cfg)


def scripted_student(url: str, fmt: str = "prompt") -> list[str]:
    """Overrides that make the student the scripted server at `url`."""
    return [
        "student=external",
        f"student.base_url={url}",
        "student.model=scripted",
        f"student.action_format={fmt}",
        "student.max_retries=1",
        "student.retry_backoff_s=0",
    ]
