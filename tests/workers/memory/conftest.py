"""Fixtures of the memory methods' tests: the GSM8K data folder (plans, sweeps)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import REPO_ROOT

GSM8K = REPO_ROOT.parent / "shared" / "data" / "gsm8k"


@pytest.fixture(scope="session")
def gsm8k() -> Path:
    if not (GSM8K / "test.jsonl").is_file():
        pytest.skip(f"no {GSM8K}")
    return GSM8K
