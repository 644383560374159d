"""The paper's sweeps on a twin of the cluster k8s/ creates (tests/support/cluster_twin.py):
the gpu overlay rendered, a loopback Ray cluster with exactly its groups' shapes (a head
with num-cpus 0, the cpu group's pod with 4 CPUs and distillery_cpu 4, GPU pods with
num-cpus 1, their GPUs and distillery_gpus_<N>), and the sweep run by the RayJob's own
entrypoint (`distillery submit --k8s`'s command, cluster=kuberay). The models stay vLLM
models: the pool places their replicas (one STRICT_PACK bundle per GPU, GPU-lease
actors) and launches `vllm serve` as on the cluster, and the twin's stand-in `vllm`
serves scripted replies; a scripted server stands in for the API teacher.

- A 16-episode collection by a GPU-served teacher with 8 workers x 1 CPU, where only 4
  fit (the deadlock of issue 33: workers pinned to full nodes waited for ever): the
  stage starts with the 4 placed and says what the others wait for; the head is killed
  while episodes are in flight (the stand-in answers a call a second), and the
  resubmitted sweep replays the ones in flight, never a finished one, and records every
  task exactly once.
- BFCL Table 1's shape: the API teacher's collection, the AMD build, four students on
  the GPU group, zero-shot and AMD each, every model call counted exactly.
- AgentBrew's brew -> serve: the GPU-served student fails, the API teacher writes notes
  and curates them, the student re-plays until certified, then plays the held-out tasks
  with the notes; every call counted exactly.
- A tensor-parallel teacher (Qwen3-32B as shipped: 2 GPUs) on the 2-GPU pod: both
  bundles of its replica on that pod, the GPU lease ran there, and vLLM was launched
  with tensor parallel size 2 and both GPUs visible.

The head-loss test's first cluster is its own (it is killed); the retry and the two
other sweeps share one twin (`shared_twin`): a twin costs a minute of start-up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from distillery.testing.bfcl_scripts import _tasks_by_first_turn
from distillery.testing.scripted_server import run_stub_server, stub_stats
from tests.support.cluster_twin import (
    CALLS_DIR_ENV,
    ClusterTwin,
    calls_by_task,
    cluster_twin,
    counted_calls,
    entrypoint,
    launches,
    replica_placements,
    stand_in_vllm,
)
from tests.workers.memory.agentbrew.test_agentbrew_end_to_end import (
    EASY,
    HELD_OUT,
    MEMORY,
    _play_calls,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="renders k8s/ with kubectl"),
]

REPLAY = "tests.support.cluster_twin:counted_replay_native"


def ground_truth_calls(n_tasks: int) -> dict[str, int]:
    """The chat requests a ground-truth replay makes per task (each turn's calls, one
    step each, then a call-free closing reply)."""
    calls = {}
    for candidates in _tasks_by_first_turn().values():
        for task, truth in candidates:
            calls[task.task_id] = sum(len(turn) + 1 for turn in truth)
    return {f"multi_turn_base_{i}": calls[f"multi_turn_base_{i}"] for i in range(n_tasks)}


def local_outputs(tmp_path: Path) -> list[str]:
    """The RayJob's defaults point at in-cluster services; here: this test's folders."""
    return [
        f"output_dir={tmp_path / 'runs'}",
        f"tracking.uri=sqlite:///{tmp_path / 'mlflow.db'}",
        "memory.store.url=null",
        "memory.store.api_key_env=null",
        "agent.retry_backoff_s=0",
    ]


def sweep_episodes(tmp_path: Path) -> pd.DataFrame:
    (sweep_dir,) = (tmp_path / "runs" / "sweeps").iterdir()
    return pd.read_parquet(sweep_dir / "episodes.parquet")


def done_files(tmp_path: Path, kind: str) -> int:
    return len(list((tmp_path / "runs").glob(f"stages/{kind}/*/done/*.json")))


STUDENTS = ["qwen3_4b", "gemma4_e4b", "qwen3_8b", "llama3_1_8b"]
# The stand-in teacher of the head-loss test answers after this long (a model decoding),
# so that episodes are in flight when the head dies; the kill waits for an episode with
# at least MIN_LEFT calls still to make (>= MIN_LEFT x REPLY_S seconds of work left).
REPLY_S = 1.0
MIN_LEFT = 3


@dataclass
class SharedTwin:
    twin: ClusterTwin
    calls_dir: Path  # every pod's CALLS_DIR_ENV

    def fresh_calls(self) -> Path:
        """The counters emptied for the next test (the module's tests run one by one)."""
        for path in [*self.calls_dir.glob("*.calls"), *self.calls_dir.glob("*.launch.json")]:
            path.unlink()
        return self.calls_dir


@pytest.fixture(scope="module")
def shared_twin(tmp_path_factory) -> Iterator[SharedTwin]:
    """One twin for the sweeps that leave the cluster up: the cpu group's pod, a 1-GPU
    pod per BFCL student and a 2-GPU pod (the largest shapes asked for; a sweep that
    needs one GPU pod leaves the others idle, as the autoscaler's floor would). Starting
    a twin costs about a minute of this machine's two cores; its sweeps share it."""
    calls_dir = tmp_path_factory.mktemp("twin-calls")
    env = {"OPENAI_API_KEY": "twin-key", CALLS_DIR_ENV: str(calls_dir)}  # the pods' Secret
    pods = {"cpu": 1, "vllm-1gpu": len(STUDENTS), "vllm-2gpu": 1}
    with cluster_twin("gpu", pods, env) as twin:
        yield SharedTwin(twin, calls_dir)


def finished_tasks(tmp_path: Path) -> set[str]:
    """The tasks whose episodes the ledger recorded (their done files)."""
    return {
        p.name.removesuffix(".parquet.json")
        for p in (tmp_path / "runs").glob("stages/collect/*/done/*.json")
    }


def test_a_gpu_teacher_collection_never_waits_for_a_full_node_and_survives_the_head(
    tmp_path, request
):
    """16 tasks, 8 workers of which 4 fit; the head is killed while episodes are in
    flight (the stand-in answers one call a second), with at least 4 finished; the
    retry, on a fresh cluster, replays exactly the unfinished ones: each episode in
    flight at the kill is played again from its start, no finished one is asked for
    again, every task is recorded once."""
    n_tasks = 16
    truth = ground_truth_calls(n_tasks)
    calls_dir = tmp_path / "calls"
    calls_dir.mkdir()

    overrides = [
        *local_outputs(tmp_path),
        "benchmark.limit=16",
        "methods=[teacher]",
        "model@teacher=qwen3_32b",
        "cluster.placement_timeout_s=300",  # a failure says so in minutes
        # 16 episode slots (8 workers of 2): the 16 episodes take whole workers, each
        # reserving a whole worker's CPU (a stage of fewer episodes than the slots gets
        # workers reserving their part of it: capacity.Grant.workers).
        "cluster.episodes_per_worker=2",
    ]

    def submit(twin: ClusterTwin, log: Path) -> subprocess.Popen:
        # The same command each time: the teacher on one 1-GPU replica.
        teacher = stand_in_vllm(twin, "teacher", 1, REPLAY, delay_s=REPLY_S)
        return subprocess.Popen(
            entrypoint([*overrides, *teacher]),
            cwd=tmp_path,
            env=twin.driver_env(),
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    first_log = tmp_path / "first.log"
    with cluster_twin("gpu", {"cpu": 1, "vllm-1gpu": 1}, {CALLS_DIR_ENV: str(calls_dir)}) as twin:
        assert (twin.groups["head"].num_cpus, twin.groups["cpu"].num_cpus) == (0, 4)
        driver = submit(twin, first_log)
        deadline = time.monotonic() + 900
        while True:
            done, asked = finished_tasks(tmp_path), calls_by_task(calls_dir)
            playing = [t for t, n in asked.items() if t not in done and n <= truth[t] - MIN_LEFT]
            if len(done) >= 4 and playing:
                break
            assert driver.poll() is None, first_log.read_text()[-4000:]
            assert time.monotonic() < deadline, (
                f"waited 900 s for 4 finished episodes and one in flight: {len(done)} "
                f"finished, calls so far {dict(asked)}"
            )
            time.sleep(0.2)
        # The head pod dies, its driver with it; the RayJob's retry replaces the whole
        # cluster: every other pod's processes go at once too (no worker plays on).
        twin.ray.kill_node("head")
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        twin.ray.kill_all()
    first = first_log.read_text()
    # 8 workers asked for, 4 CPUs of distillery_cpu: the stage did not wait for the rest.
    assert re.search(
        r"4 of 8 episode workers wait for room \(asking CPU 1, distillery_cpu 1\); "
        r"the stage starts with 4",
        first,
    ), first[-4000:]
    finished_before = finished_tasks(tmp_path)
    asked_before = calls_by_task(calls_dir)
    # In flight at the kill: asked, not all of its calls answered (so never finished).
    in_flight = {t for t, n in asked_before.items() if n < truth[t]}
    assert len(finished_before) >= 4 and in_flight, (finished_before, dict(asked_before))

    # The RayJob's retry: a fresh cluster (the module's shared twin: the same groups,
    # more GPU pods than the teacher's one replica needs), the same command.
    shared = request.getfixturevalue("shared_twin")
    calls_dir = shared.fresh_calls()
    second_log = tmp_path / "second.log"
    resumed = submit(shared.twin, second_log)
    try:
        assert resumed.wait(timeout=900) == 0, second_log.read_text()[-4000:]
    finally:
        if resumed.poll() is None:
            os.killpg(resumed.pid, signal.SIGKILL)
    second = second_log.read_text()
    assert "recovered the lock of a run that is gone" in second  # the dead driver's
    assert re.search(r"\((\d+) cached\)", second), second[-4000:]
    assert len(finished_tasks(tmp_path)) == n_tasks
    episodes = sweep_episodes(tmp_path)
    assert len(episodes) == n_tasks and not episodes.duplicated(["point_id", "task_id"]).any()
    assert episodes["success"].all()  # the stand-in replays the ground truth
    assert dict(zip(episodes["task_id"], episodes["n_llm_calls"], strict=True)) == truth
    replayed = calls_by_task(calls_dir)
    # No finished episode was asked for again; each one in flight was played again whole.
    assert not set(replayed) & finished_before, (sorted(finished_before), dict(replayed))
    assert {t: replayed[t] for t in in_flight} == {t: truth[t] for t in in_flight}
    # Every unfinished episode was played once on the retry (an episode that made all
    # its calls before the kill may have been written, then recorded from its file).
    for task, calls in truth.items():
        if task in finished_before or task in in_flight:
            continue
        if asked_before[task]:  # all its calls made before the kill: written or not
            assert replayed[task] in (0, calls), (task, replayed[task])
        else:
            assert replayed[task] == calls, (task, replayed[task])


def test_two_students_stages_run_at_the_same_time_on_the_twin(tmp_path, shared_twin):
    """Two students' zero-shot stages, each student's replica on its own GPU pod: each
    replica answers only once the other has been asked (a rendezvous), so a sweep that
    ran one stage at a time would leave the first student's requests waiting past their
    deadline (its episodes unscored, the test failing), never hang."""
    first, second = tmp_path / "qwen-asked", tmp_path / "gemma-asked"
    twin = shared_twin.twin
    shared_twin.fresh_calls()
    overrides = [
        *local_outputs(tmp_path),
        "experiment=bfcl_table1",
        "benchmark.limit=2",
        "methods=[zero_shot]",
        "sweep.student=[qwen3_4b,gemma4_e4b]",
        "sweep.seed=[0]",
        *stand_in_vllm(twin, "student", 1, REPLAY),
        # Reached only when the stages do not overlap: the test then fails, not hangs.
        "student.request_timeout_s=120",
        "agent.episode_retries=0",
        "cluster.placement_timeout_s=300",
        "cluster.num_workers=2",
    ]
    twin.serve_replies(
        REPLAY,
        gates={
            "Qwen/Qwen3-4B": {"gate": str(second), "arrived": str(first)},
            "google/gemma-4-E4B-it": {"gate": str(first), "arrived": str(second)},
        },
    )
    done = subprocess.run(
        entrypoint(overrides),
        cwd=tmp_path,
        env=twin.driver_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    episodes = sweep_episodes(tmp_path)
    assert len(episodes) == 4 and episodes["success"].all(), episodes
    assert first.exists() and second.exists()


def test_bfcl_table1_shape_runs_on_the_twin_with_exact_call_counts(tmp_path, shared_twin):
    n_tasks = 2
    students = STUDENTS
    calls_dir = shared_twin.fresh_calls()
    with run_stub_server(script="distillery.testing.bfcl_scripts:replay_native") as api:
        twin = shared_twin.twin  # every student's server on a GPU pod of its own
        overrides = [
            *local_outputs(tmp_path),
            "experiment=bfcl_table1",
            f"benchmark.limit={n_tasks}",
            "methods=[teacher,zero_shot,amd_wf_st_fn]",
            f"sweep.student=[{','.join(students)}]",
            "sweep.seed=[0]",
            "memory.builder.model=none",  # deterministic entries: the stand-in writes none
            f"teacher.base_url={api}",  # the API teacher (gpt-5-mini)
            "teacher.model=scripted",
            f"memory.embedder.base_url={api}",
            *stand_in_vllm(twin, "student", 1, REPLAY),
            "cluster.placement_timeout_s=300",  # a failure says so in minutes
            "cluster.num_workers=1",  # CI's budget: one worker process per stage
        ]
        env = twin.driver_env()
        done = subprocess.run(
            entrypoint(overrides),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=1200,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-5000:]
        teacher_calls = int(stub_stats(api)["requests"])
    truth = ground_truth_calls(n_tasks)
    per_play = sum(truth.values())
    # The API teacher played the collection once; every student's replica (its own
    # server on its own GPU pod) answered its zero-shot and AMD episodes.
    assert teacher_calls == per_play
    counts = counted_calls(calls_dir)
    assert sorted(counts.values()) == [2 * per_play] * len(students), counts
    episodes = sweep_episodes(tmp_path)
    assert len(episodes) == n_tasks * (1 + 2 * len(students))
    assert not episodes.duplicated(["point_id", "task_id"]).any()
    assert episodes["success"].all()
    # Each student's replica was placed in the GPU group's bundle and launched as vLLM,
    # on the one GPU Ray gave its actor.
    for name in ("qwen3-4b", "gemma4-e4b", "qwen3-8b", "llama3.1-8b"):
        assert f"model {name}: 1 replicas on 1 nodes" in output
    launched = launches(calls_dir)
    assert len(launched) == len(students), launched
    assert {r["model"] for r in launched} == {
        "Qwen/Qwen3-4B",
        "google/gemma-4-E4B-it",
        "Qwen/Qwen3-8B",
        "meta-llama/Llama-3.1-8B-Instruct",
    }
    for record in launched:
        assert record["refused"] is None and record["tensor_parallel_size"] == 1, record
        assert len(record["cuda_visible_devices"].split(",")) == 1, record


def test_an_agentbrew_brew_then_serve_runs_on_the_twin_with_exact_call_counts(
    tmp_path, shared_twin
):
    """The student (a stand-in vLLM replica on a GPU pod) brews on the 7 memory tasks of
    cross_split with the API teacher as note writer and curator (the scripts of
    test_agentbrew_end_to_end), then plays the 3 held-out tasks zero-shot and with the
    notes; the brew and the memory service run on the CPU group."""
    calls_dir = shared_twin.fresh_calls()
    twin = shared_twin.twin
    with run_stub_server(script="distillery.testing.agentbrew_scripts:teacher") as api:
        overrides = [
            *local_outputs(tmp_path),
            "methods=[zero_shot,agentbrew]",
            "protocol=cross_split",
            "benchmark.limit=10",
            "model@student=qwen3_4b",
            "student.action_format=prompt",
            *stand_in_vllm(twin, "student", 1, "tests.support.cluster_twin:counted_brew_student"),
            "teacher=external",
            "teacher.name=brew-teacher",
            f"teacher.base_url={api}",
            "teacher.model=scripted-teacher",
            "cluster.placement_timeout_s=300",  # a failure says so in minutes
            "cluster.num_workers=1",
        ]
        done = subprocess.run(
            entrypoint(overrides),
            cwd=tmp_path,
            env=twin.driver_env(),
            capture_output=True,
            text=True,
            timeout=1200,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-5000:]
        teacher_calls = int(stub_stats(api)["requests"])
    assert "model qwen3-4b: 1 replicas on 1 nodes" in output
    # Notes for three groups (tasks 1, 2, 5; task 7 is solved by task 5's note): three
    # drafts and two curator verdicts (the first note needs none).
    groups = (1, 2, 5)
    assert teacher_calls == 3 + 2
    zero_shot = sum(_play_calls(i, i in EASY) for i in HELD_OUT)
    brew = sum(_play_calls(i, i in EASY or i == 7) for i in MEMORY)
    brew += sum(_play_calls(i, True) for i in groups)  # each re-play, certified
    served = sum(_play_calls(i, True) for i in HELD_OUT)
    assert counted_calls(calls_dir) and sum(counted_calls(calls_dir).values()) == (
        zero_shot + brew + served
    )
    (sweep_dir,) = (tmp_path / "runs" / "sweeps").iterdir()
    points = pd.read_parquet(sweep_dir / "points.parquet")
    episodes = sweep_episodes(tmp_path).merge(points[["point_id", "method"]], on="point_id")
    assert not episodes.duplicated(["point_id", "task_id"]).any()
    rates = episodes.groupby("method")["success"].mean().to_dict()
    assert rates == pytest.approx({"zero_shot": 1 / 3, "agentbrew": 1.0})
    (brew_dir,) = (tmp_path / "runs" / "stages" / "brew").iterdir()
    assert json.loads((brew_dir / "output.json").read_text())["counts"]["notes"] == 3


def test_a_tensor_parallel_replica_takes_both_gpus_of_one_pod(tmp_path, shared_twin):
    """Qwen3-32B as shipped (gpus_per_server 2, tensor_parallel_size 2) teaches 2 tasks:
    the pool reserves its two STRICT_PACK bundles (the first with distillery_gpus_2,
    which only the vllm-2gpu pod has), starts the GPU-lease actor in the second, and
    launches vLLM with both GPUs; the stand-in refuses a launch with fewer."""
    n_tasks = 2
    calls_dir = shared_twin.fresh_calls()
    twin = shared_twin.twin
    overrides = [
        *local_outputs(tmp_path),
        f"benchmark.limit={n_tasks}",
        "methods=[teacher]",
        "model@teacher=qwen3_32b",
        *stand_in_vllm(twin, "teacher", 2, REPLAY),
        "cluster.placement_timeout_s=300",  # a failure says so in minutes
        "cluster.num_workers=1",
    ]
    done = subprocess.run(
        entrypoint(overrides),
        cwd=tmp_path,
        env=twin.driver_env(),
        capture_output=True,
        text=True,
        timeout=900,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    assert "model qwen3-32b: 1 replicas on 1 nodes" in output
    truth = ground_truth_calls(n_tasks)
    episodes = sweep_episodes(tmp_path)
    assert len(episodes) == n_tasks and episodes["success"].all()
    assert sum(counted_calls(calls_dir).values()) == sum(truth.values())

    (launch,) = launches(calls_dir)  # one replica, launched once
    assert launch["refused"] is None, launch
    assert launch["argv"][:3] == ["vllm", "serve", "Qwen/Qwen3-32B"]
    assert launch["tensor_parallel_size"] == 2
    assert launch["distributed_executor_backend"] == "mp"
    gpus = launch["cuda_visible_devices"].split(",")
    assert len(set(gpus)) == 2, launch  # its actor's GPU and the lease's

    placed = replica_placements(twin)
    (group,) = [g for g in placed["groups"] if "distillery_gpus_2" in g["bundles"][0]]
    assert group["strategy"] == "STRICT_PACK"
    assert group["bundles"] == [
        {"CPU": 1.0, "GPU": 1.0, "distillery_gpus_2": 1.0},
        {"GPU": 1.0},
    ]
    assert group["pods"] == ["vllm-2gpu-0", "vllm-2gpu-0"]  # both bundles on one pod
    (server,) = [a for a in placed["actors"] if a["pid"] == launch["ppid"]]
    assert server["class"] == "LlmServerImpl" and server["pod"] == "vllm-2gpu-0"
    (lease,) = [a for a in placed["actors"] if a["class"] == "GpuLeaseImpl"]
    assert lease["pod"] == "vllm-2gpu-0" and lease["pid"] > 0  # it ran (its process)
