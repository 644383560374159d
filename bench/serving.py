"""Serving benchmarks: replica pools, routing policies, and the driver at scale.

Every server is bench/sim_server.py (a simulated GPU server: a batch cap, a prefill
cost per prompt token not in its LRU prefix cache) started by distillery's own replica
pool on a private local Ray (backend=command, placement groups, health polling), and
driven through the episode workers' router (router.RoutedChat). All ratios come from
runs made side by side in one invocation.

    python bench/serving.py replicas   # throughput with 1, 2, 4, 8 replicas vs R x one
    python bench/serving.py routing    # sticky least-loaded vs round robin vs hashing
    python bench/serving.py driver --episodes 10000   # driver RSS, CPU and MLflow calls
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import hashlib
import inspect
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import httpx  # noqa: E402

from distillery.workers.llm.config import ModelConfig  # noqa: E402
from distillery.workers.llm.pool import start_pool  # noqa: E402
from distillery.workers.llm.router import RoutedChat  # noqa: E402

SIM_SERVER = str(Path(__file__).resolve().parent / "sim_server.py")


def sim_model(
    replicas: int, max_seqs: int, routing: str = "sticky_least_loaded", **server
) -> ModelConfig:
    args = [f"--{k.replace('_', '-')}={v}" for k, v in server.items()]
    return ModelConfig(
        name="sim",
        backend="command",
        model="sim",
        command=(sys.executable, SIM_SERVER, "--port", "{port}", f"--max-seqs={max_seqs}", *args),
        replicas=replicas,
        server_num_cpus=0.1,
        max_concurrency_per_server=max_seqs,
        routing=routing,  # type: ignore[arg-type]
        startup_timeout_s=120,
        max_retries=2,
        max_tokens=1,
    )


def server_stats(urls: list[str]) -> dict[str, int]:
    total: dict[str, int] = {}
    for url in urls:
        for k, v in httpx.get(url.removesuffix("/v1") + "/stats", timeout=10).json().items():
            total[k] = total.get(k, 0) + v
    return total


async def play(
    chat: RoutedChat, episodes: list[tuple[str, list[str]]], concurrency: int
) -> list[float]:
    """Play episodes (a first prompt, then one user message per turn) with at most
    `concurrency` in flight; returns each episode's wall time."""
    gate = asyncio.Semaphore(concurrency)
    walls: list[float] = []

    async def episode(i: int, turns: list[str]) -> None:
        async with gate:
            started = time.perf_counter()
            messages: list[dict] = []
            for text in turns:
                messages.append({"role": "user", "content": text})
                result = await chat.chat(f"ep{i}", messages, max_tokens=1)
                messages.append({"role": "assistant", "content": result.text})
            chat.end_episode(f"ep{i}")
            walls.append(time.perf_counter() - started)

    await asyncio.gather(*(episode(i, turns) for i, (_, turns) in enumerate(episodes)))
    await chat.aclose()
    return walls


def ray_up(num_cpus: int) -> None:
    import ray

    os.environ.setdefault("RAY_raylet_start_wait_time_s", "180")
    for attempt in range(3):  # Ray's start-up can time out on a loaded machine
        try:
            ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
            return
        except Exception:
            if attempt == 2:
                raise
            ray.shutdown()


# -- replica scaling -------------------------------------------------------------------


