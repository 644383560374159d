"""`distillery submit`: the same sweep, run on a Ray cluster instead of here.

    distillery submit [--address URL] [--follow] <overrides>     # Ray Jobs API
    distillery submit --k8s [--overlay gpu] [--out FILE] <overrides>   # a KubeRay RayJob
    distillery submit --k8s --weights <overrides>     # the Job filling the model cache

The overrides are validated here first (a bad config never reaches the cluster) and
the sweep id is computed as `distillery` itself computes it, so the job writes to the
same output root and MLflow parent run: re-submitting the same sweep resumes it. A
sweep that is already running on the cluster is not submitted twice (one run owns an
output root at a time).

With the Jobs API the job's code is this checkout (the working directory is packaged
and uploaded; `.gitignore`d files, the virtualenv and run outputs stay behind) and its
runtime environment carries the variables named with `--env`. With `--k8s` the RayJob
runs the image of the overlay's RayCluster, whose spec it copies, and `--env` wires a
variable from a Kubernetes Secret (k8s.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distillery.orchestrator.cluster import k8s as kuberay
from distillery.orchestrator.cluster.k8s import (
    OUTPUT_DIR_KEY,
    SWEEP_ID_KEY,
    SWEEP_LABEL,
    checkout_root,
)
from distillery.orchestrator.core.config import ConfigError, DistilleryConfig
from distillery.orchestrator.core.errors import UserError
from distillery.workers.envs.base import BenchmarkUnavailable

__all__ = ["OUTPUT_DIR_KEY", "SWEEP_ID_KEY", "SWEEP_LABEL", "checkout_root", "main"]
DEFAULT_ADDRESS = "http://127.0.0.1:8265"
# The job's processes get these whatever the submitting shell has.
JOB_ENV = {
    "HF_HUB_OFFLINE": "1",
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0",
}
# Never uploaded with the working directory (besides what .gitignore lists).
WORKING_DIR_EXCLUDES = [
    ".git",
    ".venv",
    "**/__pycache__",
    "distillery_runs",
    "mlartifacts",
    "mlruns",
    "mlflow.db",
    "multirun",
    "outputs",
]
_ACTIVE = {"PENDING", "RUNNING"}


@dataclass(frozen=True)
class PreparedSweep:
    """A validated sweep as the cluster will run it."""

    sweep_id: str
    overrides: list[str]  # the job's command-line overrides (user's + defaults)
    multirun: bool
    output_dir: str
    tracking_uri: str
    notes: list[str] = field(default_factory=list)  # warnings worth printing
    # The validated configs (the job's), kept so --k8s need not compose them again.
    configs: list[DistilleryConfig] = field(default_factory=list, compare=False, repr=False)

    @property
    def argv(self) -> list[str]:
        return ["-m", *self.overrides] if self.multirun else list(self.overrides)

    @property
    def entrypoint(self) -> str:
        return shlex.join(["python", "-m", "distillery.orchestrator.cli.app", *self.argv])


def override_key(override: str) -> str:
    """`+a.b=1` -> `a.b`; `student=x` and `model@student=x` -> `student`."""
    key = override.split("=", 1)[0].lstrip("+~")
    return key.removeprefix("model@")


def merge_overrides(defaults: Sequence[str], user: Sequence[str]) -> list[str]:
    """The defaults whose key the user did not set, then the user's overrides."""
    given = {override_key(o) for o in user}
    return [d for d in defaults if override_key(d) not in given] + list(user)


def _configs(overrides: list[str], multirun: bool) -> list[DistilleryConfig]:
    from distillery.orchestrator.core.compose import (
        rewrite_role_overrides,
        sweep_points,
        validated_configs,
    )

    return validated_configs(sweep_points(rewrite_role_overrides(overrides), multirun))


def sweep_id_of(configs: list[DistilleryConfig]) -> str:
    from distillery.orchestrator.execution.sweep import sweep_id_for
    from distillery.orchestrator.planning.plan import plan_sweep

    return sweep_id_for(plan_sweep(configs))


