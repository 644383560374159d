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
    python bench/methods.py --baselines          # + AgentBrew and its baselines (simulated)
    python bench/methods.py --only-baselines --memory-tasks 200 --queries 100

AgentBrew and its baselines (`--baselines`): Reflexion k = 2, 3, ExpeL, ACE and
AgentBrew's brew build through outcome-driven stages whose cost is model calls, not local
code; their table runs each stage's real program and framework against a simulated world
(bench/outcome_sim.py; AgentBrew's teacher and curator answer in the JSON its program
validates) and gives per memory task the build's plays, calls and tokens, and per
evaluated task the test-time plays, calls, tokens and the memory characters the method's
hooks put in the prompt.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import os
import random
import sys
import tempfile
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from distillery.orchestrator.core.compose import compose, rewrite_role_overrides  # noqa: E402
from distillery.orchestrator.core.config import to_config  # noqa: E402
from distillery.workers.llm.types import ChatResult  # noqa: E402
from distillery.workers.memory.config import EmbedderConfig, StoreConfig  # noqa: E402
from distillery.workers.memory.registry import MEMORY_METHODS, bank_origin, memory_method  # noqa: E402
from distillery.workers.memory.retrieval import Isolation  # noqa: E402
from distillery.workers.memory_service import BankSearch, MemoryJob, MemoryServiceImpl  # noqa: E402

if TYPE_CHECKING:
    from bench.outcome_sim import MemoryRead, PlayView


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


# -- AgentBrew and its baselines: what building and testing cost (bench/outcome_sim.py) -


class _InMemorySearch:
    """A bank's search in process (word overlap; isolation allows everything; a group
    is the collection's `group_field`, as AgentBrew's notes are searched within their
    routed scope), with a play's attempt and staged entries: what the hooks read."""

    def __init__(
        self,
        bank: dict[str, list[Any]],
        staged: tuple[Any, ...] = (),
        attempt: int = 1,
        group_fields: dict[str, str | None] | None = None,
    ) -> None:
        self.bank, self.staged, self.attempt = bank, staged, attempt
        self.group_fields = group_fields or {}
        self.has_bank = bool(bank)

    async def search(self, collection, queries, task_id, k, threshold, group=None, combine="each"):
        from distillery.workers.memory.isolation import Hit

        def score(query: str, text: str) -> float:
            a, b = set(query.lower().split()), set(text.lower().split())
            return len(a & b) / max(1, len(a | b))

        entries = self.bank.get(collection, [])
        field = self.group_fields.get(collection)
        if group is not None and field:
            entries = [e for e in entries if getattr(e, field) == group]
        return [
            [Hit(e, score(q, e.key_text), collection)
             for e in sorted(entries, key=lambda e: -score(q, e.key_text))[:k]]
            for q in queries
        ]  # fmt: skip


async def read_memory(
    kind: str,
    settings: Any,
    task: Any,
    bank: dict[str, list[Any]],
    staged: tuple = (),
    attempt: int = 1,
) -> tuple[int, dict[str, Any]]:
    """What the method's hooks put in `task`'s prompt before its first turn (characters)
    and their record of it (the episode's `extra_json`)."""
    method = memory_method(kind)
    groups = {spec.name: spec.group_field for spec in method.collections}
    search = _InMemorySearch(bank, staged, attempt, groups)
    hooks = method.hooks(task, search, settings, lambda source: True, _no_answer)
    chars = len(await hooks.before_turn(0, task.turns[0], ""))
    return chars, dict(hooks.record())


async def injected_chars(
    kind: str, settings: Any, task: Any, bank: dict[str, list[Any]], staged: tuple = ()
) -> int:
    """What the method's hooks put in `task`'s prompt before its first turn."""
    return (await read_memory(kind, settings, task, bank, staged))[0]


def _by_collection(kind: str, entries: list[Any]) -> dict[str, list[Any]]:
    """A play's live entries as the bank its hooks search (ACE's bullets)."""
    collections = memory_method(kind).collections
    out: dict[str, list[Any]] = {spec.name: [] for spec in collections}
    for entry in entries:
        for spec in collections:
            if isinstance(entry, spec.entry_type):
                out[spec.name].append(entry)
                break
    return out if any(out.values()) else {}


