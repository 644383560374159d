"""A memory method that has nothing to build from in an answer benchmark's episodes is
refused before anything starts (the whole GSM8K sweep: test_end_to_end.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from distillery.orchestrator.planning.plan import plan_sweep
from tests.support.sweep_config import sweep_config as _config

GSM8K = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k"


@pytest.fixture
def gsm8k() -> Path:
    if not (GSM8K / "test.jsonl").is_file():
        pytest.skip(f"no {GSM8K}")
    return GSM8K


def test_a_memory_method_without_tool_calls_to_read_is_refused(gsm8k, tmp_path):
    cfg = _config(tmp_path, "benchmark=gsm8k", f"+benchmark.options.data_path={gsm8k}",
                  "methods=[zero_shot,amd_wf_st]")  # fmt: skip
    with pytest.raises(ValueError, match="methods: amd_wf_st: the memory method amd builds"):
        plan_sweep([cfg])
    tools = _config(tmp_path, "benchmark=mbpp", "+benchmark.options.tools=true",
                    f"+benchmark.options.data_path={gsm8k.parent / 'mbpp'}", "benchmark.limit=2",
                    "methods=[zero_shot,amd_wf_st]")  # fmt: skip
    assert len(plan_sweep([tools]).points) == 2  # with run_tests calls, AMD has steps
