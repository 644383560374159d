"""`distillery`: Hydra-composed config -> validated config(s) -> a sweep of stages.

    distillery                                   # experiment=quickstart
    distillery benchmark.limit=20 student=qwen3_4b cluster=ray
    distillery student=external student.base_url=http://host:8000/v1 \\
        student.model=NAME student.api_key_env=MY_KEY_VAR
    distillery -m memory.retrieval.k_wf=1,2,4 seed=0,1   # a sweep (grid of points)
    distillery experiment=bfcl_k_curve --plan    # the stage graph; nothing runs
    distillery -v ...                            # keep Ray's and MLflow's own messages
    distillery memory list|show|export ...       # inspect memory banks
    distillery report [SWEEP_DIR]                # tables, plots, costs of a sweep
    distillery compare RUN_A RUN_B               # per-task disagreement of two points
    distillery submit [--follow] [--k8s] ...     # the sweep on a Ray cluster / KubeRay

Re-running the same command resumes an interrupted sweep: finished stages and
episodes are reused from the ledger under output_dir.

A benchmark of another installed package is found through its entry points:
`distillery.benchmarks` (the adapter) and `distillery.conf` (its config package, e.g.
with benchmark/NAME.yaml, so that `benchmark=NAME` selects it).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from omegaconf import DictConfig  # noqa: E402

from distillery.orchestrator.cli.hydra_flags import (  # noqa: E402
    app_help,
    config_documents,
    hydra_tool,
    parse_flags,
    typo_hint,
)
from distillery.orchestrator.core.compose import (  # noqa: E402
    CONF_ENTRY_POINT_GROUP,
    rewrite_role_overrides,
    sweep_points,
    validated_configs,
)
from distillery.orchestrator.core.config import ConfigError, DistilleryConfig  # noqa: E402
from distillery.orchestrator.core.errors import UserError  # noqa: E402
from distillery.orchestrator.planning.requirements_check import RequirementsError  # noqa: E402
from distillery.workers.envs.base import BenchmarkUnavailable  # noqa: E402

_VERBOSE = ("-v", "--verbose")  # keep third-party libraries' announcements


def run_cli(argv: list[str]) -> int:
    try:
        args = parse_flags(argv)
    except ValueError as exc:  # FlagError: a flag distillery does not take
        return _refuse(exc)
    if args.help:
        print(app_help())
        return 0
    if args.version:
        from importlib.metadata import version

        print(f"distillery {version('distillery')} (Hydra {version('hydra-core')})")
        return 0
    overrides = rewrite_role_overrides(args.overrides)
    if args.hydra_help or args.info:
        return hydra_tool(overrides, args)
    # One validation for --cfg, --plan and a run: the same configs pass or fail, with
    # the same message, before anything prints or starts.
    try:
        points = sweep_points(overrides, multirun=args.multirun)
        # A run names every missing install at once; --plan and --cfg need only the
        # benchmark's package (no model server starts) before they print.
        configs = validate_sweep(points, models=not (args.plan or args.cfg))
    # BenchmarkUnavailable: planning lists the tasks, and an adapter that cannot (no
    # AppWorld data folder, no venv) says what is missing and how to get it. A plan
    # reports it with every other problem of the world (its pre-flight).
    except (RequirementsError, BenchmarkUnavailable) as exc:
        if args.cfg:  # every point composed and validated; what is missing is the
            # pre-flight's to check (data, venvs, keys, GPUs), not a reason to hide it
            validated_configs(points)
            print(
                f"distillery: note: not planned (the pre-flight, --plan, lists what a run "
                f"needs): {exc}",
                file=sys.stderr,
            )
            print(config_documents(points, args.cfg, resolve=args.resolve, package=args.package))
            return 0
        if not args.plan:
            return _refuse(exc)
        from distillery.orchestrator.planning.plan_check import plan_command

        return plan_command(validated_configs(points), unplanned=exc)
    except (ValueError, UserError) as exc:  # ConfigError, a bad split...
        return _refuse(exc)
    except Exception as exc:  # Hydra: an unknown config group or a malformed override
        if type(exc).__module__.startswith(("hydra", "omegaconf")):
            return _refuse_hydra(exc, overrides)
        raise
    if args.cfg:
        print(config_documents(points, args.cfg, resolve=args.resolve, package=args.package))
        return 0

    from distillery import redaction
    from distillery.orchestrator.driver.run import print_summary, run_sweep, unscored_points
    from distillery.orchestrator.planning.requirements_check import check_requirements

    redaction.install()  # keys never reach stdout, stderr or logs, whoever prints them
    from distillery.orchestrator.planning.preflight import run_notices

    for notice in run_notices(configs):  # said before anything runs (and with --plan)
        print(f"distillery: note: {notice}", file=sys.stderr)
    if args.plan:
        from distillery.orchestrator.planning.plan_check import plan_command

        return plan_command(configs)
    try:  # the services a run talks to answer, before Ray starts
        check_requirements(configs, models=False)
    except ValueError as exc:
        return _refuse(exc)
    from distillery.workers.placement import WaitTimeout

    try:
        with _sigterm_interrupts():  # a stopped sweep marks its MLflow runs KILLED
            result = run_sweep(configs)
    except (UserError, ValueError) as exc:  # bad input or a busy output root, before Ray
        return _refuse(exc)
    except WaitTimeout as exc:  # a wait on the cluster passed its deadline: one line
        print(f"distillery: {exc}", file=sys.stderr)
        print("Everything finished is kept: re-run the same command to resume.", file=sys.stderr)
        return 2
    print_summary(result)
    # Unscored episodes left after their retries: the sweep is not finished.
    return 3 if unscored_points(result) else 0


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM (`kill`, a pod deleted) stops the run as Ctrl-C does: every finished
    episode is already in the ledger, the open MLflow runs are marked KILLED and the
    same command resumes it."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def validate_sweep(
    points: list[tuple[list[str], DictConfig]], models: bool = False
) -> list[DistilleryConfig]:
    """Every point typed and validated, then the sweep planned (task ids resolved, the
    protocol's split made, shared runtime checked) and the planned stages' config checked
    as a whole (tracking URI scheme, endpoint URLs, store given one way), without
    running anything or touching disk or network. `--cfg job`, `--plan` and a run all
    pass through here, so they accept and refuse the same configs with the same message.
    What needs I/O (folders writable, a bucket, key variables set, servers answering) is
    checked before a run only: `run_cli`'s service check and `preflight.check_run`."""
    from distillery.orchestrator.planning.plan import plan_sweep
    from distillery.orchestrator.planning.preflight import check_config
    from distillery.orchestrator.planning.requirements_check import check_requirements

    configs = validated_configs(points)
    # What is installed first (planning loads the benchmark's tasks); `models`: the
    # model servers' packages and files too.
    check_requirements(configs, models=models, services=False)
    check_config(plan_sweep(configs))
    return configs


def _registered_without_config(message: str) -> str | None:
    """For Hydra's "Could not find 'benchmark/NAME'" where NAME is a registered
    benchmark (an entry point of another package) whose package ships no config: how to
    select it anyway, and how its package can ship one."""
    found = re.search(r"Could not find 'benchmark/([^']+)'", message)
    if not found:
        return None
    from distillery.workers.envs.registry import known_benchmarks

    name = found.group(1)
    if name not in known_benchmarks():
        return None
    return (
        f"benchmark {name!r} is registered, but no config package on Hydra's search path "
        f"has benchmark/{name}.yaml: select it with benchmark.name={name}, or have its "
        f"package name its config package in the {CONF_ENTRY_POINT_GROUP} entry-point group"
    )


def _refuse_hydra(exc: BaseException, overrides: list[str]) -> int:
    """Hydra's refusal, said so that it helps: a mistyped key gets the key it was
    probably meant to be (Hydra's own message would advise appending the typo with +)."""
    hint = typo_hint(str(exc), overrides)
    if hint:
        print(f"distillery: {hint}", file=sys.stderr)
        print(
            "Fix the key on the command line (or add a new key on purpose with +KEY=VALUE).",
            file=sys.stderr,
        )
        return 2
    code = _refuse(exc)
    hint = _registered_without_config(str(exc))
    if hint:
        print(f"distillery: {hint}", file=sys.stderr)
    return code


def _refuse(exc: BaseException) -> int:
    from distillery.orchestrator.planning.requirements_check import RequirementsError

    if isinstance(exc, RequirementsError):  # one line per missing piece
        for missing in exc.missing:
            print(f"distillery: {missing}", file=sys.stderr)
        return 2
    print(f"distillery: {exc}", file=sys.stderr)
    if isinstance(exc, ConfigError):
        print("Fix the key on the command line or in conf/, then re-run.", file=sys.stderr)
    return 2


def route(argv: list[str]) -> int:
    """`distillery ARGS`: a subcommand (`memory`, `report`, `compare`, `submit`) when
    its name is the first word, else a sweep. `-v`/`--verbose` may stand anywhere,
    before the subcommand too (`distillery -v memory list ...`): it only turns the
    third-party messages back on and is not passed to the subcommand."""
    from distillery import redaction
    from distillery.orchestrator.cli.quiet import quiet_third_party

    # Before anything can print: every subcommand's output, logs and tracebacks are
    # redacted (the keys of this environment and of the command line, such as a URL's
    # userinfo; a sweep adds its configs' own).
    redaction.protect(argv, [a.partition("=")[2] for a in argv])  # `key=URL` overrides too
    quiet_third_party(verbose=any(a in _VERBOSE for a in argv))
    rest = [a for a in argv if a not in _VERBOSE]
    command = rest[0] if rest else None
    if command == "memory":
        from distillery.orchestrator.cli.memory_cli import main as memory_main

        return memory_main(rest[1:])
    if command == "report":
        from distillery.orchestrator.report import main as report_main

        return report_main(rest[1:])
    if command == "compare":
        from distillery.orchestrator.cli.compare import main as compare_main

        return compare_main(rest[1:])
    if command == "submit":
        from distillery.orchestrator.cluster.submit import main as submit_main

        return submit_main(rest[1:])
    return run_cli(argv)  # a sweep: run_cli reads -v itself (one of its flags)


def main() -> None:
    sys.exit(route(sys.argv[1:]))


if __name__ == "__main__":
    main()
