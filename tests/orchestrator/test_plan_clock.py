"""`--plan`'s wall-clock forecast on planned sweeps whose stage times are known from
their tokens and the throughputs given."""

from __future__ import annotations

import pytest

from distillery.orchestrator.planning.plan import plan_sweep
from distillery.orchestrator.planning.plan_clock import forecast_wall, format_forecast
from distillery.orchestrator.planning.plan_listing import stage_status
from distillery.orchestrator.planning.plan_totals import measured_units, stage_work
from distillery.orchestrator.state.ledger import Ledger
from tests.support.sweep_config import sweep_config


def _seconds(graph, statuses, ledger, throughput):
    measured = measured_units(graph, statuses, ledger)
    return {
        st.stage.key: stage_work(st.stage, graph, ledger, measured).tokens
        / (throughput[st.stage.model.name] * st.stage.model.replicas)
        for st in statuses
        if st.stage.model is not None and st.stage.model.name in throughput
    }


def test_two_students_run_side_by_side_and_one_model_runs_its_stages_in_turn(tmp_path):
    configs = [
        sweep_config(tmp_path, "benchmark.limit=3", "methods=[zero_shot]", f"student={name}")
        for name in ("qwen3_4b", "qwen3_8b")
    ]
    graph = plan_sweep(configs)
    ledger = Ledger(configs[0].output_dir)
    statuses = stage_status(graph, ledger)
    throughput = {"qwen3-4b": 400.0, "qwen3-8b": 100.0}
    seconds = _seconds(graph, statuses, ledger, throughput)
    assert len(seconds) == 2
    forecast = forecast_wall(graph, statuses, ledger, throughput)
    assert forecast.wall_s == pytest.approx(max(seconds.values()))
    assert forecast.bound_s == pytest.approx(max(seconds.values()))
    assert forecast.one_at_a_time_s == pytest.approx(sum(seconds.values()))
    # Each student's one GPU held while its stage runs.
    assert set(forecast.held_gpu_h) == {"qwen3-4b", "qwen3-8b"}
    assert sum(forecast.held_gpu_h.values()) == pytest.approx(sum(seconds.values()) / 3600)

    # Two stages of one model (two seeds) share its servers: one after the other.
    seeds = [
        sweep_config(tmp_path, "benchmark.limit=3", "methods=[zero_shot]", f"seed={s}")
        for s in (0, 1)
    ]
    graph = plan_sweep(seeds)
    statuses = stage_status(graph, ledger)
    name = seeds[0].student.name
    one = forecast_wall(graph, statuses, ledger, {name: 400.0})
    assert len(graph.stages) == 2
    assert one.wall_s == pytest.approx(one.one_at_a_time_s)
    assert format_forecast(one).startswith("wall-clock forecast: ")


def test_a_model_without_a_throughput_is_named_and_counted_as_instant(tmp_path):
    cfg = sweep_config(tmp_path, "benchmark.limit=2", "methods=[zero_shot]", "student=qwen3_4b")
    graph = plan_sweep([cfg])
    ledger = Ledger(cfg.output_dir)
    forecast = forecast_wall(graph, stage_status(graph, ledger), ledger, {})
    assert forecast.wall_s == 0.0 and forecast.instant == ["qwen3-4b"]
    assert "no throughput for qwen3-4b" in format_forecast(forecast)


def test_the_bound_counts_the_work_a_model_can_only_start_once_its_bank_is_built(tmp_path):
    """A student's two memory stages wait for the teacher's collect (20 s) and their
    builds: the student's servers cannot serve their 2 x 10 s before 20 s, so no
    schedule ends before 40 s, though the longest chain (30 s) and the student's whole
    load (30 s) say 30."""
    cfg = sweep_config(
        tmp_path,
        "benchmark.limit=3",
        "methods=[zero_shot,trajectory_rag,reasoning_bank]",
        "teacher=qwen3_8b",
        "student=qwen3_4b",
    )
    graph = plan_sweep([cfg])
    ledger = Ledger(cfg.output_dir)
    statuses = stage_status(graph, ledger)
    seconds = {"collect": 20.0, "build": 0.0, "evaluate": 10.0}
    durations = {k: seconds[k.kind] for k, s in graph.stages.items() if s.model is not None}
    kinds = sorted(k.kind for k in durations)
    assert kinds == ["build", "build", "collect", "evaluate", "evaluate", "evaluate"]
    forecast = forecast_wall(graph, statuses, ledger, {}, durations)
    assert forecast.load_bound_s == pytest.approx(30.0)
    assert forecast.bound_s == pytest.approx(40.0)
    assert forecast.wall_s == pytest.approx(40.0)  # zero-shot first, the rest once built
    assert forecast.instant == []


