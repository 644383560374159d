"""Build time and retrieval latency of every registered memory method, side by side.

One bank per method from the same 200 teacher trajectories: the oracle teacher's
episodes of BFCL V3 multi-turn base (real tasks, real environments, checker-scored),
a fraction of them optionally marked failed (a model teacher fails some; methods that
keep failures, like ReasoningBank, then see both). Every build is deterministic (no
builder model, as with the oracle teacher): the numbers are each method's own code,
not an LLM's latency.

Per method (its default catalog entry, read settings as the config composes them):

- build: `method.build` (+ `render` when its settings read a derived bank), then
  embedding every entry's key and writing the collections (the memory service's
  `write_bank`, the project's default embedder unless --embedder hash);
- retrieval: per evaluated task, every hook call of an episode (`before_turn` of each
  user turn, `after_step` with no observation), through the generic `BankSearch` under
  `self_excluded`, query embedding included; a method that asks the student's model
  (decomposition, keywords) gets an empty reply at once and takes its own fallback, so
  the model's time is excluded. The project's embedder caches: a query equal to a
  stored key (the first user message, which several methods key by, also under
  self_excluded in a real run) costs no model call; `queries/ep` says how many
  queries each method embeds per episode (an uncached MiniLM query costs about
  10 ms on CPU, see bench/retrieval.py).

Ratios are against --baseline (default: AMD WF+ST+FN), listed first.

    python bench/methods.py                      # 200 trajectories, all methods
    python bench/methods.py --embedder hash --queries 50
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from distillery.orchestrator.cli import compose, rewrite_role_overrides  # noqa: E402
from distillery.orchestrator.config import to_config  # noqa: E402
from distillery.workers.llm.types import ChatResult  # noqa: E402
from distillery.workers.memory.config import EmbedderConfig, StoreConfig  # noqa: E402
from distillery.workers.memory.registry import MEMORY_METHODS, bank_origin, memory_method  # noqa: E402
from distillery.workers.memory.retrieval import Isolation  # noqa: E402
from distillery.workers.memory_service import BankSearch, MemoryJob, MemoryServiceImpl  # noqa: E402


class HashEmbedder:
    """A bag of hashed words (no model): isolates the methods' own costs."""

    name = "word-hash"
    dim = 384

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1)


class _Remote:
    """The service actor's `search.remote(...)`, awaitable, in process."""

    def __init__(self, impl: MemoryServiceImpl) -> None:
        self.search = self
        self._impl = impl

    async def remote(self, *args: Any) -> Any:
        return self._impl.search(*args)


class CountingSearch:
    """The bank's search, counting the queries a method's hooks send (each one is a
    query embedding: a cache hit when it equals a stored key, else a model call)."""

    def __init__(self, inner: BankSearch) -> None:
        self.inner = inner
        self.calls = 0
        self.queries = 0

    async def search(self, collection: str, queries: list[str], *args: Any, **kw: Any) -> Any:
        self.calls += 1
        self.queries += len(queries)
        return await self.inner.search(collection, queries, *args, **kw)


async def _no_answer(messages: list[dict[str, Any]]) -> ChatResult:
    return ChatResult(text="")  # the method's own fallback runs


def teacher_episodes(n: int, failed_fraction: float, tmp: str) -> tuple[list, list]:
    from distillery.workers.episodes import AgentJob, EpisodeRunner
    from distillery.workers.llm.config import ModelConfig
    from distillery.workers.trajectories import read_episodes

    oracle = ModelConfig(name="oracle", backend="oracle")
    job = AgentJob("bench", "collect", "teacher", oracle, "bfcl_multi_turn_base", f"{tmp}/eps")
    runner = EpisodeRunner(job)
    tasks = runner.benchmark.load_tasks()[:n]

    async def collect() -> None:
        for task in tasks:  # one at a time: BFCL's environments are module globals
            await runner.run_task(task.task_id)

    asyncio.run(collect())
    episodes = sorted(read_episodes(f"{tmp}/eps"), key=lambda e: e.task_id)
    every = round(1 / failed_fraction) if failed_fraction > 0 else 0
    if every:  # spread over the tasks, not the first ones
        episodes = [
            dataclasses.replace(e, success=False) if i % every == every - 1 else e
            for i, e in enumerate(episodes)
        ]
    return episodes, tasks


def default_entries(cfg: Any) -> dict[str, str]:
    """kind -> catalog name: the entry named as its kind, else the kind's last entry
    (AMD's amd_wf_st_fn); the project's teacher-built methods only."""
    out: dict[str, str] = {}
    for name, method in cfg.method_catalog.items():
        kind = method.kind
        if kind not in MEMORY_METHODS or bank_origin(kind) != "teacher":
            continue
        if out.get(kind) != kind:
            out[kind] = name
    return out


def percentiles(samples: list[float]) -> tuple[float, float]:
    return float(np.percentile(samples, 50)), float(np.percentile(samples, 95))


