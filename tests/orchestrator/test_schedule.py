"""The stage graph run as a graph: ready stages run at once, a failure stops only its
readers, the cap holds, every model's servers are released when its stages have ended.

The sweep is a stand-in (stages whose `run` is a test's function); the real sweep is
run by the end-to-end tests, whose independent stages now run at once.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from distillery.orchestrator.core.config import ClusterConfig
from distillery.orchestrator.execution.schedule import StageScheduler
from distillery.orchestrator.stages.stage import StageKey
from distillery.workers.llm.config import ModelConfig

WAIT_S = 60  # a barrier's deadline: far above any scheduling delay, reached only on a bug


def _model(name: str) -> ModelConfig:
    return ModelConfig(name=name, backend="external", model=name, base_url=f"http://{name}/v1")


@dataclass
class FakeStage:
    key: StageKey
    upstream: tuple[StageKey, ...]
    model: ModelConfig | None
    body: Any  # called with the stage key when it runs; returns whether it ran
    episodes: int = 0

    @property
    def models(self) -> dict[str, ModelConfig]:
        return {"student": self.model} if self.model is not None else {}

    def episode_demand(self, ledger: Any, needs: set[str]) -> int:
        return self.episodes

    def run(self, sweep: Any, prefix: str) -> bool:
        return self.body(self.key)


@dataclass
class FakeGraph:
    stages: dict[StageKey, FakeStage]
    needs: dict[StageKey, set[str]] = field(default_factory=dict)

    def depth(self, key: StageKey) -> int:
        ups = self.stages[key].upstream
        return 0 if not ups else 1 + max(self.depth(u) for u in ups)


class FakeLedger:
    def __init__(self) -> None:
        self.runs: list[StageKey] = []

    def describe(self, stage: Any) -> None:
        pass

    def record_run(self, key: StageKey, wall_s: float, gpu_s: float, by_model: Any) -> None:
        self.runs.append(key)


class FakeServers:
    def __init__(self) -> None:
        self.ended: list[StageKey] = []

    def stage_gpu_s(self, key: StageKey) -> dict[str, float]:
        return {}

    def stage_ended(self, key: StageKey) -> None:
        self.ended.append(key)


class FakeSweep:
    def __init__(self, stages: list[FakeStage], **cluster: Any) -> None:
        self.graph = FakeGraph({s.key: s for s in stages})
        self.cfg = type("Cfg", (), {"cluster": ClusterConfig(**cluster)})()
        self.ledger = FakeLedger()
        self.servers = FakeServers()
        self.grants: dict[StageKey, Any] = {}
        self.dispatch_left: dict[StageKey, int] = {}
        self.started_at: dict[StageKey, float] = {}
        self.stages_run = self.stages_cached = 0
        self.said: list[str] = []
        self.events: list[tuple[str, StageKey]] = []
        self._lock = threading.Lock()

    def model_order(self, key: StageKey) -> str:
        model = self.graph.stages[key].model
        return model.name if model else ""

    def episode_model(self, stage: FakeStage) -> ModelConfig:
        assert stage.model is not None
        return stage.model

    def notify(self, event: str, key: StageKey, *args: Any) -> None:
        with self._lock:
            self.events.append((event, key))

    def line(self, stage: FakeStage) -> str:
        return f"stage {stage.key.digest}"

    def say(self, text: str) -> None:
        self.said.append(text)


def _key(name: str) -> StageKey:
    return StageKey("evaluate", name)


def test_independent_stages_run_at_once_and_a_reader_after_its_inputs():
    # Two students' stages can only pass the barrier together: run one at a time, the
    # first would wait for the second until the deadline and fail.
    together = threading.Barrier(2, timeout=WAIT_S)
    order: list[str] = []

    def meet(key: StageKey) -> bool:
        together.wait()
        order.append(key.digest)
        return True

    def read(key: StageKey) -> bool:
        order.append(key.digest)
        return True

    a = FakeStage(_key("a"), (), _model("student-a"), meet, episodes=10)
    b = FakeStage(_key("b"), (), _model("student-b"), meet, episodes=10)
    reader = FakeStage(_key("r"), (a.key, b.key), None, read)
    sweep = FakeSweep([reader, a, b])
    ends = StageScheduler(sweep).run()
    assert {e.key.digest: e.state for e in ends} == {"a": "ran", "b": "ran", "r": "ran"}
    assert order[-1] == "r"
    assert sweep.stages_run == 3
    assert Counter(sweep.servers.ended) == Counter([a.key, b.key, reader.key])
    assert not sweep.grants  # every grant handed back


def test_a_failed_stage_stops_only_its_readers_and_is_raised_after_the_rest():
    class Broken(RuntimeError):
        pass

    def fail(key: StageKey) -> bool:
        raise Broken("the teacher's server refused the request")

    ran: list[str] = []

    def ok(key: StageKey) -> bool:
        ran.append(key.digest)
        return True

    collect = FakeStage(_key("collect"), (), _model("teacher"), fail, episodes=5)
    build = FakeStage(_key("build"), (collect.key,), None, ok)
    evaluate = FakeStage(_key("memory"), (build.key,), _model("student"), ok, episodes=5)
    zero_shot = FakeStage(_key("zero_shot"), (), _model("student"), ok, episodes=5)
    other = FakeStage(_key("other"), (zero_shot.key,), None, ok)
    sweep = FakeSweep([collect, build, evaluate, zero_shot, other])
    scheduler = StageScheduler(sweep)
    with pytest.raises(Broken, match="refused"):
        scheduler.run()
    states = {k.digest: e.state for k, e in scheduler.ends.items()}
    assert states == {
        "collect": "failed",
        "build": "not run",
        "memory": "not run",
        "zero_shot": "ran",
        "other": "ran",
    }
    assert sorted(ran) == ["other", "zero_shot"]
    summary = "\n".join(sweep.said)
    assert "1 stage(s) failed, 2 did not run" in summary
    assert "it reads evaluate:collect, which failed" in summary
    assert "Broken: the teacher's server refused the request" in summary
    # Every stage ended, run or not: its servers are released.
    assert Counter(sweep.servers.ended) == Counter(k for k in sweep.graph.stages)


def test_the_cap_keeps_stages_one_at_a_time():
    running = Counter[str]()
    most = [0]
    lock = threading.Lock()

    def work(key: StageKey) -> bool:
        with lock:
            running["now"] += 1
            most[0] = max(most[0], running["now"])
        threading.Event().wait(0.05)
        with lock:
            running["now"] -= 1
        return True

    stages = [FakeStage(_key(n), (), _model(f"s{n}"), work, episodes=3) for n in "abcd"]
    sweep = FakeSweep(stages, max_stages_in_flight=1)
    StageScheduler(sweep, max_in_flight=1).run()
    assert most[0] == 1 and sweep.stages_run == 4


def test_stages_of_one_model_share_its_request_slots():
    model = _model("student").model_copy(update={"max_concurrency_per_server": 6})
    seen: dict[str, Any] = {}
    together = threading.Barrier(3, timeout=WAIT_S)

    def hold(key: StageKey) -> bool:
        seen[key.digest] = sweep.grants[key]
        together.wait()
        return True

    stages = [FakeStage(_key(n), (), model, hold, episodes=100) for n in "abc"]
    sweep = FakeSweep(stages, num_workers=3, episodes_per_worker=4)
    StageScheduler(sweep).run()
    assert sum(g.per_replica for g in seen.values()) == 6
    assert all(g.per_replica == 2 and g.episodes == 2 for g in seen.values())


def test_a_stage_tail_lets_the_next_stage_of_its_model_start_before_it_ends():
    model = _model("student").model_copy(update={"max_concurrency_per_server": 4})
    second_started = threading.Event()

    def tail(key: StageKey) -> bool:
        # Everything dispatched, one episode left in flight: the rest goes back.
        sweep.capacity.shrink(str(key), 1)
        assert second_started.wait(WAIT_S), "the next stage waited for the whole stage"
        return True

    def second(key: StageKey) -> bool:
        second_started.set()
        return True

    first = FakeStage(_key("a"), (), model, tail, episodes=100)
    after = FakeStage(_key("b"), (), model, second, episodes=100)
    sweep = FakeSweep([first, after], num_workers=1, episodes_per_worker=4)
    StageScheduler(sweep).run()
    assert sweep.stages_run == 2


def test_under_the_cap_the_spare_worker_processes_go_to_the_stages_that_start():
    """Two stages may run at once; four are ready. The two that start share all four
    worker processes; none is dealt to a stage the cap keeps waiting."""
    seen: dict[str, Any] = {}
    together = threading.Barrier(2, timeout=WAIT_S)

    def hold(key: StageKey) -> bool:
        seen[key.digest] = sweep.grants[key]
        if len(seen) <= 2:
            together.wait()
        return True

    stages = [FakeStage(_key(n), (), _model(f"s{n}"), hold, episodes=8) for n in "abcd"]
    sweep = FakeSweep(stages, num_workers=4, episodes_per_worker=8, max_stages_in_flight=2)
    StageScheduler(sweep, max_in_flight=2).run()
    first = [seen[d] for d in "ab"]
    assert [g.workers for g in first] == [2, 2] and sum(g.episodes for g in first) == 16
    assert sweep.stages_run == 4


def test_a_running_stage_widens_when_a_stage_of_its_model_ends():
    """Two stages share a model's 6 slots; when the short one ends, the long one (with
    episodes left to dispatch) takes its slots instead of finishing at half of them."""
    model = _model("student").model_copy(update={"max_concurrency_per_server": 6})
    both = threading.Barrier(2, timeout=WAIT_S)
    widened = threading.Event()

    def short(key: StageKey) -> bool:
        both.wait()
        return True

    def long(key: StageKey) -> bool:
        sweep.dispatch_left[key] = 50
        assert sweep.grants[key].per_replica == 3
        both.wait()
        deadline = threading.Event()
        for _ in range(int(WAIT_S / 0.05)):  # the scheduler looks every POLL_S
            if sweep.grants[key].per_replica == 6:
                widened.set()
                break
            deadline.wait(0.05)
        return True

    stages = [
        FakeStage(_key("a"), (), model, short, episodes=100),
        FakeStage(_key("b"), (), model, long, episodes=100),
    ]
    sweep = FakeSweep(stages, num_workers=2, episodes_per_worker=8)
    StageScheduler(sweep).run()
    assert widened.is_set() and sweep.stages_run == 2