def bench_replicas(args: argparse.Namespace) -> None:
    """Throughput of 1, 2, 4, 8 replicas, each capped at `max_seqs` requests at once and
    taking `latency_ms` per request (a GPU server's step, not the machine's CPU): every
    slot plays `episodes_per_slot` episodes of `turns` requests, so R replicas ideally
    finish in the same wall time as one, at R times its rate."""
    ray_up(8)
    load_before = os.getloadavg()
    rows = []
    for replicas in args.replicas:
        cfg = sim_model(replicas, args.max_seqs, base_ms=args.latency_ms)
        pool = start_pool(cfg, tempfile.mkdtemp(prefix="bench-logs-"))
        try:
            n_episodes = args.episodes_per_slot * replicas * args.max_seqs
            episodes = [
                (f"e{i}", [f"turn {t} of episode {i}" for t in range(args.turns)])
                for i in range(n_episodes)
            ]
            chat = RoutedChat.from_config(cfg, pool.endpoints, pool.directory)
            before = server_stats(pool.endpoints)
            cpu0 = time.process_time()
            started = time.perf_counter()
            asyncio.run(play(chat, episodes, replicas * args.max_seqs))
            wall = time.perf_counter() - started
            client_cpu = time.process_time() - cpu0
            after = server_stats(pool.endpoints)
            load = os.getloadavg()[0]
        finally:
            pool.shutdown()
        requests = n_episodes * args.turns
        assert after["requests"] == requests
        server_cpu = (after["cpu_ms"] - before["cpu_ms"]) / 1000
        rows.append((replicas, requests, wall, requests / wall, client_cpu, server_cpu, load))
    one = rows[0][3] / rows[0][0]
    ideal = 1000.0 / args.latency_ms * args.max_seqs
    ideal_wall = args.episodes_per_slot * args.turns * args.latency_ms / 1000
    print(
        f"replica scaling: each server serves at most {args.max_seqs} requests at once, "
        f"{args.latency_ms:.0f} ms per request (ideal {ideal:.1f} req/s per replica); "
        f"{args.episodes_per_slot} episodes x {args.turns} turns per slot "
        f"(ideal wall {ideal_wall:.1f} s at any R); sticky least-loaded routing, one "
        f"placement group per replica; load average before {load_before[0]:.2f} "
        f"(1 min), {os.cpu_count()} CPUs"
    )
    print(
        f"{'replicas':>8} {'requests':>8} {'wall s':>7} {'req/s':>7} {'vs R x one':>10} "
        f"{'vs ideal':>8} "
        f"{'client CPU ms/req':>17} {'server CPU ms/req':>17} {'load 1m':>7}"
    )
    for replicas, requests, wall, rate, client_cpu, server_cpu, load in rows:
        print(
            f"{replicas:8d} {requests:8d} {wall:7.2f} {rate:7.1f} {rate / (replicas * one):10.2f} "
            f"{rate / (replicas * ideal):8.2f} {1000 * client_cpu / requests:17.2f} {1000 * server_cpu / requests:17.2f} "
            f"{load:7.2f}"
        )


# -- routing policies -----------------------------------------------------------------