def _is_uri(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


def prepare(
    user_overrides: list[str], multirun: bool, defaults: Sequence[str] = (), k8s: bool = False
) -> PreparedSweep:
    """Validate the sweep and pin what must not depend on the job's working directory:
    a local output root and the default SQLite tracking store become absolute paths
    (the job runs in a fresh directory of its own, where relative ones would vanish)."""
    overrides = merge_overrides(defaults, user_overrides)
    configs = _configs(overrides, multirun)
    cfg = configs[0]
    notes = []
    given = {override_key(o) for o in overrides}
    if "cluster" not in given and not cfg.cluster.joins:
        overrides = ["cluster=ray", *overrides]
    if not _is_uri(cfg.output_dir):
        absolute = str(Path(cfg.output_dir.removeprefix("file://")).expanduser().resolve())
        overrides = [o for o in overrides if override_key(o) != "output_dir"]
        overrides.append(f"output_dir={absolute}")
        where = "each pod's own disk, lost with it" if k8s else "the head node's disk"
        notes.append(
            f"output_dir={absolute} is a local path on {where}; a multi-node cluster "
            "needs a shared root (output_dir=s3://bucket/runs) for workers and resumes"
        )
    if cfg.tracking.uri is None:
        overrides.append(f"tracking.uri={cfg.tracking_uri}")
        notes.append(
            f"tracking.uri={cfg.tracking_uri}: a SQLite file on the head node; "
            "point tracking.uri at an MLflow server on a real cluster"
        )
    if overrides != merge_overrides(defaults, user_overrides):
        configs = _configs(overrides, multirun)  # the job's own overrides, validated
    return PreparedSweep(
        sweep_id=sweep_id_of(configs),
        overrides=overrides,
        multirun=multirun,
        output_dir=configs[0].output_dir,
        tracking_uri=configs[0].tracking_uri,
        notes=notes,
        configs=configs,
    )


# -- Ray Jobs API ---------------------------------------------------------------------


def runtime_env(working_dir: Path | None, env_names: Sequence[str]) -> dict[str, Any]:
    env_vars = dict(JOB_ENV)
    for name in env_names:
        if name not in os.environ:
            raise ConfigError(f"--env {name}: the variable is not set in this shell")
        env_vars[name] = os.environ[name]
    runtime: dict[str, Any] = {"env_vars": env_vars}
    if working_dir is not None:
        runtime["working_dir"] = str(working_dir)
        runtime["excludes"] = list(WORKING_DIR_EXCLUDES)
    return runtime


def job_client(address: str) -> Any:
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address)


def jobs_of_sweep(client: Any, sweep_id: str) -> list[Any]:
    """The cluster's jobs of this sweep, oldest first."""
    jobs = [j for j in client.list_jobs() if (j.metadata or {}).get(SWEEP_ID_KEY) == sweep_id]
    return sorted(jobs, key=lambda j: j.start_time or 0)


class AlreadyRunning(RuntimeError):
    """The sweep has a pending or running job on the cluster already."""


@dataclass(frozen=True)
class Submitted:
    job_id: str
    dashboard: str
    attempt: int  # 1 for the sweep's first job on this cluster, 2 for its first resume...


def submit_job(
    client: Any,
    sweep: PreparedSweep,
    runtime: dict[str, Any],
    address: str,
) -> Submitted:
    previous = jobs_of_sweep(client, sweep.sweep_id)
    running = [j for j in previous if _status_name(j.status) in _ACTIVE]
    if running:
        job = running[-1].submission_id
        raise AlreadyRunning(
            f"sweep {sweep.sweep_id} is already running on {address} as job {job}; "
            f"follow it with `ray job logs --address {address} -f {job}` or stop it with "
            f"`ray job stop --address {address} {job}` before submitting it again"
        )
    attempt = len(previous) + 1
    job_id = client.submit_job(
        entrypoint=sweep.entrypoint,
        submission_id=f"distillery-{_slug(sweep.sweep_id)}-{attempt}",
        runtime_env=runtime,
        metadata={
            SWEEP_ID_KEY: sweep.sweep_id,
            OUTPUT_DIR_KEY: sweep.output_dir,
            "distillery.attempt": str(attempt),
        },
    )
    return Submitted(job_id, address, attempt)


