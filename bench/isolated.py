"""Episodes per second through the process boundary vs in-process benchmarks.

Every reply comes from a model server: distillery's scripted OpenAI-compatible server
(distillery/testing/scripted_server.py, its own process, a fixed `--delay` per call)
answering each request as a perfect player would (`replay` below: the counter's
ground truth, BFCL's through distillery.testing.bfcl_scripts), reached through
distillery's own client path (`RoutedChat` -> `ChatClient` -> the OpenAI SDK, one
`LlmPolicy` per episode, as an episode worker plays). At concurrency 1, 8 and 32 (one
event loop, as in an episode worker), three ways in one run:

- `isolated`: the `isolated_counter` benchmark, one worker process per episode in the
  counter's own venv (`spare_workers` booted ahead): the process boundary;
- `in-process`: the same world module imported here, played on the shared environment
  thread like any in-process benchmark (what the boundary costs is the gap);
- `bfcl in-process`: BFCL's in-process adapter, for scale (its episodes make more
  model calls than the counter's).

Episodes are not written to disk: this measures the environment side and the client,
which is what the boundary changes. Ratios of `isolated` to the two in-process columns
are printed beside them.

    python -m distillery.workers.envs.isolated install \
        distillery.workers.envs.isolated.counter:IsolatedCounter
    python bench/isolated.py --episodes 200 --delay 0.1
    python bench/isolated.py --quick          # 32 episodes a cell, about a minute
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import importlib.util
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distillery.testing import bfcl_scripts  # noqa: E402
from distillery.testing.scripted_server import run_stub_server, stub_stats  # noqa: E402
from distillery.workers.agents.loop import run_agent_loop  # noqa: E402
from distillery.workers.agents.policies import LlmPolicy  # noqa: E402
from distillery.workers.envs.base import ParsedAction, Score, Task, ToolResult  # noqa: E402
from distillery.workers.envs.calls import DEFAULT_LIMITS, parse_text_calls  # noqa: E402
from distillery.workers.envs.conventions import conventions_of  # noqa: E402
from distillery.workers.envs.execution import close_in_env_thread, run_in_env_thread  # noqa: E402
from distillery.workers.envs.isolated.counter import CounterOptions, IsolatedCounter  # noqa: E402
from distillery.workers.envs.registry import make_benchmark  # noqa: E402
from distillery.workers.llm.config import ModelConfig  # noqa: E402
from distillery.workers.llm.router import RoutedChat  # noqa: E402


def _counter_module() -> Any:
    spec = importlib.util.spec_from_file_location("bench_counter_world", IsolatedCounter.world)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class InProcessCounterEnv:
    """The same world module, called directly (what the boundary costs is the gap)."""

    def __init__(self, world: Any, task: Task, prompts: dict[str, str]) -> None:
        self.task = task
        self._world = world.World({}, task.task_id)
        self._prompts = prompts
        self._names = frozenset(d["name"] for d in task.function_docs)

    def system_prompt(self, action_format: str) -> str:
        return self._prompts[action_format]

    def parse_tool_calls(self, tool_calls: list[dict[str, Any]]) -> ParsedAction:
        raise NotImplementedError("the bench plays the prompt format")

    def parse_text(self, text: str) -> ParsedAction:
        return parse_text_calls(text, self._names, DEFAULT_LIMITS)

    def step(self, action: ParsedAction) -> list[ToolResult]:
        wire = [
            {"name": c.name, "args": list(c.args), "kwargs": c.kwargs, "call_id": c.call_id}
            for c in action.calls
        ]
        raw = self._world.step(wire) if wire else []
        return [
            ToolResult(c.source, r["content"], r["error"], c.name, c.call_id)
            for c, r in zip(action.calls, raw, strict=True)
        ]

    def end_turn(self) -> None:
        self._world.end_turn()

    def score(self) -> Score:
        raw = self._world.evaluate()
        return Score(raw["success"], raw["error_type"], raw["error_message"])

    def close(self) -> None:
        self._world.close()


class InProcessCounter:
    """Just enough of a Benchmark for the bench: tasks, oracle, a fresh env."""

    name = "counter_in_process"
    max_steps_per_turn = IsolatedCounter.max_steps_per_turn

    def __init__(self) -> None:
        self._world = _counter_module()
        listed = self._world.list_tasks({})
        self._tasks = [
            (
                Task(
                    item["task_id"], self.name, tuple(item["turns"]), tuple(item["tools"]),
                    tuple(item["function_docs"]), item["group_id"], item["metadata"],
                ),
                item["system_prompts"],
                item["oracle"],
            )
            for item in listed
        ]  # fmt: skip
        self._by_id = {t.task_id: (t, p, o) for t, p, o in self._tasks}

    def load_tasks(self) -> list[Task]:
        return [t for t, _, _ in self._tasks]

    def make_env(self, task: Task, episode_tag: str) -> InProcessCounterEnv:
        return InProcessCounterEnv(self._world, task, self._by_id[task.task_id][1])

    def oracle_turns(self, task: Task) -> list[list[str]]:
        return self._by_id[task.task_id][2]

    def close(self) -> None:
        pass


# -- the model: the scripted server's player ---------------------------------------


@functools.cache
def _counter_truth() -> dict[str, tuple[tuple[str, ...], tuple[tuple[str, ...], ...]]]:
    """The counter's tasks by first user turn: (turns, ground truth per turn)."""
    return {turns[0]: (turns, truth) for _, turns, truth in _counter_module().SPECS}


