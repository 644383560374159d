"""MATH's brew set (AgentBrew appendix A.2's "first 1,000"): in a fixture laid out as the
official release (train/<subject>/<n>.json, the release's subject sizes), the default
brew order spans the seven subjects in proportion in every prefix, Table 1's
agentbrew_brew is the first 1,000 of Figure 4's agentbrew_train, and `release` is the
alphabetical order (algebra only), for comparison."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from distillery.workers.envs.math.benchmark import SUBJECTS
from distillery.workers.envs.registry import make_benchmark
from tests.support.sweep_config import sweep_config

# The official release's train split, by subject (7,500 in all).
TRAIN_SIZES = {
    "algebra": 1744,
    "counting_and_probability": 771,
    "geometry": 870,
    "intermediate_algebra": 1295,
    "number_theory": 869,
    "prealgebra": 1205,
    "precalculus": 746,
}


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("MATH")
    for subject, size in TRAIN_SIZES.items():
        folder = root / "train" / subject
        folder.mkdir(parents=True)
        for number in range(size):
            row = {"problem": f"{subject} {number}", "level": "Level 1", "type": subject,
                   "solution": f"so $\\boxed{{{number}}}$"}  # fmt: skip
            (folder / f"{number}.json").write_text(json.dumps(row))
    return root


def _tasks(release: Path, **options):
    bench = make_benchmark("math", {"data_path": str(release), **options})
    return bench.load_tasks()


def test_the_brew_set_spans_the_seven_subjects_in_proportion(release):
    assert sum(TRAIN_SIZES.values()) == 7500 and set(TRAIN_SIZES) == set(SUBJECTS)
    brew = _tasks(release, split="agentbrew_brew")
    assert len(brew) == 1000 and len({t.task_id for t in brew}) == 1000
    pool = _tasks(release, split="agentbrew_train")
    assert len(pool) == 7500 and {t.task_id for t in pool} == {
        t.task_id for t in _tasks(release, split="train")
    }
    # Table 1's brew set is the first 1,000 of Figure 4's order: one rule.
    assert [t.task_id for t in pool[:1000]] == [t.task_id for t in brew]
    for n in (500, 1000, 1500, 2000):
        counts = Counter(t.group_id for t in pool[:n])
        for subject, size in TRAIN_SIZES.items():
            assert abs(counts[subject] - n * size / 7500) < 1, (n, subject, counts)
    # Within a subject the order is a shuffle, not the file order.
    algebra = [t.task_id for t in brew if t.group_id == "algebra"]
    assert algebra != sorted(algebra, key=lambda i: int(i.rsplit("_", 1)[1]))


def test_the_order_is_seeded_and_the_release_order_is_algebra_only(release):
    ids = [t.task_id for t in _tasks(release, split="agentbrew_brew")]
    assert ids == [t.task_id for t in _tasks(release, split="agentbrew_brew")]
    other = [t.task_id for t in _tasks(release, split="agentbrew_brew", brew_order_seed=1)]
    assert other != ids
    old = _tasks(release, split="agentbrew_brew", brew_order="release")
    assert {t.group_id for t in old} == {"algebra"}


def test_table1_and_figure4_read_the_same_brew_order(tmp_path):
    table1 = sweep_config(tmp_path, "experiment=agentbrew_table1_math")
    figure4 = sweep_config(tmp_path, "experiment=agentbrew_figure4")
    assert table1.protocol.memory_split == "agentbrew_brew"
    assert figure4.protocol.memory_split == "agentbrew_train"
    assert figure4.protocol.memory_shuffle_seed is None