async def _tail(client: Any, job_id: str, out: Any) -> None:
    async for chunk in client.tail_job_logs(job_id):
        out.write(chunk)
        out.flush()


def follow(client: Any, job_id: str, out: Any = sys.stdout) -> str:
    """Stream the job's logs until it ends; returns its final status."""
    asyncio.run(_tail(client, job_id, out))
    return str(_status_name(client.get_job_status(job_id)))


def _status_name(status: Any) -> str:
    return getattr(status, "value", None) or str(status)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text)


# -- command line ---------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distillery submit",
        description="Run a sweep on a Ray cluster (Ray Jobs API) or render a KubeRay RayJob.",
        epilog="Everything else is the sweep's overrides, as for `distillery`.",
    )
    parser.add_argument(
        "--address",
        default=None,
        help=f"the cluster's dashboard (default: $RAY_ADDRESS or {DEFAULT_ADDRESS})",
    )
    parser.add_argument("--follow", action="store_true", help="stream the job's logs to its end")
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME",
        help="pass this environment variable to the job (e.g. an API key the config "
        "names); its value is visible to whoever can read the cluster's jobs. With --k8s: "
        f"NAME comes from the key NAME of the Secret {kuberay.KEYS_SECRET}, NAME=SECRET:KEY "
        "from another Secret's key, in every Ray pod (never a value in the manifest)",
    )
    parser.add_argument(
        "--working-dir",
        default=None,
        help="the code to upload (default: this distillery checkout)",
    )
    parser.add_argument("--k8s", action="store_true", help="print a KubeRay RayJob instead")
    parser.add_argument(
        "--overlay",
        default=None,
        help="k8s/overlays/<NAME> (with --k8s; default: gpu when the sweep serves a model "
        "with vLLM, else cpu)",
    )
    parser.add_argument(
        "--weights",
        action="store_true",
        help="with --k8s: print the Job that downloads the sweep's vLLM models into the "
        "model cache instead",
    )
    parser.add_argument("--out", default=None, help="write the RayJob here (with --k8s)")
    parser.add_argument("-m", "--multirun", action="store_true", help="a grid sweep")
    return parser


def dashboard_address(given: str | None) -> str:
    address = given or os.environ.get("RAY_ADDRESS") or DEFAULT_ADDRESS
    if address.startswith("ray://") or "://" not in address:
        # `ray start` prints the GCS address (host:6379); the Jobs API is the dashboard.
        raise ConfigError(
            f"--address {address}: give the cluster's dashboard, e.g. {DEFAULT_ADDRESS}"
        )
    return address


def main(argv: list[str]) -> int:
    args, overrides = _parser().parse_known_args(argv)
    unknown = [o for o in overrides if o.startswith("-")]
    if unknown:
        print(f"distillery submit: unknown option {unknown[0]}", file=sys.stderr)
        return 2
    if (args.weights or args.overlay or args.out) and not args.k8s:
        print("distillery submit: --weights, --overlay and --out need --k8s", file=sys.stderr)
        return 2
    try:
        if args.k8s:
            return _main_k8s(args, overrides)
        return _main_jobs(args, overrides)
    except (ConfigError, UserError, BenchmarkUnavailable) as exc:
        # BenchmarkUnavailable: the sweep is planned here, so a benchmark's data must be
        # here too (docs/cluster.md, "Benchmark data").
        print(f"distillery submit: {exc}", file=sys.stderr)
        return 2


@dataclass(frozen=True)
class RenderedJob:
    job: dict[str, Any]
    sweep: PreparedSweep
    overlay: str
    vllm_models: list[Any]


