import pytest

from distillery.orchestrator.core.protocols import ProtocolConfig, split_tasks

IDS = [f"t{i}" for i in range(20)]


def test_main_and_self_excluded_use_every_task_for_both():
    for name in ("main", "self_excluded"):
        split = split_tasks(IDS, ProtocolConfig(name=name))
        assert split.memory_ids == split.eval_ids == tuple(IDS)


def test_cross_split_is_seeded_disjoint_and_seven_to_three():
    a = split_tasks(IDS, ProtocolConfig(name="cross_split", split_seed=1))
    b = split_tasks(IDS, ProtocolConfig(name="cross_split", split_seed=1))
    c = split_tasks(IDS, ProtocolConfig(name="cross_split", split_seed=2))
    assert a == b and a != c
    assert len(a.memory_ids) == 14 and len(a.eval_ids) == 6
    assert not set(a.memory_ids) & set(a.eval_ids)
    assert set(a.memory_ids) | set(a.eval_ids) == set(IDS)
    assert list(a.eval_ids) == sorted(a.eval_ids, key=IDS.index)  # benchmark order kept
    assert a.memory_split == "memory"


def test_cross_split_by_group_keeps_groups_together():
    groups = {t: f"g{i % 5}" for i, t in enumerate(IDS)}
    split = split_tasks(IDS, ProtocolConfig(name="cross_split"), groups, group_by_default=True)
    memory_groups = {groups[t] for t in split.memory_ids}
    eval_groups = {groups[t] for t in split.eval_ids}
    assert not memory_groups & eval_groups
    assert len(memory_groups) == 4  # round(0.7 * 5)


def test_cross_split_needs_two_tasks():
    with pytest.raises(ValueError, match="at least 2"):
        split_tasks(["only"], ProtocolConfig(name="cross_split"))
