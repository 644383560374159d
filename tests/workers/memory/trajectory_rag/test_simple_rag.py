"""AgentBrew's Simple RAG is trajectory RAG (catalog entry `simple_rag`): on an answer
benchmark an entry is the task and the teacher's graded answer, shown under its own
header; on a tool-use benchmark nothing changed (entries, bank ids, read identity)."""

from __future__ import annotations

import json

from distillery.orchestrator.planning.plan import plan_sweep
from distillery.workers.memory.applicability import refusal
from distillery.workers.memory.registry import memory_method
from distillery.workers.memory.trajectory_rag import build, prompts
from distillery.workers.memory.trajectory_rag.settings import TrajectoryRagSettings
from tests.support.records import episode_record
from tests.support.sweep_config import sweep_config
from tests.workers.memory.baselines.harness import FakeSearch, run, task


def _answer_episode(task_id: str, success: bool = True, reply: str = "5 + 7 = 12. \\boxed{12}"):
    messages = [
        {"role": "system", "content": "Please reason step by step."},
        {"role": "user", "content": task(task_id).turns[0]},
        {"role": "assistant", "content": reply},
    ]
    return episode_record(task_id, success, [], benchmark="gsm8k", agent="tea",
                          messages_json=json.dumps(messages))  # fmt: skip


def test_an_answer_benchmarks_entry_is_the_task_and_the_graded_answer():
    episodes = [_answer_episode("train_0"), _answer_episode("train_1", success=False)]
    tasks = [task("train_0"), task("train_1")]
    entries, stats = build.build_trajectories(episodes, tasks, "train")
    (entry,) = entries
    assert entry.answer == "5 + 7 = 12. \\boxed{12}" and entry.steps == ()
    assert stats.as_dict() == {"traj.deterministic": 1, "skipped.traj:unsuccessful": 1}
    method = memory_method("trajectory_rag")
    settings = method.for_benchmark(TrajectoryRagSettings(), "gsm8k")
    assert (
        settings.answers and not method.for_benchmark(TrajectoryRagSettings(), "appworld").answers
    )
    hooks = method.hooks(task("test_0"), FakeSearch({"traj": entries}), settings,
                         lambda s: True, None)  # fmt: skip
    prompt = run(hooks.before_turn(0, task("test_0").turns[0], "SYSTEM"))
    assert prompt.startswith(prompts.ANSWER_HEADER)
    assert "  answer: 5 + 7 = 12. \\boxed{12}" in prompt and prompt.endswith("\n\nSYSTEM")
    short = settings.model_copy(update={"max_chars": 200})
    text, cut = prompts.render_trajectory(entry, 1, 0.9, 200, 500, True)
    assert not cut and "answer:" in text
    long = entry.__class__(**{**entry.__dict__, "answer": "x" * 1000})
    text, cut = prompts.render_trajectory(long, 1, 0.9, short.max_chars, 500, True)
    assert cut and "answer cut here" in text and len(text) < 400


def test_tool_use_banks_and_read_identities_are_as_before(tmp_path):
    from distillery.workers.trajectories import CallRecord, StepRecord

    step = StepRecord(
        0, 0, "[ls()]", [CallRecord("ls()", "ls", "{}", None, False)], 1, 1, 0.1, None
    )
    bfcl = episode_record("multi_turn_base_0", True, [step])
    assert build.graded_answer(bfcl) == ""
    (entry,), _ = build.build_trajectories([bfcl], [task("multi_turn_base_0")], "all")
    assert entry.answer == ""
    # The bank id of a tool-use bank: the payload of before (no answer in it).
    solved = [("multi_turn_base_0", "", bfcl.agent, bfcl.episode_id, [(0, "ls()", "{}", False)])]
    payload = {"kind": "trajectory_rag", "code": "1", "split": "all",
               "stored_observation_chars": 4000, "solved": solved}  # fmt: skip
    import hashlib

    expected = hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()
    assert build.bank_content_id([bfcl], "1", "all") == expected
    identity = memory_method("trajectory_rag").read_identity(TrajectoryRagSettings())
    assert "answers" not in identity and "answer_texts" not in identity
    assert identity["texts"] == list(prompts.TEXTS)


def test_simple_rag_applies_to_the_answer_benchmarks_where_amd_does_not(gsm8k, tmp_path):
    assert refusal("trajectory_rag", "gsm8k", None) is None
    assert refusal("trajectory_rag", "mbpp", {}) is None
    assert "a graded closing reply" not in (refusal("amd", "gsm8k", None) or "")
    assert refusal("amd", "gsm8k", None) is not None
    cfg = sweep_config(
        tmp_path, "benchmark=gsm8k", f"+benchmark.options.data_path={gsm8k}",
        "benchmark.limit=2", "protocol=split", "protocol.memory_split=train",
        "protocol.memory_limit=3", "methods=[simple_rag]", "teacher=gpt5_mini",
        "student=qwen3_4b",
    )  # fmt: skip
    graph = plan_sweep([cfg])
    (point,) = graph.points.values()
    assert point.retrieval.answers and point.uses_teacher
    assert sorted(k.kind for k in graph.stages) == ["build", "collect", "evaluate"]


def test_answers_left_to_the_benchmark_follow_it_and_a_value_set_is_kept():
    method = memory_method("trajectory_rag")
    assert TrajectoryRagSettings().answers is None  # the benchmark's, resolved per point
    assert method.for_benchmark(TrajectoryRagSettings(), "gsm8k").answers is True
    assert method.for_benchmark(TrajectoryRagSettings(), "bfcl_multi_turn_base").answers is False
    hidden = method.for_benchmark(TrajectoryRagSettings(answers=False), "gsm8k")
    assert hidden.answers is False  # set by the user: kept, and its identity says so
    shown = method.for_benchmark(TrajectoryRagSettings(), "gsm8k")
    assert method.read_identity(hidden) != method.read_identity(shown)
    assert "answer_texts" not in method.read_identity(hidden)