def play_read(kind: str, settings: Any) -> MemoryRead:
    """`outcome_sim.simulate`'s `read`: a play's view through the method's hooks."""

    def read(view: PlayView) -> Awaitable[tuple[int, dict[str, Any]]]:
        bank = _by_collection(kind, view.entries)
        return read_memory(kind, settings, view.task, bank, view.staged, view.attempt)

    return read


def baseline_answer(role: str, messages: list[dict[str, Any]]) -> str:
    """A model's answer of the size the originals' prompts ask for, in their formats."""
    import json as _json

    text = str(messages[-1].get("content") or "")
    if role == "reflector" and "JSON object" in text:  # ACE's reflector
        return _json.dumps({"reasoning": "r" * 600, "key_insight": "Check every unit " * 4,
                            "bullet_tags": []})  # fmt: skip
    if role == "reflector":  # Reflexion's, ExpeL's gathering
        return "The attempt misread a quantity. Plan: " + "list each quantity, " * 12
    if role == "curator":
        add = {"type": "ADD", "section": "others", "content": "Check the units " * 6}
        return _json.dumps({"reasoning": "r" * 300, "operations": [add]})
    if "FAILED TRIAL" in text:
        return "ADD 1: Re-read the question and recompute every step before answering."
    return "AGREE 1: Re-read the question and recompute every step before answering."


def agentbrew_answer(role: str, messages: list[dict[str, Any]]) -> str:
    """AgentBrew's teacher and curator, answering in the formats its program validates
    (`notes.parse_draft`, the curator's verdict), as distillery/testing/agentbrew_scripts.py
    does on BFCL: the teacher writes one note keyed by the problem's main quantity (its
    most frequent word: a GSM8K brew's notes recur over a few skills), three short steps
    of analysis first; the curator merges a candidate into the listed note with its key,
    else adds it."""
    import json as _json
    import re as _re
    from collections import Counter as _Counter

    from bench.outcome_sim import WORDS

    prompt = str(messages[0].get("content") or "")
    if role == "curator":
        blocks = [_json.loads(b) for b in _re.findall(r"```json\n(.*?)\n```", prompt, _re.DOTALL)]
        candidate, existing = blocks[0], blocks[1:]
        same = [n for n in existing if n["note_key"] == candidate["note_key"]]
        if not same:
            return _json.dumps({"decision": "add", "target": "", "reason": "a new skill"})
        merged = {k: candidate[k] for k in ("trigger_pattern", "corrective_rule",
                                            "minimal_steps", "tags", "not_applicable_when")}  # fmt: skip
        verdict = {"decision": "merge", "target": same[0]["note_key"],
                   "reason": "the same rule for the same quantity", "note": merged}  # fmt: skip
        return f"```json\n{_json.dumps(verdict)}\n```"
    found = _re.search(r"The task:\n<<<\n(.*?)\n>>>", prompt, _re.DOTALL)
    words = _Counter(w for w in _re.findall(r"[a-z]+", found.group(1) if found else "")
                     if w in WORDS).most_common(2)  # fmt: skip
    topic, other = (words + [("total", 0), ("each", 0)])[0][0], (words + [("", 0)] * 2)[1][0]
    note = {
        "note_key": f"track-{topic}",
        "scope": "arithmetic_word_problems",
        "scope_description": f"Word problems about {topic}, {other} and the like whose "
        "answer takes several arithmetic steps over the quantities in the text.",
        "trigger_pattern": f"A word problem about {topic} and {other} that asks for a total, "
        "a difference or what remains after several changes.",
        "corrective_rule": f"Write every quantity of {topic} with its unit before computing, "
        "then apply the changes one at a time in the order the problem states them.",
        "minimal_steps": [
            f"List each number the problem gives about {topic} and {other}, with its unit.",
            "Write which quantity the question asks for.",
            "Apply one change per line, in the order of the text.",
            "Check that the result has the unit the question asks for.",
            "Give the final number alone on the last line.",
        ],
        "tags": ["arithmetic", topic, "multi_step"],
        "not_applicable_when": "The problem asks for a ratio or a probability, not an amount.",
        "quality_score": 0.7,
    }
    steps = ("1. Failure mode: the student dropped a change to a quantity. 2. Capability "
             "gap: it keeps no running list of quantities (an execution error). "
             "3. Executable rule: below.")  # fmt: skip
    return f"{steps}\n```json\n{_json.dumps(note, indent=2)}\n```"


