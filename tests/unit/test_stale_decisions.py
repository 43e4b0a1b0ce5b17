"""Which of a cycle's decisions still hold after the world moved on while the engine decided
(scheduler/service/policies/decisions.py): the real engine decides on a snapshot, then the
lifecycle changes as requests would change it, and the filter says what may be applied."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.common.states import WorkloadState
from scheduler.engine import (
    Kind,
    Node,
    Policy,
    Queue,
    Request,
    Session,
    Start,
    Workload,
    decide,
    scorer_named,
)
from scheduler.engine.lifecycle import Life, Lifecycle
from scheduler.service.policies.decisions import Reconciler, current_decisions

pytestmark = pytest.mark.unit

NODES = (Node("n", gpus=2),)
QUEUES = (Queue("a", deserved_gpus=2),)
POLICY = Policy(scorer=scorer_named("pack"), immediate_evictions=False)


def life(name: str, seq: int) -> Life:
    ask = Workload(
        name=name,
        queue="a",
        kind=Kind.TRAINING,
        request=Request(gpus=1),
        priority=50,
        preemptible=True,
        submitted_at=float(seq),
        seq=seq,
    )
    return Life(ask=ask, title=f"job-{name}")


def decided(lifecycle: Lifecycle):
    snapshot = lifecycle.snapshot(NODES, QUEUES)
    result = decide(Session(snapshot, 10.0, POLICY))
    return result, {workload.name: workload for workload in snapshot.workloads}


def test_nothing_changed_keeps_every_decision() -> None:
    lifecycle = Lifecycle(grace_seconds=1)
    for seq, name in enumerate("ab", start=1):
        lifecycle.submit(life(name, seq), 0.0)
    result, seen = decided(lifecycle)
    assert [type(d) for d in result.decisions] == [Start, Start]
    kept, dropped = current_decisions(result, seen, lifecycle.lives, NODES, capacity_taken=False)
    assert kept is result and dropped == 0


def test_a_cancelled_workload_and_a_gpu_given_away_meanwhile_are_skipped() -> None:
    lifecycle = Lifecycle(grace_seconds=1)
    for seq, name in enumerate("ab", start=1):
        lifecycle.submit(life(name, seq), 0.0)
    result, seen = decided(lifecycle)
    planned = {d.workload: d.placement for d in result.decisions}
    # while the engine decided: a is cancelled, and the fast path gives b's GPU to c
    lifecycle.cancel("a", 11.0)
    lifecycle.submit(life("c", 3), 11.0)
    lifecycle.start("c", planned["b"], 11.0)
    kept, dropped = current_decisions(result, seen, lifecycle.lives, NODES, capacity_taken=True)
    assert kept.decisions == () and dropped == 2
    # blind to the fast path's start, b would be put on c's GPU
    blind, _ = current_decisions(result, seen, lifecycle.lives, NODES, capacity_taken=False)
    assert [d.workload for d in blind.decisions] == ["b"]


def test_a_start_on_gpus_still_free_is_kept() -> None:
    lifecycle = Lifecycle(grace_seconds=1)
    lifecycle.submit(life("a", 1), 0.0)
    result, seen = decided(lifecycle)
    [start] = result.decisions
    other = next(i for i in range(2) if i != start.placement[0].gpus[0].index)
    lifecycle.submit(life("c", 2), 11.0)
    placement = (ReplicaPlacement("n", (GpuShare(other, 1000),)),)
    lifecycle.start("c", placement, 11.0)
    kept, dropped = current_decisions(result, seen, lifecycle.lives, NODES, capacity_taken=True)
    assert kept.decisions == (start,) and dropped == 0


def test_a_workload_started_twice_is_not() -> None:
    """The fast path started it; the cycle's start of the same workload is stale."""
    lifecycle = Lifecycle(grace_seconds=1)
    lifecycle.submit(life("a", 1), 0.0)
    result, seen = decided(lifecycle)
    [start] = result.decisions
    lifecycle.start("a", start.placement, 11.0)
    kept, dropped = current_decisions(result, seen, lifecycle.lives, NODES, capacity_taken=True)
    assert kept.decisions == () and dropped == 1
    assert lifecycle.apply(kept, 12.0) == []
    assert lifecycle["a"].state is WorkloadState.RUNNING and lifecycle["a"].restart_count == 0


def test_applied_in_slices_each_decision_is_checked_when_it_is_applied() -> None:
    """A cycle applied in slices (``SchedulingLoop._apply``): a decision checked again once
    applied does not hold, and when the fast path gives the GPU of the cycle's second start
    away between two slices, that start is skipped."""
    lifecycle = Lifecycle(grace_seconds=1)
    for seq, name in enumerate("ab", start=1):
        lifecycle.submit(life(name, seq), 0.0)
    result, seen = decided(lifecycle)
    first, second = result.decisions
    check = Reconciler(seen, lifecycle.lives, NODES)
    assert check.holds(first)
    lifecycle.apply(replace(result, decisions=(first,)), 10.0)
    check.applied(first)
    assert check.holds(first) is False  # applied once: its workload is no longer pending
    # between the slices: the fast path starts c on the GPU planned for b
    lifecycle.submit(life("c", 3), 11.0)
    lifecycle.start("c", second.placement, 11.0)
    check.capacity_taken([(lifecycle["c"].workload(), second.placement)])
    assert check.holds(second) is False
    # without hearing of c, the check would have put b on c's GPU
    blind = Reconciler(seen, lifecycle.lives, NODES)
    assert blind.holds(second)


def test_the_ledger_hears_of_fast_path_starts_after_it_was_built() -> None:
    """The fast path starts work twice during one apply: the ledger built at the first start
    takes in the second one, and the cycle's start on that GPU is skipped."""
    lifecycle = Lifecycle(grace_seconds=1)
    lifecycle.submit(life("a", 1), 0.0)
    result, seen = decided(lifecycle)
    [start] = result.decisions
    other = next(i for i in range(2) if i != start.placement[0].gpus[0].index)
    check = Reconciler(seen, lifecycle.lives, NODES)
    lifecycle.submit(life("c", 2), 11.0)
    elsewhere = (ReplicaPlacement("n", (GpuShare(other, 1000),)),)
    lifecycle.start("c", elsewhere, 11.0)
    check.capacity_taken([(lifecycle["c"].workload(), elsewhere)])
    lifecycle.submit(life("d", 3), 12.0)
    lifecycle.start("d", start.placement, 12.0)
    check.capacity_taken([(lifecycle["d"].workload(), start.placement)])
    assert check.holds(start) is False
