"""Memory retrieval latency and build throughput.

1. Retrieval: p50/p95 per memory type at 1 k and 20 k memories with isolation on
   (self_excluded), banks stored in embedded Qdrant and loaded into the retriever.
   Random unit vectors of dim 384 stand in for embeddings (query embedding time is
   reported separately, for MiniLM on one query).
2. Build: trajectories per second against a latency-injecting builder LLM server, the
   builders at concurrency 1 and C side by side.

    python bench/retrieval.py --sizes 1000 20000 --queries 300 --delay 0.2 --concurrency 16
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from distillery.workers.memory.records import (  # noqa: E402
    FunctionRecord,
    MemorySource,
    SegmentStep,
    SubtaskSegment,
    WorkflowMemory,
)
from distillery.workers.memory.retrieval import BankRetriever, Isolation  # noqa: E402
from distillery.workers.memory.store import MemoryStore  # noqa: E402

DIM = 384


class RandomEmbedder:
    name = "random"
    dim = DIM

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def embed(self, texts: list[str]) -> np.ndarray:
        v = self.rng.standard_normal((len(texts), DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)


def synthetic(n: int) -> dict[str, list]:
    """n entries per type; ~6 segments and ~10 function records per source task."""
    wf, st, fn = [], [], []
    for i in range(n):
        src = MemorySource(f"t{i}", "g", "all", "oracle", f"e{i}")
        wf.append(WorkflowMemory(f"wf:{i}", src, f"query {i}", "insight", "cd()", ("cd",)))
        seg_src = MemorySource(f"t{i // 6}", "g", "all", "oracle", f"e{i // 6}")
        step = SegmentStep("cd(folder=<DIR_NAME>)", "ok")
        st.append(SubtaskSegment(f"st:{i}", seg_src, i % 6, "label", f"desc {i}", (step,), ""))
        fn_src = MemorySource(f"t{i // 10}", "g", "all", "oracle", f"e{i // 10}")
        fn.append(FunctionRecord(f"fn:{i}", fn_src, f"f{i % 50}", "f()", "ok", f"instr {i}"))
    return {"wf": wf, "st": st, "fn": fn}


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def bench_retrieval(sizes: list[int], queries: int) -> None:
    embedder = RandomEmbedder()
    iso = Isolation("self_excluded")
    for n in sizes:
        entries = synthetic(n)
        with tempfile.TemporaryDirectory() as tmp:
            store = MemoryStore(path=tmp)
            started = time.perf_counter()
            for kind, items in entries.items():
                store.write("b" * 64, kind, items, embedder.embed([e.key_text for e in items]))
            write_s = time.perf_counter() - started
            started = time.perf_counter()
            retriever = BankRetriever.from_store(store, "b" * 64, embedder, iso)
            load_s = time.perf_counter() - started
            store.close()
        timings: dict[str, list[float]] = {"wf": [], "st": [], "fn": []}
        for q in range(queries):
            task = f"t{q % max(1, n // 10)}"
            for kind, call in (
                ("wf", partial(retriever.workflow, "q", task, 1, None)),
                ("st", partial(retriever.subtasks, ["q"], task, 1, 0.0)),
                ("fn", partial(retriever.functions, f"f{q % 50}", "q", task, 1, None)),
            ):
                started = time.perf_counter()
                call()
                timings[kind].append((time.perf_counter() - started) * 1000)
        print(f"{n:>6} memories/type: upsert {3 * n / write_s:,.0f} entries/s, load {load_s:.2f} s")
        for kind, samples in timings.items():
            p50, p95 = percentiles(samples)
            print(f"         {kind}: p50 {p50:.2f} ms  p95 {p95:.2f} ms  (isolation on)")


def bench_query_embedding() -> None:
    try:
        from distillery.workers.memory.config import EmbedderConfig
        from distillery.workers.memory.embedding import make_embedder
    except ImportError:
        return
    embedder = make_embedder(EmbedderConfig())
    samples = []
    for i in range(50):
        started = time.perf_counter()
        embedder.embed([f"move the report number {i} into the archive folder"])
        samples.append((time.perf_counter() - started) * 1000)
    p50, p95 = percentiles(samples)
    print(f"MiniLM query embedding: p50 {p50:.1f} ms  p95 {p95:.1f} ms (one query, CPU)")


def bench_build(trajectories: int, delay: float, concurrency: int) -> None:
    from distillery.workers.episodes import AgentJob, EpisodeRunner
    from distillery.workers.llm.config import ModelConfig
    from distillery.workers.memory.bank import build_bank
    from distillery.workers.memory.config import BuilderConfig
    from distillery.workers.memory_service import _builder_llm
    from distillery.workers.trajectories import read_episodes
    from tests.support.openai_stub import run_stub_server

    with tempfile.TemporaryDirectory() as tmp:
        oracle = ModelConfig(name="oracle", backend="oracle")
        job = AgentJob("b", "collect", "teacher", oracle, "bfcl_multi_turn_base", f"{tmp}/eps")
        runner = EpisodeRunner(job)
        ids = [f"multi_turn_base_{i}" for i in range(trajectories)]

        async def collect() -> None:
            await asyncio.gather(*(runner.run_task(t) for t in ids))

        asyncio.run(collect())
        episodes = read_episodes(f"{tmp}/eps")
        tasks = runner.benchmark.load_tasks(task_ids=ids)
        model = ModelConfig(
            name="builder",
            backend="external",
            model="stub",
            base_url="http://unused/v1",
            max_concurrency_per_server=concurrency,
        )
        with run_stub_server("tests.support.scripts:always_text", delay_s=delay) as url:
            for c in (1, concurrency):
                llm = _builder_llm(
                    model.model_copy(update={"max_concurrency_per_server": c}), [url]
                )
                started = time.perf_counter()
                bank = asyncio.run(
                    build_bank(episodes, tasks, BuilderConfig(concurrency=c), llm, "all", False)
                )
                wall = time.perf_counter() - started
                requests = sum(bank.stats.requests.values())
                print(
                    f"build at concurrency {c:>3}: {len(episodes) / wall:.2f} trajectories/s "
                    f"({requests} LLM requests, {wall:.1f} s)"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 20000])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--trajectories", type=int, default=24)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    bench_retrieval(args.sizes, args.queries)
    bench_query_embedding()
    bench_build(args.trajectories, args.delay, args.concurrency)


if __name__ == "__main__":
    main()