def render_rayjob(
    user_overrides: list[str],
    multirun: bool,
    overlay: str | None = None,
    env: Sequence[str] = (),
    k8s: Path | None = None,
    weights: bool = False,
) -> RenderedJob:
    """The sweep's RayJob (or, with `weights`, the Job filling the model cache with its
    vLLM models), after every check that needs no cluster."""
    wired = kuberay.parse_env(env)
    template = kuberay.rayjob_template(k8s)
    sweep = prepare(user_overrides, multirun, kuberay.template_defaults(template), k8s=True)
    models = kuberay.vllm_models(
        kuberay.plan_of(sweep.configs or _configs(sweep.overrides, multirun))
    )
    chosen = kuberay.choose_overlay(overlay, models)
    cluster = kuberay.the_raycluster(kuberay.render_overlay(chosen, k8s), chosen)
    kuberay.check_gpu_groups(chosen, cluster, models)
    bare = kuberay.images_without_registry(cluster)
    if bare:
        sweep.notes.append(
            f"image {', '.join(bare)} names no registry: set yours in "
            'k8s/components/images/kustomization.yaml (docs/cluster.md, "Images")'
        )
    if weights:
        if not models:
            raise ConfigError(
                "--weights: the sweep serves no model with vLLM; there are no weights to fetch"
            )
        job = kuberay.build_weights_job(kuberay.weights_template(k8s), cluster, models)
    else:
        job = kuberay.build_rayjob(template, cluster, sweep, wired)
    return RenderedJob(job, sweep, chosen, models)


def _main_k8s(args: argparse.Namespace, overrides: list[str]) -> int:
    import yaml

    rendered = render_rayjob(overrides, args.multirun, args.overlay, args.env, weights=args.weights)
    job, sweep = rendered.job, rendered.sweep
    text = yaml.safe_dump(job, sort_keys=False)
    for note in sweep.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.weights:
        what = f"the weights Job for {', '.join(job['spec']['template']['spec']['containers'][0]['args'])}"
        after = (
            "`kubectl -n distillery wait --for=condition=complete job -l "
            "app.kubernetes.io/name=distillery-weights --timeout=4h` waits for it"
        )
    else:
        label = job["metadata"]["labels"][SWEEP_LABEL]
        what = f"sweep {sweep.sweep_id} (overlay {rendered.overlay})"
        after = f"`kubectl get rayjobs -l {SWEEP_LABEL}={label}` lists its attempts"
    if args.out:
        Path(args.out).write_text(text)
        print(f"{what}: written to {args.out}", file=sys.stderr)
        print(f"  kubectl create -f {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
        print(f"{what}: pipe this into `kubectl create -f -`; {after}", file=sys.stderr)
    return 0


def _main_jobs(args: argparse.Namespace, overrides: list[str]) -> int:
    address = dashboard_address(args.address)
    sweep = prepare(overrides, args.multirun)
    working_dir = Path(args.working_dir).resolve() if args.working_dir else checkout_root()
    runtime = runtime_env(working_dir, args.env)
    if working_dir is None:
        sweep.notes.append(
            "not running from a checkout: the job runs the distillery installed on the "
            "cluster (give --working-dir to upload code)"
        )
    try:
        client = job_client(address)
        submitted = submit_job(client, sweep, runtime, address)
    except AlreadyRunning as exc:
        print(f"distillery submit: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # unreachable, refused (token auth), rejected by the cluster
        print(f"distillery submit: the Ray Jobs API at {address}: {exc}", file=sys.stderr)
        return 1
    for note in sweep.notes:
        print(f"note: {note}")
    resumed = " (resumes it: same output root and MLflow run)" if submitted.attempt > 1 else ""
    print(f"sweep {sweep.sweep_id}: submitted as job {submitted.job_id}{resumed}")
    print(f"  dashboard: {address}/#/jobs/{submitted.job_id}")
    print(f"  output:    {sweep.output_dir}")
    print(f"  tracking:  {sweep.tracking_uri}")
    print(f"  logs:      ray job logs --address {address} -f {submitted.job_id}")
    print(f"  stop:      ray job stop --address {address} {submitted.job_id}")
    sys.stdout.flush()
    if not args.follow:
        return 0
    try:
        status = follow(client, submitted.job_id)
    except KeyboardInterrupt:
        print(f"\nstopped following; job {submitted.job_id} goes on (see `logs:` above)")
        return 130
    print(f"job {submitted.job_id}: {status}")
    return 0 if status == "SUCCEEDED" else 1