def replay(request: dict[str, Any]) -> dict[str, Any]:
    """A perfect player in the prompt format, stateless (it runs in the server process):
    the counter's ground truth one call per reply, then a closing reply without calls;
    any other task is BFCL's (`bfcl_scripts.replay_text`)."""
    messages = request["messages"]
    first = next(m["content"] for m in messages if m["role"] == "user")
    known = _counter_truth().get(first)
    if known is None:
        return bfcl_scripts.replay_text(request)
    turns, truth = known
    # The task's own user turns (observations are user messages too, holding JSON).
    said = [i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] in turns]
    turn = len(said) - 1
    made = sum(1 for m in messages[said[-1] :] if m["role"] == "assistant")
    if made < len(truth[turn]):
        return {"content": f"[{truth[turn][made]}]"}
    return {"content": "Done."}


def _model(url: str, concurrency: int) -> ModelConfig:
    return ModelConfig(
        name="scripted",
        backend="external",
        model="scripted",
        base_url=url,
        action_format="prompt",
        max_concurrency_per_server=max(concurrency, 1),
        max_retries=0,
    )


# -- measuring ------------------------------------------------------------------------


async def _episode(bench: Any, task: Task, tag: str, chat: RoutedChat) -> bool | None:
    conventions = conventions_of(bench)
    env = bench.make_env(task, tag)
    policy = LlmPolicy(chat, tag, "prompt", temperature=0.0, max_tokens=256, seed=None)
    try:
        await run_agent_loop(env, policy, bench.max_steps_per_turn, None, conventions=conventions)
        return (await run_in_env_thread(env.score)).success
    finally:
        await policy.close()
        await close_in_env_thread(env.close)


async def _measure(
    bench: Any, tasks: list[Task], episodes: int, concurrency: int, url: str
) -> tuple[float, int]:
    """(episodes per second, episodes that succeeded) of one cell."""
    chat = RoutedChat.from_config(_model(url, concurrency), [url])
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> bool | None:
        async with gate:
            return await _episode(bench, tasks[i % len(tasks)], f"{bench.name}-{i}", chat)

    try:
        started = time.perf_counter()
        results = await asyncio.gather(*[one(i) for i in range(episodes)])
        wall = time.perf_counter() - started
    finally:
        await chat.aclose()
    return episodes / wall, sum(1 for r in results if r)


@dataclass(frozen=True)
class Cell:
    rate: float  # episodes per second
    succeeded: int
    calls_per_episode: float  # model calls the server answered, per episode


def run_cells(
    benches: dict[str, Any], episodes: int, concurrency: list[int], delay_s: float, warmup: int
) -> dict[str, dict[int, Cell]]:
    """Every (benchmark, concurrency) cell against one scripted server."""
    tasks = {name: bench.load_tasks() for name, bench in benches.items()}
    cells: dict[str, dict[int, Cell]] = {name: {} for name in benches}
    script = f"{Path(__file__).stem}:replay"  # this file, on the server's import path
    with run_stub_server(script=script, delay_s=delay_s) as url:
        for level in concurrency:
            for name, bench in benches.items():
                if warmup:
                    asyncio.run(_measure(bench, tasks[name], warmup, level, url))
                before = stub_stats(url).get("requests", 0)
                rate, won = asyncio.run(_measure(bench, tasks[name], episodes, level, url))
                calls = stub_stats(url).get("requests", 0) - before
                cells[name][level] = Cell(rate, won, calls / episodes)
    return cells


def table(cells: dict[str, dict[int, Cell]], delay_s: float, episodes: int) -> str:
    """The cells as a markdown table (docs/performance.md's), ratios beside the rates."""
    names = list(cells)
    ratios = [n for n in names if n != "isolated"]
    head = ["model delay", "concurrency", *(f"{n} ep/s" for n in names)]
    head += [f"isolated / {n}" for n in ratios]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for level in next(iter(cells.values())):
        row = [f"{delay_s:g} s", str(level)]
        row += [f"{cells[n][level].rate:.2f}" for n in names]
        row += [f"{cells['isolated'][level].rate / cells[n][level].rate:.2f}" for n in ratios]
        lines.append("| " + " | ".join(row) + " |")
    calls = ", ".join(
        f"{n} {sum(c.calls_per_episode for c in by.values()) / len(by):.1f}"
        for n, by in cells.items()
    )
    won = ", ".join(
        f"{n} {sum(c.succeeded for c in by.values())}/{episodes * len(by)}"
        for n, by in cells.items()
    )
    return "\n".join([*lines, "", f"model calls per episode: {calls}", f"succeeded: {won}"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=200, help="per cell")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--delay", type=float, default=0.1, help="server latency per call (s)")
    parser.add_argument("--spares", type=int, default=4, help="workers booted ahead")
    parser.add_argument("--warmup", type=int, default=8, help="episodes before each cell")
    parser.add_argument("--no-bfcl", action="store_true", help="skip BFCL's in-process column")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="as many episodes a cell as the highest concurrency, 4 warm-up, delay 0.05 s",
    )
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.warmup, args.delay = max(args.concurrency), 4, 0.05

    benches: dict[str, Any] = {
        "isolated": IsolatedCounter(CounterOptions(spare_workers=args.spares)),
        "in-process": InProcessCounter(),
    }
    if not args.no_bfcl:
        benches["bfcl in-process"] = make_benchmark("bfcl_multi_turn_base")
    try:
        cells = run_cells(benches, args.episodes, args.concurrency, args.delay, args.warmup)
    finally:
        for bench in benches.values():
            close = getattr(bench, "close", None)
            if close is not None:
                close()
    print(f"episodes/s through the scripted server, {args.episodes} episodes per cell")
    print(table(cells, args.delay, args.episodes))


if __name__ == "__main__":
    main()
