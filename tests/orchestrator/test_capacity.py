"""How the free episode capacity is dealt out to the stages that are ready."""

from __future__ import annotations

from distillery.orchestrator.execution.capacity import Capacity, Demand, Free, Grant, grant


def test_ready_stages_of_four_models_all_start_in_the_slots_of_two_workers():
    # 32 episode slots (2 workers x 16); four students of 8 missing episodes each.
    demands = [Demand(s, 8, f"m{s}", 1) for s in "abcd"]
    grants = grant(demands, Free(32, {f"m{s}": 64 for s in "abcd"}))
    assert grants == {s: Grant(8, 8) for s in "abcd"}
    # Each runs on both workers' nodes: two workers of 4 (a quarter of a worker's CPUs).
    assert grants["a"].workers(2, 16) == (2, 4)


def test_stages_of_one_model_share_its_slots_and_never_exceed_them():
    demands = [Demand(s, 200, "m", 2) for s in "abc"]
    grants = grant(demands, Free(64, {"m": 4}))
    assert sum(g.per_replica for g in grants.values()) == 4  # every slot, none twice
    assert grants["a"] == Grant(4, 2)  # two slots on each of its two replicas
    assert grants["b"] == Grant(2, 1) and grants["c"] == Grant(2, 1)  # nobody starves


def test_a_stage_gets_no_more_than_its_missing_episodes():
    grants = grant([Demand("a", 3, "m", 1), Demand("b", 100, "m", 1)], Free(8, {"m": 10}))
    assert grants["a"] == Grant(3, 3)
    assert grants["b"] == Grant(5, 5)  # the rest of the episode slots


def test_without_a_free_slot_a_stage_waits():
    assert grant([Demand("a", 5, "m", 1)], Free(8, {"m": 0})) == {}
    assert grant([Demand("a", 5, "m", 1)], Free(0, {"m": 4})) == {}


def test_the_oracle_needs_episode_slots_only():
    assert grant([Demand("a", 40, None)], Free(24, {})) == {"a": Grant(24, 0)}
    assert Grant(24, 0).workers(2, 16) == (2, 12)  # two workers sharing them evenly
    assert Grant(40, 0).workers(2, 16) == (3, 14)  # never fewer than hold them
    assert Grant(1, 0).workers(2, 16) == (1, 1)  # never more than its episodes


def test_held_capacity_comes_back_when_a_stage_ends():
    capacity = Capacity(episodes=16)
    capacity.add_server("m", 8)
    assert capacity.take([Demand("a", 100, "m", 1)]) == {"a": Grant(8, 8)}
    assert capacity.take([Demand("b", 100, "m", 1)]) == {}  # every slot of m is held
    capacity.give_back("a")
    assert capacity.take([Demand("b", 100, "m", 1)]) == {"b": Grant(8, 8)}


def test_a_stage_tail_gives_back_what_it_no_longer_uses():
    capacity = Capacity(episodes=16)
    capacity.add_server("m", 8)
    assert capacity.take([Demand("a", 100, "m", 2)]) == {"a": Grant(16, 8)}
    capacity.shrink("a", 3)  # nothing left to dispatch, 3 in flight
    assert capacity.free().episodes == 13
    assert capacity.free().per_replica == {"m": 5}  # all 3 could be on one replica
    assert capacity.take([Demand("b", 100, "m", 2)]) == {"b": Grant(10, 5)}
    capacity.shrink("b", 12)  # more than it holds: nothing changes
    assert capacity.held["b"][1] == Grant(10, 5)