def test_a_model_name_with_a_dot_takes_its_throughput_from_a_dict_override(tmp_path):
    """llama3.1-8b cannot be a Hydra key path (cost.throughput_tokens_per_s.NAME), but
    it is a key of a dict value: the form the messages and the rehearsal use."""
    cfg = sweep_config(
        tmp_path,
        "benchmark.limit=2",
        "methods=[zero_shot]",
        "student=llama3_1_8b",
        "+cost.throughput_tokens_per_s={llama3.1-8b: 100}",
    )
    assert cfg.student.name == "llama3.1-8b"
    graph = plan_sweep([cfg])
    ledger = Ledger(cfg.output_dir)
    forecast = forecast_wall(
        graph, stage_status(graph, ledger), ledger, cfg.cost.throughput_tokens_per_s
    )
    assert forecast.instant == [] and forecast.wall_s > 0
    unset = forecast_wall(graph, stage_status(graph, ledger), ledger, {})
    assert "'+cost.throughput_tokens_per_s={NAME: TOKENS_PER_S}'" in format_forecast(unset)


def test_a_stage_played_one_task_at_a_time_takes_its_calls_in_sequence(tmp_path):
    """ACE plays its memory tasks one at a time behind an API teacher: whatever the
    throughput, each task's calls (its episode's and the notes it writes) follow each
    other. The student's evaluation plays all its tasks at once: one wave."""
    from distillery.orchestrator.planning.plan_totals import BUILD_CALLS_PER_TASK

    cfg = sweep_config(
        tmp_path, "benchmark.limit=3", "methods=[ace]", "teacher=gpt5_mini", "student=qwen3_4b"
    )
    graph = plan_sweep([cfg])
    ledger = Ledger(cfg.output_dir)
    statuses = stage_status(graph, ledger)
    measured = measured_units(graph, statuses, ledger)
    (ace,) = [st for st in statuses if st.stage.key.kind == "ace"]
    (evaluate,) = [st for st in statuses if st.stage.key.kind == "evaluate"]
    ace_work = stage_work(ace.stage, graph, ledger, measured)
    eval_work = stage_work(evaluate.stage, graph, ledger, measured)
    assert ace_work.units == eval_work.units == 3

    forecast = forecast_wall(
        graph, statuses, ledger, {}, latency={"gpt-5-mini": 2.0, "qwen3-4b": 0.5}
    )
    ace_s = 3 * (ace_work.calls / 3 + BUILD_CALLS_PER_TASK) * 2.0  # three waves of one
    eval_s = 1 * (eval_work.calls / 3) * 0.5  # one wave of three
    assert forecast.instant == []
    assert forecast.wall_s == pytest.approx(ace_s + eval_s)  # the evaluation reads ACE's bank
    # With a throughput too, the slower of the two counts.
    slow = forecast_wall(graph, statuses, ledger, {"qwen3-4b": 1.0}, latency={"gpt-5-mini": 2.0})
    assert slow.wall_s == pytest.approx(ace_s + eval_work.tokens / 1.0)


def test_traces_are_written_one_after_another_from_the_end_of_each_points_stage(tmp_path):
    """Two students' evaluations end together; their 3 traces each take the one trace
    writer 6 x 10 s after that: the sweep ends when the last is written. A sample of 1
    per point writes 2."""
    configs = [
        sweep_config(tmp_path, "benchmark.limit=3", "methods=[zero_shot]", f"student={name}")
        for name in ("qwen3_4b", "qwen3_8b")
    ]
    graph = plan_sweep(configs)
    ledger = Ledger(configs[0].output_dir)
    statuses = stage_status(graph, ledger)
    throughput = {"qwen3-4b": 400.0, "qwen3-8b": 400.0}
    stages_s = max(_seconds(graph, statuses, ledger, throughput).values())
    without = forecast_wall(graph, statuses, ledger, throughput)
    assert without.wall_s == pytest.approx(stages_s) and without.traces == 6
    forecast = forecast_wall(graph, statuses, ledger, throughput, trace_s=10.0)
    assert forecast.trace_write_s == pytest.approx(60.0)
    assert forecast.wall_s == pytest.approx(stages_s + 60.0)
    assert forecast.bound_s == pytest.approx(stages_s + 60.0)
    assert "traces: 6 episodes written one after another, 1.0 min in all" in format_forecast(
        forecast
    )
    # One stage at a time (the shorter first, as it ends first in the graph), the writer
    # still beside them: the first point's 3 traces are written while the second stage
    # plays, or after it if they take longer.
    first, second = sorted(_seconds(graph, statuses, ledger, throughput).values())
    assert forecast.one_at_a_time_s == pytest.approx(first + max(second, 30.0) + 30.0)

    sampled = [
        sweep_config(
            tmp_path,
            "benchmark.limit=3",
            "methods=[zero_shot]",
            f"student={name}",
            "tracking.trace_sample=1",
        )
        for name in ("qwen3_4b", "qwen3_8b")
    ]
    graph = plan_sweep(sampled)
    statuses = stage_status(graph, ledger)
    few = forecast_wall(graph, statuses, ledger, throughput, trace_s=10.0)
    assert few.traces == 2 and few.wall_s == pytest.approx(stages_s + 20.0)
