"""How the free episode capacity is dealt out to the stages that are ready."""

from __future__ import annotations

from distillery.orchestrator.execution.capacity import Capacity, Demand, Free, Grant, grant


def test_ready_stages_of_two_models_both_start_and_split_the_workers():
    # 2 workers of 16 episodes; each model 2 replicas x 8 slots (16 at once).
    demands = [Demand("a", 200, "m1", 2), Demand("b", 200, "m2", 2)]
    grants = grant(demands, Free(2, {"m1": 8, "m2": 8}), episodes_per_worker=16)
    assert grants == {"a": Grant(1, 8), "b": Grant(1, 8)}


def test_stages_of_one_model_share_its_slots_and_never_exceed_them():
    demands = [Demand(s, 200, "m", 2) for s in "abc"]
    grants = grant(demands, Free(8, {"m": 4}), episodes_per_worker=4)
    assert sum(g.per_replica for g in grants.values()) == 4  # every slot, none twice
    assert grants["a"].per_replica == 2 and grants["b"].per_replica == 1
    assert grants["c"].per_replica == 1  # round-robin: nobody starves


def test_a_stage_gets_no_more_than_its_missing_episodes():
    grants = grant([Demand("a", 3, "m", 1), Demand("b", 100, "m", 1)], Free(4, {"m": 10}), 2)
    assert grants["a"] == Grant(2, 3)  # three episodes: three slots, two workers of two
    assert grants["b"] == Grant(2, 4)  # the rest of the workers


def test_without_a_free_slot_a_stage_waits():
    assert grant([Demand("a", 5, "m", 1)], Free(2, {"m": 0}), 4) == {}
    assert grant([Demand("a", 5, "m", 1)], Free(0, {"m": 4}), 4) == {}


def test_the_oracle_needs_workers_only():
    grants = grant([Demand("a", 40, None)], Free(3, {}), episodes_per_worker=16)
    assert grants == {"a": Grant(3, 0)}


def test_held_capacity_comes_back_when_a_stage_ends():
    capacity = Capacity(workers=2, episodes_per_worker=8)
    capacity.add_server("m", 8)
    first = capacity.take([Demand("a", 100, "m", 1)])
    assert first == {"a": Grant(1, 8)}
    assert capacity.take([Demand("b", 100, "m", 1)]) == {}  # every slot of m is held
    capacity.give_back("a")
    assert capacity.take([Demand("b", 100, "m", 1)]) == {"b": Grant(1, 8)}
