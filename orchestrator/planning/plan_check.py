"""`distillery ... --plan`: the stage graph, what is cached, the totals of what would
run, and a pre-flight that reports at once every problem a run would stop on
(`readiness`). Nothing runs, nothing is written; the exit status is 2 when a run would
be refused, 0 when every check passed. A config that does not validate, or a sweep
that cannot be planned, is refused first, with the message a run would give."""

from __future__ import annotations

import sys
from typing import TextIO, cast

from distillery.orchestrator.core.config import DistilleryConfig
from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.plan_clock import forecast_wall, format_forecast
from distillery.orchestrator.planning.plan_listing import format_plan, stage_status
from distillery.orchestrator.planning.plan_totals import format_totals, plan_totals
from distillery.orchestrator.planning.preflight import (
    PreflightError,
    check_output_dir,
    check_output_dir_value,
)
from distillery.orchestrator.planning.readiness import Problem, world_problems
from distillery.orchestrator.state.ledger import Ledger


def plan_command(
    configs: list[DistilleryConfig],
    out: TextIO | None = None,
    err: TextIO | None = None,
    *,
    probe_endpoints: bool = True,
    unplanned: BaseException | None = None,
) -> int:
    """The plan of validated `configs` (`cli.validate_sweep`: a config or a plan a run
    would refuse is refused before, with the run's own message) and the pre-flight of
    the world it points at. `unplanned`: why the sweep cannot be planned here (the
    benchmark's package, venv or data missing), reported with the world's problems."""
    out = cast(TextIO, out or sys.stdout)
    err = cast(TextIO, err or sys.stderr)
    problems: list[Problem] = []
    graph = None
    if unplanned is None:
        # What is cached is read from the output root: an object store that does not
        # answer would hang the plan for its client's minutes of retries, so it is
        # checked first, within the pre-flight's bound.
        unreachable = _remote_root_problem(configs[0].output_dir)
        if unreachable is not None:
            problems.append(unreachable)
            print("plan: not made (the output root does not answer; see below)", file=out)
            unplanned = PreflightError(unreachable.text)
    if unplanned is None:
        graph = plan_sweep(configs)
        ledger = Ledger(graph.configs[0].output_dir)
        statuses = stage_status(graph, ledger)
        print(format_plan(graph, statuses), file=out)
        cost = graph.configs[0].cost
        totals = plan_totals(graph, statuses, ledger)
        print(
            format_totals(totals, cost.prices, cost.throughput_tokens_per_s, cost.gpu_hour),
            file=out,
        )
        if totals:  # something still to run calls a model
            forecast = forecast_wall(
                graph,
                statuses,
                ledger,
                cost.throughput_tokens_per_s,
                latency=cost.latency_s,
                trace_s=cost.trace_write_s,
            )
            print(format_forecast(forecast), file=out)
        out.flush()
    elif not problems:  # the benchmark cannot list its tasks: no plan, the world checked
        missing = getattr(unplanned, "missing", None)
        problems += [Problem(str(m)) for m in missing] if missing else [Problem(str(unplanned))]
        print("plan: not made (the benchmark cannot list its tasks here; see below)", file=out)
    said = {p.text for p in problems}
    problems += [
        p
        for p in world_problems(
            configs, graph, probe_endpoints=probe_endpoints, output_root_checked=True
        )
        if p.text not in said
    ]
    if problems:
        for problem in problems:
            print(f"distillery: {problem}", file=err)
        print(
            f"pre-flight: {len(problems)} problem(s), listed above; a run would stop at the "
            "first. Nothing ran.",
            file=err,
        )
        return 2
    print(
        "pre-flight: every check passed. Nothing ran. Drop --plan to run what is not cached.",
        file=out,
    )
    return 0


def _remote_root_problem(output_dir: str) -> Problem | None:
    """Why an object-store output root cannot be read (None: local, or it answers)."""
    try:
        root = check_output_dir_value(output_dir)
        if not root.is_local:
            check_output_dir(output_dir)
    except PreflightError as exc:
        return Problem(str(exc))
    return None
