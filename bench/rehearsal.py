"""A full-size rehearsal of a paper sweep on simulated GPU servers (issue 41 item 3).

`python bench/rehearsal.py experiment=NAME [overrides] [--scale F] [--limit N]` runs the
experiment at its real task counts and points (or `benchmark.limit=N` tasks where the
machine cannot hold the full size; said in the output) through the RayJob's driver
(`distillery ... cluster=kuberay`), against:

- each student replica: bench/sim_server.py's GPU model (sim.STUDENT_GPU: batch limit,
  prefill per uncached prompt token, prefix cache, decode per output token), started
  by the pool as a backend=command model in a one-GPU vLLM replica's placement, two
  replicas per student (`--replicas`);
- the teacher (and the embedding API): one simulated API server (sim.TEACHER_API);
- every reply written by rehearsal_kit/replies.py (a perfect BFCL agent, memory in
  the prompt or not; the memory builders' prompts get a plain text they reject, so
  their deterministic fallback writes the notes: the builders' calls are made and timed);
- a loopback Ray cluster shaped like k8s/overlays/gpu (`--nodes single`: one node with
  the groups' resources summed, the default on a small machine; `--nodes twin`: the
  cluster twin's node per pod).

Every latency is divided by `--scale` (stated in the output). It prints episodes and
model calls, the wall-clock beside the critical-path bound and the one-stage-at-a-time
schedule (`--plan`'s forecast functions over the measured work and throughputs), GPU
busy / held per model, the driver's peak memory (and its growth with the episodes) and
CPU per model call, Parquet written, the MLflow store's size and its UI's listing time,
`distillery report`'s time, and `--plan`'s forecast made before the run (from the GPU
model's nominal throughput) beside the measured wall-clock.

    python bench/rehearsal.py experiment=bfcl_table1 --scale 4
    python bench/rehearsal.py experiment=bfcl_table1 --limit 2 'sweep.student=[qwen3_4b]'
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

from bench.rehearsal_kit import measure, sim  # noqa: E402
from bench.rehearsal_kit.replies import GSM8K_DATA_ENV  # noqa: E402
from distillery.orchestrator.core.compose import rewrite_role_overrides, sweep_points  # noqa: E402
from distillery.orchestrator.core.config import DistilleryConfig, to_config  # noqa: E402

# A nominal call for the forecast made before the run (the GPU model's throughput at a
# full batch): a BFCL prompt (tool docs + history) mostly in the prefix cache.
NOMINAL_PROMPT, NOMINAL_CACHED, NOMINAL_OUTPUT = 2500, 2200, 40


def say(text: str) -> None:
    print(text, flush=True)


def sweep_overrides(
    args: argparse.Namespace, root: Path, api: str, script: str = sim.BFCL_SCRIPT
) -> list[str]:
    out = [
        *args.overrides,
        "cluster=kuberay",
        f"output_dir={root / 'runs'}",
        f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
        f"teacher.base_url={api}",
        "memory/embedder=text_embedding_3_small",
        f"memory.embedder.base_url={api}",
        *sim.student_overrides(args.scale, args.replicas, script),
    ]
    if args.limit is not None:
        out.append(f"benchmark.limit={args.limit}")
    return out


def compose_points(overrides: list[str]) -> list[DistilleryConfig]:
    return [to_config(c) for _, c in sweep_points(rewrite_role_overrides(overrides), True)]


def api_keys(configs: list[DistilleryConfig]) -> dict[str, str]:
    """A placeholder for every key the simulated APIs are asked with."""
    names = {c.teacher.api_key_env for c in configs} | {c.student.api_key_env for c in configs}
    names |= {c.memory.embedder.api_key_env for c in configs}
    return {n: "simulated" for n in names if n}


def nominal_throughputs(configs: list[DistilleryConfig], scale: float) -> list[str]:
    """cost.throughput_tokens_per_s and cost.latency_s per model for the forecast before
    the run: the GPU model's full batch (the API's: the client's concurrency) and one
    call's latency at the nominal call, in the rehearsal's compressed time."""
    out = {}
    for c in configs:
        out[c.student.name] = sim.STUDENT_GPU.tokens_per_s(
            NOMINAL_PROMPT, NOMINAL_CACHED, NOMINAL_OUTPUT
        )
        api = sim.TEACHER_API
        per_call_s = (api.base_ms + api.decode_ms_per_token * NOMINAL_OUTPUT) / 1000
        tps = c.teacher.max_concurrency_per_server * (NOMINAL_PROMPT + NOMINAL_OUTPUT) / per_call_s
        out[c.teacher.name] = tps
    # A call's latency at the nominal call (the student's alone in its batch).
    gpu, api = sim.STUDENT_GPU, sim.TEACHER_API
    latency = {}
    for c in configs:
        latency[c.student.name] = (
            gpu.base_ms
            + gpu.prefill_ms_per_token * (NOMINAL_PROMPT - NOMINAL_CACHED)
            + gpu.decode_ms_per_token * NOMINAL_OUTPUT
        ) / 1000
        latency[c.teacher.name] = (api.base_ms + api.decode_ms_per_token * NOMINAL_OUTPUT) / 1000
    # One dict override each: a dotted name (llama3.1-8b) cannot be a Hydra key path, but
    # it is a key of a dict value.
    rates = ", ".join(f"{m}: {tps * scale:.0f}" for m, tps in out.items())
    calls = ", ".join(f"{m}: {s / scale:.4g}" for m, s in latency.items())
    return [f"+cost.throughput_tokens_per_s={{{rates}}}", f"+cost.latency_s={{{calls}}}"]


def planned_episodes(configs: list[DistilleryConfig]) -> int:
    from distillery.orchestrator.planning.plan import plan_sweep

    graph = plan_sweep(configs)
    return sum(len(graph.needs.get(k, ())) for k, s in graph.stages.items() if s.plays_episodes)


def run_driver(
    overrides: list[str], env: dict[str, str], root: Path, total: int, timeout_s: float
) -> tuple[float, list[tuple[int, float]], dict[str, float]]:
    """The sweep through the RayJob's CLI: (wall s from joining Ray to the driver's
    exit, [(episodes done, driver RSS MB)], the driver's own usage). A progress line
    every 15 s; killed at `timeout_s`."""
    usage = root / "driver_usage.json"
    log = root / "driver.log"
    command = [sys.executable, str(Path(__file__).parent / "rehearsal_kit" / "driver.py")]
    command += [str(usage), *overrides]
    samples: list[tuple[int, float]] = []
    started = time.monotonic()
    joined = None  # when the driver joined Ray: the sweep's own wall-clock starts
    with log.open("wb") as sink:
        driver = subprocess.Popen(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
        last_said = 0.0
        while driver.poll() is None:
            elapsed = time.monotonic() - started
            if joined is None and "joined the Ray cluster" in log.read_text(errors="replace"):
                joined = time.monotonic()
            done = measure.done_episodes(root / "runs")
            rss = _rss_mb(driver.pid)
            if rss:
                samples.append((done, rss))
            if elapsed - last_said >= 15:
                last_said = elapsed
                tail = _last_line(log)
                say(
                    f"  [{elapsed:6.0f} s] {done:,}/{total:,} episodes, driver {rss:.0f} MB | {tail}"
                )
            if elapsed > timeout_s:
                driver.kill()
                driver.wait(timeout=60)
                raise TimeoutError(f"the sweep ran past {timeout_s:.0f} s (log: {log})")
            time.sleep(2)
    wall = time.monotonic() - (joined or started)
    if driver.returncode != 0:
        raise RuntimeError(f"the driver exited {driver.returncode}:\n{log.read_text()[-4000:]}")
    return wall, samples, json.loads(usage.read_text())


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return lines[-1][:110] if lines else ""


def memory_growth(samples: list[tuple[int, float]], total: int) -> str:
    """The driver's RSS at 1 k and at 10 k episodes (or at a tenth and at the whole of
    a smaller run): the growth the target bounds."""
    if not samples:
        return "no samples"
    low, high = (1000, 10000) if total >= 10000 else (max(1, total // 10), total)

    def at(n: int) -> float:
        return max((rss for done, rss in samples if done <= n), default=samples[0][1])

    a, b = at(low), at(high)
    return f"{a:.0f} MB at {low:,} episodes -> {b:.0f} MB at {high:,}: {b / a:.2f}x"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("overrides", nargs="+", help="experiment=NAME and Hydra overrides")
    parser.add_argument("--scale", type=float, default=4.0, help="every latency divided by")
    parser.add_argument("--limit", type=int, default=None, help="tasks (default: all)")
    parser.add_argument("--replicas", type=int, default=2, help="replicas per student")
    parser.add_argument("--nodes", choices=["single", "twin"], default="single")
    parser.add_argument("--timeout", type=float, default=3600, help="the sweep's deadline, s")
    parser.add_argument("--root", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_intermixed_args()
    # A SIGTERM stops the servers and the Ray nodes this process started (its finally).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(args.root or tempfile.mkdtemp(prefix="rehearsal-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    size = "full size" if args.limit is None else f"REDUCED to benchmark.limit={args.limit}"
    say(f"rehearsal of {' '.join(args.overrides)} ({size}) in {root}")
    say(f"time scale: every simulated latency divided by {args.scale:g}")
    say(f"student replica (simulated vLLM, 1 GPU): {sim.STUDENT_GPU.describe()}")
    say(f"teacher (simulated API): {sim.TEACHER_API.describe()}")
    configs = compose_points(sweep_overrides(args, root, "http://placeholder/v1"))
    script = sim.BFCL_SCRIPT
    if configs[0].benchmark.name == "gsm8k":
        script = sim.GSM8K_SCRIPT
        # The servers find each problem's worked solution in the sweep's data folder.
        os.environ[GSM8K_DATA_ENV] = str(configs[0].benchmark.options["data_path"])
    say(f"replies: {script}")
    students = sorted({c.student.name for c in configs})
    gpu_pods = args.replicas * len(students)
    cluster = configs[0].cluster
    cpu_pods = -(-cluster.num_workers * int(cluster.worker_num_cpus) // 4)
    sandboxed = configs[0].benchmark.name in cluster.sandboxed_benchmarks
    grading_pods = cpu_pods if sandboxed else 0
    say(f"points: {len(configs)}; students {', '.join(students)}; load {os.getloadavg()[0]:.1f}")
    # The run's workers read the API keys on the nodes: set before the nodes start.
    os.environ.update(api_keys(configs))
    ray = sim.start_cluster(args.nodes, 1 if sandboxed else cpu_pods, gpu_pods, grading_pods)
    say(f"ray: {ray.description}")
    try:
        with sim.api_server(args.scale, root / "api.log", script) as api:
            overrides = sweep_overrides(args, root, api, script)
            configs = compose_points(overrides)
            env = {
                **os.environ,
                **ray.env,
                **api_keys(configs),
                "RAY_ADDRESS": ray.address,
                "PYTHONPATH": str(sim.REPO),
            }
            rehearse(args, root, overrides, configs, env, api)
    finally:
        ray.stop()  # type: ignore[operator]


def rehearse(
    args: argparse.Namespace,
    root: Path,
    overrides: list[str],
    configs: list[DistilleryConfig],
    env: dict[str, str],
    api: str,
) -> None:
    nominal = nominal_throughputs(configs, args.scale)
    say("--plan (nominal throughputs and latencies, in the rehearsal's time): " + " ".join(nominal))
    plan = subprocess.run(
        [sys.executable, "-m", "distillery.orchestrator.cli.app", *overrides, *nominal, "--plan"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    (root / "plan.txt").write_text(plan.stdout + plan.stderr)
    forecast = measure.wall_forecast_line(plan.stdout) or f"(no forecast: rc {plan.returncode})"
    say(f"  {forecast}")

    total = planned_episodes(configs)
    say(f"sweep: {total:,} episodes to play; running ...")
    wall, samples, usage = run_driver(overrides, env, root, total, args.timeout)
    report_out(args, root, configs, env, api, wall, samples, usage, forecast)


def report_out(
    args: argparse.Namespace,
    root: Path,
    configs: list[DistilleryConfig],
    env: dict[str, str],
    api: str,
    wall: float,
    samples: list[tuple[int, float]],
    usage: dict[str, float],
    forecast: str,
) -> None:
    gpu = measure.gpu_time(root / "runs")
    api_stats = sim.server_stats(api)
    serving = {m: row["serving_s"] for m, row in gpu.items()}
    teacher = configs[0].teacher.name
    serving[teacher] = api_stats.get("busy_ms", 0) / 1000
    writer, trace_s = measure.trace_writer_line(root / "driver.log")
    work = measure.measured_work(configs, serving, root / "empty", trace_s)
    say("")
    say(f"== rehearsal of {' '.join(args.overrides)} (latencies / {args.scale:g}) ==")
    say(f"episodes: {work.episodes:,}; model calls: {work.calls:,.0f} (ledger)")
    say(
        f"  teacher API requests: {api_stats.get('requests', 0):,}, embedded texts "
        f"{api_stats.get('embedded_texts', 0):,}"
    )
    say(f"wall-clock: {wall:.0f} s (the driver, from joining Ray to its exit)")
    say(f"  {writer}")
    say(
        f"  critical-path bound {work.bound_s:.0f} s (bound / wall = {work.bound_s / wall:.2f}; "
        f"without release times, the longest chain or a model's whole load: "
        f"{work.load_bound_s:.0f} s, {work.load_bound_s / wall:.2f}); one stage at a time "
        f"{work.one_at_a_time_s:.0f} s; the graph schedule simulated {work.wall_graph_s:.0f} s"
    )
    say(
        "  measured throughputs (tokens/s per replica while serving): "
        + ", ".join(f"{m} {t:,.0f}" for m, t in sorted(work.throughput.items()))
    )
    say("GPU time per model (busy = serving / held):")
    held_all = sum(r["gpus"] * r["held_s"] for r in gpu.values())
    serving_all = sum(r["gpus"] * r["serving_s"] for r in gpu.values())
    for model, row in sorted(gpu.items()):
        busy = row["serving_s"] / row["held_s"] if row["held_s"] else 0.0
        say(
            f"  {model}: {row['gpus']:g} GPUs, held {row['held_s']:.0f} s, serving "
            f"{row['serving_s']:.0f} s: {busy:.2f} busy"
        )
    if held_all:
        say(f"  all: {serving_all / held_all:.2f} busy over {held_all / 3600:.3f} GPU-h held")
    say(
        f"driver: peak RSS {usage['max_rss_mb']:.0f} MB; {memory_growth(samples, work.episodes)}; "
        f"CPU {usage['cpu_s']:.0f} s = {1000 * usage['cpu_s'] / max(work.calls, 1):.1f} ms "
        "per model call"
    )
    files, size = measure.parquet_written(root / "runs")
    say(f"Parquet: {files:,} files, {size / 1e6:.1f} MB under the output root")
    db = root / "mlflow.db"
    say(
        f"MLflow store: {measure.tree_bytes(db) / 1e6:.1f} MB (sqlite)"
        + (
            f" + artifacts {measure.tree_bytes(root / 'mlartifacts') / 1e6:.1f} MB"
            if (root / "mlartifacts").exists()
            else ""
        )
    )
    listing = measure.mlflow_listing(db, root / "mlartifacts", root / "mlflow_server.log")
    say(
        f"  MLflow UI: runs page {listing.get('first_page_s', 0):.2f} s; the sweep's "
        f"{listing.get('children', 0)} child runs in {listing.get('children_s', 0):.2f} s"
    )
    report_s = measure.time_report(root / "runs", env, root / "report.log", 900)
    say(f"distillery report: {report_s:.1f} s")
    say(f"--plan before the run: {forecast}")
    say(f"  measured {wall:.0f} s")


if __name__ == "__main__":
    main()