def bench_method(
    name: str, cfg: Any, episodes: list, tasks: list, embedder: Any, queries: int, tmp: str
) -> dict[str, Any]:
    kind = cfg.method(name).kind
    method = memory_method(kind)
    settings = cfg.retrieval_for(name)
    builder = cfg.memory.builder
    started = time.perf_counter()
    bank = asyncio.run(method.build(episodes, tasks, builder, None, "all"))
    if method.derived_stage(settings):
        bank = asyncio.run(method.render(bank, builder, None))
    build_s = time.perf_counter() - started

    service = MemoryServiceImpl(StoreConfig(path=f"{tmp}/q-{kind}"), EmbedderConfig(), "")
    if embedder is not None:
        service.embedder = embedder
    bank_id = method.bank_id(episodes, cfg.memory, "none", "all")
    started = time.perf_counter()
    service.write_bank(bank_id, bank)
    store_s = time.perf_counter() - started

    isolation = Isolation("self_excluded")
    service.open_bank(bank_id, isolation)
    search = CountingSearch(
        BankSearch(MemoryJob(_Remote(service), bank_id, isolation, settings, kind))
    )
    by_id = {t.task_id: t for t in tasks}
    evaluated = [by_id[e.task_id] for e in episodes][:queries]

    async def episode(task: Any) -> float:
        hooks = method.hooks(
            task, search, settings, lambda s: isolation.allows(s, task.task_id), _no_answer
        )
        prompt = "SYSTEM"
        begun = time.perf_counter()
        for turn, text in enumerate(task.turns):
            prompt = await hooks.before_turn(turn, text, prompt)
            await hooks.after_step(turn, text, [])
        return (time.perf_counter() - begun) * 1000

    asyncio.run(episode(evaluated[0]))  # warm-up (model load, caches)
    search.calls = search.queries = 0
    samples = []
    for task in evaluated:
        samples.append(asyncio.run(episode(task)))
    service.close()
    counts = bank.counts()
    p50, p95 = percentiles(samples)
    return {
        "name": name,
        "kind": kind,
        "entries": sum(counts.values()),
        "collections": ",".join(f"{k}={v}" for k, v in counts.items()),
        "build_s": build_s,
        "store_s": store_s,
        "p50_ms": p50,
        "p95_ms": p95,
        "turns": sum(len(t.turns) for t in evaluated) / len(evaluated),
        "queries": search.queries / len(evaluated),
        "searches": search.calls / len(evaluated),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=200)
    parser.add_argument("--failed-fraction", type=float, default=0.0)
    parser.add_argument("--queries", type=int, default=100, help="evaluated tasks per method")
    parser.add_argument("--methods", nargs="+", help="catalog names (default: one per kind)")
    parser.add_argument("--embedder", choices=["default", "hash"], default="default")
    parser.add_argument(
        "--baseline", default="amd_wf_st_fn", help="the method ratios are against (listed first)"
    )
    args = parser.parse_args()

    started = time.perf_counter()
    cfg = to_config(compose(rewrite_role_overrides(["protocol=self_excluded"])))
    names = args.methods or list(default_entries(cfg).values())
    names.sort(key=lambda n: n != args.baseline)  # the baseline first, the others as listed
    embedder = HashEmbedder() if args.embedder == "hash" else None
    with tempfile.TemporaryDirectory() as tmp:
        episodes, tasks = teacher_episodes(args.trajectories, args.failed_fraction, tmp)
        solved = sum(bool(e.success) for e in episodes)
        print(
            f"{len(episodes)} teacher trajectories ({solved} successful), "
            f"embedder {'word-hash' if embedder else EmbedderConfig().model}, "
            f"{min(args.queries, len(episodes))} evaluated episodes per method, self_excluded"
        )
        rows = [bench_method(n, cfg, episodes, tasks, embedder, args.queries, tmp) for n in names]
    base = rows[0]
    header = (
        f"{'method':<18}{'kind':<16}{'entries':>8}  {'build s':>8}{'embed+store s':>14}"
        f"{'build x':>9}  {'p50 ms/ep':>10}{'p95 ms/ep':>10}{'p50 x':>8}{'queries/ep':>11}  "
        "collections"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        total = r["build_s"] + r["store_s"]
        base_total = base["build_s"] + base["store_s"]
        print(
            f"{r['name']:<18}{r['kind']:<16}{r['entries']:>8}  {r['build_s']:>8.2f}"
            f"{r['store_s']:>14.2f}{total / base_total:>9.2f}  {r['p50_ms']:>10.2f}"
            f"{r['p95_ms']:>10.2f}{r['p50_ms'] / base['p50_ms']:>8.2f}{r['queries']:>11.1f}  "
            f"{r['collections']}"
        )
    print(
        f"ratios (x) against {base['name']}: build = (build + embed+store) / its; "
        f"p50 = retrieval per episode (all its hook calls, {rows[0]['turns']:.1f} turns avg) "
        f"/ its. (bench wall time {time.perf_counter() - started:.0f} s)"
    )


if __name__ == "__main__":
    main()