def brew_stage(model: Any, settings: Any) -> Any:
    """AgentBrew's brew stage over the simulated tasks; the leakage guard checks each
    task's simulated answer (a number no note holds)."""
    from distillery.workers.memory.agentbrew.stage import BrewStage

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class SimulatedBrew(BrewStage):
        def truths(self, task_id: str) -> tuple[str, ...]:
            return (str(1000 + int(task_id.rsplit("_", 1)[1])),)

    return SimulatedBrew(identity={"benchmark": "gsm8k", "m": "agentbrew"}, upstream=(),
                         label="agentbrew", model=model,
                         other_models={"teacher": model, "curator": model},
                         memory_kind="agentbrew", settings=settings.for_brew_plays(),
                         split="train", wave_size=settings.brew.wave_size,
                         extra={"student": {"model": "sim"}})  # fmt: skip


def bench_baselines(n_memory: int, n_eval: int, p_first: float, p_memory: float) -> list[dict]:
    """Per baseline and AgentBrew: the build's plays, calls and tokens per memory task,
    the bank, and a test-time task's plays, model calls, tokens and injected characters
    (a method that reads a bank: the mean over `n_eval` fresh tasks of one play each)."""
    from bench.outcome_sim import PLAY_TOKENS_IN, REPLY_CHARS, Simulation, simulate, task
    from distillery.workers.llm.config import ModelConfig
    from distillery.workers.memory.ace.settings import AceSettings
    from distillery.workers.memory.ace.stage import AceStage
    from distillery.workers.memory.agentbrew.settings import AgentBrewSettings
    from distillery.workers.memory.expel.settings import ExpelSettings
    from distillery.workers.memory.expel.stage import ExpelStage
    from distillery.workers.memory.reflexion.settings import ReflexionSettings
    from distillery.workers.memory.reflexion.stage import ReflexionStage

    model = ModelConfig(name="sim", backend="external", base_url="http://127.0.0.1:1/v1", model="m")
    reply_tokens = REPLY_CHARS // 4
    rows = []

    def per(sim: Simulation, n: int, roles: tuple[str, ...]) -> dict[str, float]:
        calls = sum(sim.asks[r] for r in roles)
        model_tokens = sum(sim.tokens_in[r] + sim.tokens_out[r] for r in roles)
        play_tokens = sum(PLAY_TOKENS_IN + c // 4 + reply_tokens for c in sim.memory_chars)
        return {
            "plays": sim.plays / n,
            "calls": calls / n,
            "tokens": (model_tokens + play_tokens) / n,
        }

    for k in (2, 3):
        settings = ReflexionSettings(max_attempts=k)
        stage = ReflexionStage(identity={"benchmark": "gsm8k", "k": k}, upstream=(), label="r",
                               model=model, other_models={"reflector": model},
                               memory_kind="reflexion", settings=settings, wave_size=16)  # fmt: skip
        sim = simulate(stage, n_eval, baseline_answer, play_read("reflexion", settings),
                       p_first, p_memory)  # fmt: skip
        test = per(sim, n_eval, ("reflector",))
        rows.append({"name": f"reflexion_k{k}", "build": None, "bank": "none",
                     "test_plays": test["plays"], "test_calls": test["calls"],
                     "test_tokens": test["tokens"],
                     "injected": sum(sim.memory_chars) / max(1, sim.plays),
                     "sim_s": sim.wall_s / n_eval})  # fmt: skip
    agentbrew = AgentBrewSettings()
    for name, settings, answer, roles in (
        ("expel", ExpelSettings(), baseline_answer, ("reflector", "insights")),
        ("ace", AceSettings(), baseline_answer, ("reflector", "curator")),
        ("agentbrew", agentbrew, agentbrew_answer, ("teacher", "curator")),
    ):
        if name == "agentbrew":
            stage = brew_stage(model, settings)
            read = play_read(name, settings.for_brew_plays())  # the brew's own reads
        else:
            stage_type = ExpelStage if name == "expel" else AceStage
            stage = stage_type(identity={"benchmark": "gsm8k", "m": name}, upstream=(),
                               label=name, model=model, other_models={r: model for r in roles},
                               memory_kind=name, settings=settings, split="train")  # fmt: skip
            read = play_read(name, settings)
        sim = simulate(stage, n_memory, answer, read, p_first, p_memory)
        build = per(sim, n_memory, roles)
        rng = random.Random(1)
        probes = [task(n_memory + 1 + i, rng) for i in range(max(1, n_eval))]
        injected = sum(
            asyncio.run(injected_chars(name, settings, probe, sim.bank)) for probe in probes
        ) / len(probes)
        rows.append({"name": name, "build": build,
                     "bank": ",".join(f"{c}={len(v)}" for c, v in sim.bank.items() if v),
                     "test_plays": 1.0, "test_calls": 0.0,
                     "test_tokens": PLAY_TOKENS_IN + injected / 4 + reply_tokens,
                     "injected": injected, "sim_s": sim.wall_s / n_memory})  # fmt: skip
    return rows


def print_baselines(
    rows: list[dict], n_memory: int, n_eval: int, p_first: float, p_memory: float
) -> None:
    print(
        f"\nAgentBrew and its baselines, simulated (bench/outcome_sim.py): {n_memory} memory "
        f"tasks, {n_eval} evaluated tasks, a play solved with p={p_first}, with memory in its "
        f"prompt p={p_memory}; tokens = characters / 4 of the real prompts (GSM8K-sized tasks)"
    )
    header = (
        f"{'method':<14}{'build plays/task':>17}{'calls/task':>11}{'tokens/task':>12}  "
        f"{'test plays/task':>16}{'calls/task':>11}{'tokens/task':>12}{'memory chars':>13}"
        f"{'framework ms/task':>18}  bank"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        b = r["build"]
        build = (f"{b['plays']:>17.2f}{b['calls']:>11.2f}{b['tokens']:>12,.0f}" if b
                 else f"{'-':>17}{'-':>11}{'-':>12}")  # fmt: skip
        print(
            f"{r['name']:<14}{build}  {r['test_plays']:>16.2f}{r['test_calls']:>11.2f}"
            f"{r['test_tokens']:>12,.0f}{r['injected']:>13,.0f}{1000 * r['sim_s']:>18.1f}  {r['bank']}"
        )
    print(
        "build: the stage on the memory split (teacher plays, reflector / insight / curator "
        "calls; AgentBrew's brew: the student's first plays and re-plays, the teacher's "
        "drafts and revisions, the curator's verdicts); test: one evaluated task "
        "(Reflexion's plays and reflections; the others one play whose prompt carries their "
        "memory: ExpeL's insights and 2 examples, ACE's whole playbook, AgentBrew's top-k "
        "notes of the routed scope). Simple RAG and AMD build from one collection play per "
        "task (table above)."
    )


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
    parser.add_argument(
        "--baselines",
        action="store_true",
        help="also AgentBrew's and its baselines' build and test-time cost (simulated)",
    )
    parser.add_argument("--only-baselines", action="store_true", help="those alone")
    parser.add_argument("--memory-tasks", type=int, default=200)
    parser.add_argument("--p-first", type=float, default=0.5)
    parser.add_argument("--p-memory", type=float, default=0.7)
    args = parser.parse_args()
    if args.only_baselines:
        sim = (args.memory_tasks, args.queries, args.p_first, args.p_memory)
        print_baselines(bench_baselines(*sim), *sim)
        return

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
    if args.baselines:
        sim = (args.memory_tasks, args.queries, args.p_first, args.p_memory)
        print_baselines(bench_baselines(*sim), *sim)


if __name__ == "__main__":
    main()
