"""What every package of the orchestrator may use: the typed run config and its Hydra
composition, evaluation protocols (splits), the error a user can fix, small statistics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.core.compose import (
        CONF_ENTRY_POINT_GROUP,
        PluginConfigError,
        expand_grid,
        plugin_config_paths,
        prepared_overrides,
        rewrite_role_overrides,
        sweep_points,
        validated_configs,
    )
    from distillery.orchestrator.core.config import (
        ClusterConfig,
        ConfigError,
        DistilleryConfig,
        MethodConfig,
        to_config,
    )
    from distillery.orchestrator.core.errors import UserError
    from distillery.orchestrator.core.protocols import (
        ProtocolConfig,
        TaskSplit,
        ids_sha,
        split_apart,
        split_tasks,
    )
    from distillery.orchestrator.core.stats import (
        NO_SCORED_EPISODES,
        McNemar,
        mcnemar,
        percentile,
        wilson_interval,
    )

__all__ = [
    "CONF_ENTRY_POINT_GROUP",
    "ClusterConfig",
    "ConfigError",
    "DistilleryConfig",
    "McNemar",
    "MethodConfig",
    "NO_SCORED_EPISODES",
    "PluginConfigError",
    "ProtocolConfig",
    "TaskSplit",
    "UserError",
    "expand_grid",
    "ids_sha",
    "mcnemar",
    "percentile",
    "plugin_config_paths",
    "prepared_overrides",
    "rewrite_role_overrides",
    "split_apart",
    "split_tasks",
    "sweep_points",
    "to_config",
    "validated_configs",
    "wilson_interval",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (compose imports Hydra); pyright sees the imports above
# (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "compose": (
                "CONF_ENTRY_POINT_GROUP",
                "PluginConfigError",
                "expand_grid",
                "plugin_config_paths",
                "prepared_overrides",
                "rewrite_role_overrides",
                "sweep_points",
                "validated_configs",
            ),
            "config": (
                "ClusterConfig",
                "ConfigError",
                "DistilleryConfig",
                "MethodConfig",
                "to_config",
            ),
            "errors": ("UserError",),
            "protocols": ("ProtocolConfig", "TaskSplit", "ids_sha", "split_apart", "split_tasks"),
            "stats": ("McNemar", "NO_SCORED_EPISODES", "mcnemar", "percentile", "wilson_interval"),
        },
    )