def routing_episodes(n: int, seed: int, shared_tokens: int) -> list[tuple[str, list[str]]]:
    """Agent-like episodes: a shared system prompt (tool docs), a task, then turns that
    each add a tool result; a quarter of them are long."""
    rng = random.Random(seed)
    shared = "tool documentation " * (shared_tokens * 4 // 19)
    out = []
    for i in range(n):
        turns = 16 if i % 4 == 0 else 4
        first = shared + f" task {i}: " + " ".join(f"w{rng.randrange(10**6)}" for _ in range(100))
        steps = [first] + [
            f"observation {t} of {i}: " + " ".join(f"o{rng.randrange(10**6)}" for _ in range(60))
            for t in range(1, turns)
        ]
        out.append((f"e{i}", steps))
    return out


def bench_routing(args: argparse.Namespace) -> None:
    ray_up(8)
    episodes = routing_episodes(args.episodes, 0, args.shared_tokens)
    policies = ("sticky_least_loaded", "round_robin", "consistent_hash")
    runs: dict[str, list[tuple[float, float, float, float]]] = {p: [] for p in policies}
    for _ in range(args.repeats):  # interleaved, so machine load hits every policy alike
        for policy in policies:
            runs[policy].append(route_once(args, episodes, policy))
    print(
        f"routing: {args.episodes} episodes (a quarter 16 turns, the rest 4) over "
        f"{args.replicas} replicas x {args.max_seqs} slots; latency {args.base_ms:.0f} ms + "
        f"{args.ms_per_token} ms per uncached prompt token; LRU prefix cache "
        f"{args.cache_tokens} tokens per replica; median of {args.repeats} runs"
    )
    print(f"{'policy':>20} {'p50 s':>7} {'p90 s':>7} {'wall s':>7} {'cache hit':>9}")
    for policy in policies:
        cols = [statistics.median(col) for col in zip(*runs[policy], strict=True)]
        print(f"{policy:>20} {cols[0]:7.2f} {cols[1]:7.2f} {cols[2]:7.2f} {cols[3]:9.1%}")


def route_once(
    args: argparse.Namespace, episodes: list[tuple[str, list[str]]], policy: str
) -> tuple[float, float, float, float]:
    cfg = sim_model(
        args.replicas,
        args.max_seqs,
        policy,
        base_ms=args.base_ms,
        ms_per_token=args.ms_per_token,
        cache_tokens=args.cache_tokens,
    )
    pool = start_pool(cfg, tempfile.mkdtemp(prefix="bench-logs-"))
    try:
        chat = RoutedChat.from_config(cfg, pool.endpoints, pool.directory)
        started = time.perf_counter()
        walls = asyncio.run(play(chat, episodes, args.replicas * args.max_seqs))
        wall = time.perf_counter() - started
        stats = server_stats(pool.endpoints)
    finally:
        pool.shutdown()
    hit = stats["cached_tokens"] / (stats["cached_tokens"] + stats["uncached_tokens"])
    return statistics.median(walls), statistics.quantiles(walls, n=10)[8], wall, hit


# -- driver at scale ------------------------------------------------------------------


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class CallCounter:
    """Counts the public method calls made on a class (the outermost only: a client
    method calling another is one call), e.g. MlflowClient's, or the tracking store's,
    which is what reaches the database (or, through a tracking server, the REST API).
    One counter per class: a client call's store calls are counted by the store's."""

    def __init__(self, *classes: type) -> None:
        self.calls: Counter[str] = Counter()
        self._depth = threading.local()
        self._saved: list[tuple[type, str, object | None]] = []
        for cls in classes:
            for name in dir(cls):  # its own methods and those it inherits
                fn = inspect.getattr_static(cls, name)
                if not name.startswith("_") and inspect.isfunction(fn):
                    self._saved.append((cls, name, vars(cls).get(name)))
                    setattr(cls, name, self._wrap(f"{cls.__name__}.{name}", fn))

    def _wrap(self, key: str, fn):  # noqa: ANN202
        counter = self

        @functools.wraps(fn)
        def wrapper(*a, **kw):  # noqa: ANN002, ANN003, ANN202
            depth = getattr(counter._depth, "n", 0)
            if depth == 0:
                counter.calls[key] += 1
            counter._depth.n = depth + 1
            try:
                return fn(*a, **kw)
            finally:
                counter._depth.n = depth

        return wrapper

    def total(self, prefix: str) -> int:
        return sum(n for k, n in self.calls.items() if k.startswith(prefix))

    def restore(self) -> None:
        for cls, name, fn in self._saved:
            if fn is None:  # inherited: drop the wrapper, the base's method shows again
                delattr(cls, name)
            else:
                setattr(cls, name, fn)


def bench_driver(args: argparse.Namespace) -> None:
    """Episodes through run_agent (the sweep's dispatcher), then the point logged to
    MLflow (SQLite) by the sweep's own Tracker.log_agent, as results.py's log_points does,
    once per mark (the first 1,000 episodes, 2,000, ...): its time and MLflow calls."""
    from distillery.orchestrator.core.config import ClusterConfig
    from distillery.orchestrator.driver.run import ray_session
    from distillery.orchestrator.execution.dispatch import run_agent
    from distillery.workers.envs.registry import make_benchmark
    from distillery.workers.episodes import AgentJob, EpisodeSummary

    cluster = ClusterConfig(num_workers=2, episodes_per_worker=32, worker_num_cpus=0.5)
    task_ids = [t.task_id for t in make_benchmark("bfcl_multi_turn_base").load_tasks()]
    # The same tasks over and over (each run replaces its episode file): the driver's
    # cost per episode is what is measured, not the tasks'.
    wanted = (task_ids * (args.episodes // len(task_ids) + 1))[: args.episodes]
    cfg = sim_model(2, 32, base_ms=0).model_copy(update={"action_format": "prompt"})
    marks: list[tuple[int, float, float, float]] = []  # (episodes, driver CPU s, RSS MB, wall)
    summaries: list[EpisodeSummary] = []
    with ray_session(cluster), tempfile.TemporaryDirectory() as out:
        pool = start_pool(cfg, Path(out) / "logs")
        try:
            job = AgentJob(
                run_id="bench",
                stage="evaluate",
                role="student",
                model=cfg,
                benchmark="bfcl_multi_turn_base",
                episodes_dir=str(Path(out) / "episodes"),
            )
            started = time.perf_counter()
            marks.append((0, time.process_time(), rss_mb(), 0.0))

            def on_summary(summary: EpisodeSummary) -> None:
                summaries.append(summary)  # as the sweep's ledger keeps them
                if len(summaries) % args.mark_every == 0:
                    marks.append(
                        (
                            len(summaries),
                            time.process_time(),
                            rss_mb(),
                            time.perf_counter() - started,
                        )
                    )

            run_agent(job, pool.endpoints, wanted, cluster, False, on_summary, pool.directory)
        finally:
            pool.shutdown()
        logged = log_to_mlflow(args, Path(out), summaries, [m[0] for m in marks[1:]])
    print(f"driver scale: {args.episodes} short BFCL episodes (text replies) against a fast server")
    print(f"{'episodes':>8} {'driver CPU ms/ep':>17} {'RSS MB':>7} {'episodes/s':>10}")
    for (n0, c0, _, w0), (n1, c1, rss, w1) in zip(marks, marks[1:], strict=False):
        print(
            f"{n1:8d} {1000 * (c1 - c0) / (n1 - n0):17.2f} {rss:7.0f} {(n1 - n0) / (w1 - w0):10.1f}"
        )
    print(
        f"MLflow (SQLite store in a temp dir): the point logged by Tracker.log_agent, as the "
        f"sweep logs an evaluation child run (flattened config params, metrics, the per-"
        f"episode results table, split.json, the dataset input, trajectories folder, "
        f"trace_sample={args.trace_sample}), once from the first N episodes' summaries"
    )
    print(
        f"{'episodes':>8} {'MLflow s':>8} {'client calls':>12} {'store calls':>11} "
        f"{'log_batch':>9} {'RSS MB':>7}"
    )
    for n, seconds, client_calls, store_calls, batches, rss in logged["rows"]:
        print(f"{n:8d} {seconds:8.2f} {client_calls:12d} {store_calls:11d} {batches:9d} {rss:7.0f}")
    print(f"parent run (open + close): {logged['parent']}")
    print("calls of the last child run: " + logged["last_calls"])


def log_to_mlflow(
    args: argparse.Namespace, out: Path, summaries: list, marks: list[int]
) -> dict[str, Any]:
    """Log the point once per mark into a fresh SQLite store, counting the calls."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking import MlflowClient

    from distillery.orchestrator.core.compose import compose
    from distillery.orchestrator.core.config import to_config
    from distillery.orchestrator.execution.metrics import agent_metrics
    from distillery.orchestrator.tracking.results import results_frame
    from distillery.orchestrator.tracking.tracker import EvalDataset, Tracker, safe_params
    from distillery.workers.storage import Location
    from distillery.workers.trajectories import read_episode_file_bytes

    # The params a sweep logs on every child: the flattened validated config.
    params = safe_params(to_config(compose([])).model_dump(mode="json"))
    uri = f"sqlite:///{out / 'mlflow.db'}"
    counter = CallCounter(MlflowClient)
    store_counter = CallCounter(SqlAlchemyStore)

    def both() -> Counter[str]:
        return counter.calls + store_counter.calls

    rows = []
    children: Counter[str] = Counter()
    calls: Counter[str] = Counter()
    try:
        tracker = Tracker(uri, "bench-driver")
        # The episodes' records, for the traces: one file per task (the benchmark plays
        # the same tasks again; the sweep reads the files its ledger names).
        records = []
        if args.trace_sample != 0:
            seen: set[str] = set()
            for s in summaries:
                if s.file and s.file not in seen:
                    seen.add(s.file)
                    rows_of = read_episode_file_bytes(Location.of(s.file).read_bytes())
                    records.extend(r for r in rows_of if r.task_id == s.task_id)
        before = both()
        with tracker.parent("bench-driver", {"episodes": str(len(summaries))}, {}) as parent_id:
            for n in marks:
                first = summaries[:n]
                ids = [s.task_id for s in first]
                sha = hashlib.sha256("\n".join(ids).encode()).hexdigest()
                calls0 = both()
                started = time.perf_counter()
                tracker.log_agent(
                    run_name=f"student:sim n={n}",
                    params={**params, "method": "zero_shot", "eval_n_tasks": str(n)},
                    tags={"benchmark": "bfcl_multi_turn_base"},
                    metrics=agent_metrics(first),
                    results=results_frame(first),
                    episodes_dir=out / "episodes",
                    documents={"split.json": {"eval_task_ids": ids, "eval_task_ids_sha": sha}},
                    point_id=f"n{n}",
                    parent_run_id=parent_id,
                    dataset=EvalDataset("bfcl_multi_turn_base", ids, sha),
                    traces=records,
                    trace_sample=None if args.trace_sample < 0 else args.trace_sample,
                )
                seconds = time.perf_counter() - started
                calls = both() - calls0
                children += calls
                rows.append(
                    (
                        n,
                        seconds,
                        sum(v for k, v in calls.items() if k.startswith("MlflowClient.")),
                        sum(v for k, v in calls.items() if k.startswith("SqlAlchemyStore.")),
                        calls["SqlAlchemyStore.log_batch"],
                        rss_mb(),
                    )
                )
        parent = both() - before - children
    finally:
        counter.restore()
        store_counter.restore()
    return {
        "rows": rows,
        "parent": ", ".join(f"{k} {v}" for k, v in sorted(parent.items())),
        "last_calls": ", ".join(f"{k} {v}" for k, v in sorted(calls.items())),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="bench", required=True)
    rep = sub.add_parser("replicas")
    rep.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4, 8])
    rep.add_argument("--max-seqs", type=int, default=4)
    rep.add_argument("--latency-ms", type=float, default=1000.0)
    rep.add_argument("--turns", type=int, default=4)
    rep.add_argument("--episodes-per-slot", type=int, default=8)
    rout = sub.add_parser("routing")
    rout.add_argument("--replicas", type=int, default=4)
    rout.add_argument("--max-seqs", type=int, default=4)
    rout.add_argument("--episodes", type=int, default=64)
    rout.add_argument("--base-ms", type=float, default=30.0)
    rout.add_argument("--ms-per-token", type=float, default=0.2)
    rout.add_argument("--cache-tokens", type=int, default=16000)
    rout.add_argument("--shared-tokens", type=int, default=1000)
    rout.add_argument("--repeats", type=int, default=3)
    drv = sub.add_parser("driver")
    drv.add_argument("--episodes", type=int, default=10000)
    drv.add_argument("--mark-every", type=int, default=1000)
    drv.add_argument(
        "--trace-sample",
        type=int,
        default=20,
        help="episodes logged as MLflow traces per point (tracking.trace_sample); -1: all",
    )
    args = parser.parse_args()
    {"replicas": bench_replicas, "routing": bench_routing, "driver": bench_driver}[args.bench](args)


if __name__ == "__main__":
    main()
