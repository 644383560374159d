"""What a wait for Ray placement says when its deadline passes: one line naming what
it waited for, what each one asks, and what every alive node has free of those
resources (free/total), so that "0/16 episodes after 240 s" becomes "4 of 8 episode
workers not placed in 900 s; each asks CPU 1, distillery_cpu 1; free per node: ...".

Used by every wait for actors or placement groups (episode workers in
orchestrator/execution/dispatch.py, model server replicas in workers/llm/pool.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


class WaitTimeout(RuntimeError):
    """A wait on the cluster passed its deadline; the message is one line: what was
    awaited, for how long, and what each node has free. The CLI prints it alone (exit
    status 2): everything finished is in the ledger, and the same command resumes."""


class PlacementTimeout(WaitTimeout):
    """Workers or replicas were not placed (or not started) within their deadline."""


def bounded_get(ref: Any, timeout_s: float, what: str, resources: Sequence[str] = ()) -> Any:
    """`ray.get(ref)` that waits at most `timeout_s`, then raises WaitTimeout naming
    `what` (e.g. "the memory service's answer to open_bank") and each node's free
    `resources` (with CPU)."""
    import ray
    import ray.exceptions as ray_exceptions

    try:
        return ray.get(ref, timeout=timeout_s)
    except ray_exceptions.GetTimeoutError:
        raise WaitTimeout(
            f"{what}: no answer in {timeout_s:.0f} s; free/total per node: "
            f"{free_per_node(list(resources))}"
        ) from None


def _fmt(value: float) -> str:
    return f"{value:g}"


def free_per_node(names: list[str]) -> str:
    """`node <id8>@<ip>[ head]: CPU 0/4, GPU 0/1; ...` for every alive node, the
    resources in `names` only (plus CPU); never raises (a diagnostic)."""
    try:
        import ray
        from ray._private import state

        available = state.available_resources_per_node()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
    except Exception as exc:  # the diagnostic must not hide the timeout
        return f"(the cluster's resources could not be read: {type(exc).__name__}: {exc})"
    wanted = ["CPU", *[n for n in names if n != "CPU"]]
    parts = []
    for node in nodes:
        node_id = node["NodeID"]
        total = node.get("Resources", {})
        free = available.get(node_id, {})
        head = " head" if "node:__internal_head__" in total else ""
        have = ", ".join(f"{r} {_fmt(free.get(r, 0.0))}/{_fmt(total.get(r, 0.0))}" for r in wanted)
        parts.append(f"node {node_id[:8]}@{node.get('NodeManagerAddress', '?')}{head}: {have}")
    return "; ".join(parts) or "no alive nodes"


def asks(resources: Mapping[str, float]) -> str:
    return ", ".join(f"{k} {_fmt(v)}" for k, v in resources.items() if v) or "nothing"


def placement_message(
    what: str, missing: int, total: int, waited_s: float, each: Sequence[Mapping[str, float]]
) -> str:
    """One line: what was waited for, what each asks, and what each node has free."""
    names = sorted({k for bundle in each for k in bundle})
    asked = " + ".join(f"{{{asks(b)}}}" for b in each)
    return (
        f"{missing} of {total} {what} not placed in {waited_s:.0f} s; each asks {asked}; "
        f"free/total per node: {free_per_node(names)}"
    )
