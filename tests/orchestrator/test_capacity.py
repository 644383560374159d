"""How the free episode capacity is dealt out to the stages that are ready."""

from __future__ import annotations

from distillery.orchestrator.execution.capacity import Capacity, Demand, Free, Grant, grant


def test_ready_stages_of_four_models_all_start_in_the_slots_of_two_workers():
    # 32 episode slots (2 workers x 16); four students of 8 missing episodes each.
    demands = [Demand(s, 8, f"m{s}", 1) for s in "abcd"]
    grants = grant(demands, Free(32, {f"m{s}": 64 for s in "abcd"}, workers=2), per_worker=16)
    # Each runs on one worker of 8 (half a worker's CPUs): four processes in all, never
    # a process per slot (they grow with the stages in flight, not with the slots).
    assert grants == {s: Grant(8, 8, workers=1) for s in "abcd"}
    assert grants["a"].each == 8


def test_a_stage_alone_spreads_over_the_free_worker_processes():
    grants = grant([Demand("a", 8, "m", 1)], Free(32, {"m": 64}, workers=2), per_worker=16)
    assert grants == {"a": Grant(8, 8, workers=2)}  # both nodes, a quarter of a worker each
    assert grants["a"].each == 4
    # The spare processes go round the stages granted together, one at a time.
    grants = grant(
        [Demand("a", 8, "m", 1), Demand("b", 2, "n", 1)],
        Free(64, {"m": 64, "n": 64}, workers=8),
        per_worker=16,
    )
    assert grants["a"].workers == 6 and grants["b"].workers == 2  # never more than episodes
    assert sum(g.workers for g in grants.values()) == 8


def test_stages_of_one_model_share_its_slots_and_never_exceed_them():
    demands = [Demand(s, 200, "m", 2) for s in "abc"]
    grants = grant(demands, Free(64, {"m": 4}, workers=4), per_worker=16)
    assert sum(g.per_replica for g in grants.values()) == 4  # every slot, none twice
    assert grants["a"] == Grant(4, 2, workers=2)  # two slots on each of its two replicas
    assert grants["b"] == Grant(2, 1, workers=1)  # nobody starves
    assert grants["c"] == Grant(2, 1, workers=1)


def test_a_stage_gets_no_more_than_its_missing_episodes():
    grants = grant(
        [Demand("a", 3, "m", 1), Demand("b", 100, "m", 1)], Free(8, {"m": 10}, 2), per_worker=4
    )
    assert grants["a"] == Grant(3, 3, workers=1)
    assert grants["b"] == Grant(5, 5, workers=2)  # the rest of the episode slots


def test_without_a_free_slot_a_stage_waits():
    assert grant([Demand("a", 5, "m", 1)], Free(8, {"m": 0}, 2), per_worker=4) == {}
    assert grant([Demand("a", 5, "m", 1)], Free(0, {"m": 4}, 2), per_worker=4) == {}


def test_the_oracle_needs_episode_slots_only():
    grants = grant([Demand("a", 40, None)], Free(24, {}, workers=2), per_worker=16)
    assert grants == {"a": Grant(24, 0, workers=2)}
    assert grants["a"].each == 12  # two workers sharing them evenly
    # Never fewer workers than hold its episodes, even with every process held.
    grants = grant([Demand("a", 40, None)], Free(40, {}, workers=0), per_worker=16)
    assert grants["a"].workers == 3 and grants["a"].each == 14
    assert grant([Demand("a", 1, None)], Free(24, {}, 2), per_worker=16)["a"].workers == 1


def test_held_capacity_comes_back_when_a_stage_ends():
    capacity = Capacity(episodes=16, workers=2, per_worker=8)
    capacity.add_server("m", 8)
    assert capacity.take([Demand("a", 100, "m", 1)]) == {"a": Grant(8, 8, workers=2)}
    assert capacity.free().workers == 0
    assert capacity.take([Demand("b", 100, "m", 1)]) == {}  # every slot of m is held
    capacity.give_back("a")
    assert capacity.free().workers == 2
    assert capacity.take([Demand("b", 100, "m", 1)]) == {"b": Grant(8, 8, workers=2)}


def test_a_stage_tail_gives_back_what_it_no_longer_uses():
    capacity = Capacity(episodes=16, workers=2, per_worker=8)
    capacity.add_server("m", 8)
    assert capacity.take([Demand("a", 100, "m", 2)]) == {"a": Grant(16, 8, workers=2)}
    capacity.shrink("a", 3)  # nothing left to dispatch, 3 in flight
    assert capacity.free().episodes == 13
    assert capacity.free().per_replica == {"m": 5}  # all 3 could be on one replica
    assert capacity.free().workers == 0  # its processes live until it ends
    assert capacity.take([Demand("b", 100, "m", 2)]) == {"b": Grant(10, 5, workers=2)}
    capacity.shrink("b", 12)  # more than it holds: nothing changes
    assert capacity.held["b"][1] == Grant(10, 5, workers=2)


def test_a_running_stage_widens_to_what_an_ended_stage_of_its_model_held():
    capacity = Capacity(episodes=64, workers=2, per_worker=32)
    capacity.add_server("m", 8)
    grants = capacity.take([Demand("a", 100, "m", 2), Demand("b", 100, "m", 2)])
    assert grants == {"a": Grant(8, 4, workers=1), "b": Grant(8, 4, workers=1)}
    assert capacity.grow("b", 92, room=32) is None  # every slot of m is held
    capacity.give_back("a")
    assert capacity.grow("b", 92, room=32) == Grant(16, 8, workers=1)
    assert capacity.free().per_replica == {"m": 0}
    # Never more than it has left to dispatch, nor than its workers run at once.
    capacity.give_back("b")
    capacity.take([Demand("c", 4, "m", 2)])
    assert capacity.grow("c", 3, room=32) == Grant(7, 4, workers=2)
    capacity.give_back("c")
    capacity.take([Demand("d", 2, None)])
    assert capacity.grow("d", 100, room=10) == Grant(10, 0, workers=2)
