"""Dispatch follows the benchmark's own task order, whatever its ids look like."""

from distillery.orchestrator.execution.sweep import in_benchmark_order


def test_tasks_are_dispatched_in_the_order_the_benchmark_loaded_them() -> None:
    loaded = {t: object() for t in ("b_2", "a_10", "a_9", "scenario-x")}
    order = in_benchmark_order({"a_9", "scenario-x", "b_2", "a_10"}, loaded)  # type: ignore[arg-type]
    assert order == ["b_2", "a_10", "a_9", "scenario-x"]
    # Ids the benchmark did not load (never expected) go last, deterministically.
    assert in_benchmark_order({"zz", "a_9", "yy"}, loaded) == ["a_9", "yy", "zz"]  # type: ignore[arg-type]
