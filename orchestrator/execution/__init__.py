"""Running the stage graph: the sweep, episode dispatch and worker pools, model servers, memory
and outcome-driven (ordered) stages, what observes a run (observers, heartbeat) and its metrics.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distillery.orchestrator.execution.capacity import Capacity, Demand, Free, Grant, grant
    from distillery.orchestrator.execution.dispatch import INFRA_COUNTS, ray_get, run_agent
    from distillery.orchestrator.execution.episode_pool import EpisodePool, pool_size
    from distillery.orchestrator.execution.gpu_time import ModelGpuTime, ServingClock
    from distillery.orchestrator.execution.heartbeat import Heartbeat
    from distillery.orchestrator.execution.memory_stage import (
        BUILD_CPUS,
        SERVICE_CPUS,
        MemoryStage,
        service_options,
    )
    from distillery.orchestrator.execution.metrics import agent_metrics
    from distillery.orchestrator.execution.observers import QueuedObserver, StageObserver, notify
    from distillery.orchestrator.execution.ordered_run import OrderedRun
    from distillery.orchestrator.execution.ordered_stage import (
        OrderedEpisodeStage,
        Reply,
        TaskContext,
        stage_events,
    )
    from distillery.orchestrator.execution.schedule import StageEnd, StageScheduler
    from distillery.orchestrator.execution.server_pool import ServerPool
    from distillery.orchestrator.execution.sweep import (
        Sweep,
        in_benchmark_order,
        longest_first,
        sweep_id_for,
    )

__all__ = [
    "BUILD_CPUS",
    "Capacity",
    "Demand",
    "EpisodePool",
    "Free",
    "Grant",
    "Heartbeat",
    "INFRA_COUNTS",
    "MemoryStage",
    "ModelGpuTime",
    "OrderedEpisodeStage",
    "OrderedRun",
    "QueuedObserver",
    "Reply",
    "SERVICE_CPUS",
    "ServerPool",
    "ServingClock",
    "StageEnd",
    "StageObserver",
    "StageScheduler",
    "Sweep",
    "TaskContext",
    "agent_metrics",
    "grant",
    "in_benchmark_order",
    "longest_first",
    "notify",
    "pool_size",
    "ray_get",
    "run_agent",
    "service_options",
    "stage_events",
    "sweep_id_for",
]

# Each name's module is imported when the name is first read, so importing one module of the
# package does not import the others (the sweep imports the workers' episode runner and
# pyarrow); pyright sees the imports above (core/exports.py).
if not TYPE_CHECKING:
    from distillery.orchestrator.core.exports import lazy_exports

    __getattr__, __dir__ = lazy_exports(
        __name__,
        {
            "capacity": ("Capacity", "Demand", "Free", "Grant", "grant"),
            "dispatch": ("INFRA_COUNTS", "ray_get", "run_agent"),
            "episode_pool": ("EpisodePool", "pool_size"),
            "gpu_time": ("ModelGpuTime", "ServingClock"),
            "heartbeat": ("Heartbeat",),
            "memory_stage": ("BUILD_CPUS", "SERVICE_CPUS", "MemoryStage", "service_options"),
            "metrics": ("agent_metrics",),
            "observers": ("QueuedObserver", "StageObserver", "notify"),
            "ordered_run": ("OrderedRun",),
            "ordered_stage": ("OrderedEpisodeStage", "Reply", "TaskContext", "stage_events"),
            "schedule": ("StageEnd", "StageScheduler"),
            "server_pool": ("ServerPool",),
            "sweep": ("Sweep", "in_benchmark_order", "longest_first", "sweep_id_for"),
        },
    )
