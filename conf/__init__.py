"""Hydra config tree of distillery.

Model files share one schema (every ModelConfig field with its default), so any field
can be overridden from the command line, e.g. `student.base_url=...`, whatever model
file was selected.
"""

from __future__ import annotations

from typing import Any

from hydra.core.config_store import ConfigStore


def model_schema() -> dict[str, Any]:
    from distillery.workers.llm.config import ModelConfig

    schema: dict[str, Any] = {}
    for name, field in ModelConfig.model_fields.items():
        default = None if field.is_required() else field.get_default(call_default_factory=True)
        schema[name] = list(default) if isinstance(default, tuple) else default
    return schema


def register_schemas() -> None:
    ConfigStore.instance().store(group="model", name="_schema", node=model_schema())


register_schemas()
