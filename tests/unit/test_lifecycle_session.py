"""``Lifecycle.session``: the next cycle's session from the lifecycle's standing state, equal to
one built from a snapshot of the same workloads, whatever changed in between."""

from __future__ import annotations

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import (
    EvictReason,
    Kind,
    Node,
    Policy,
    Queue,
    Request,
    Snapshot,
    Workload,
    decide,
    scorer_named,
)
from scheduler.engine.lifecycle import Life, Lifecycle
from scheduler.engine.session import Session
from tests.properties.test_standing import differences

pytestmark = pytest.mark.unit

NODES = (Node("n", gpus=2), Node("m", gpus=2))
QUEUES = (Queue("a", deserved_gpus=2), Queue("b", deserved_gpus=2))
POLICY = Policy(scorer=scorer_named("frachub"))


def _life(name: str, seq: int, queue: str = "a", gpus: float = 1) -> Life:
    ask = Workload(
        name=name,
        queue=queue,
        kind=Kind.TRAINING,
        request=Request(gpus=gpus),
        priority=50,
        preemptible=True,
        submitted_at=float(seq),
        seq=seq,
    )
    return Life(ask=ask, title=name)


def _same(lifecycle: Lifecycle, nodes, now: float, hidden=()) -> Session:
    kept = lifecycle.session(nodes, QUEUES, now, POLICY, hidden)
    snapshot = lifecycle.snapshot(nodes, QUEUES)
    snapshot = Snapshot(
        snapshot.nodes,
        snapshot.queues,
        tuple(w for w in snapshot.workloads if w.name not in hidden),
    )
    rebuilt = Session(snapshot, now, kept.policy)
    assert differences(kept, rebuilt) == []
    assert decide(lifecycle.session(nodes, QUEUES, now, POLICY, hidden)) == decide(
        Session(snapshot, now, kept.policy)
    )
    return kept


def test_hidden_workloads_come_and_go_like_any_other_change():
    lifecycle = Lifecycle(grace_seconds=5.0)
    for seq, name in enumerate("xyz", start=1):
        lifecycle.submit(_life(name, seq), 0.0)
    assert set(_same(lifecycle, NODES, 1.0, hidden={"y"}).pending) == {"x", "z"}
    assert lifecycle.standing is not None
    assert set(_same(lifecycle, NODES, 2.0).pending) == {"x", "y", "z"}
    assert set(_same(lifecycle, NODES, 3.0, hidden={"x", "z"}).pending) == {"y"}


def test_starts_evictions_exits_and_cancels_reach_the_standing_state():
    lifecycle = Lifecycle(grace_seconds=5.0)
    for seq, name in enumerate(["p", "q", "r"], start=1):
        lifecycle.submit(_life(name, seq, queue="a" if name != "r" else "b"), 0.0)
    result = decide(_same(lifecycle, NODES, 1.0))
    lifecycle.apply(result, 1.0)
    _same(lifecycle, NODES, 1.0)
    running = [name for name, life in lifecycle.lives.items() if life.state == "running"]
    lifecycle.evict(running[0], EvictReason.RECLAIM, "r", 2.0)  # preempting: releasing
    _same(lifecycle, NODES, 2.0)
    lifecycle.exited(running[0], 3.0)  # requeued, yielding to r
    _same(lifecycle, NODES, 3.0)
    lifecycle.cancel(running[1], 4.0)
    _same(lifecycle, NODES, 4.0)
    lifecycle.exited(running[1], 5.0)
    lifecycle.forget(running[1])
    _same(lifecycle, NODES, 5.0)


def test_a_lost_node_builds_a_session_that_evicts_its_work_then_a_new_standing_state():
    lifecycle = Lifecycle(grace_seconds=5.0)
    lifecycle.submit(_life("w", 1), 0.0)
    lifecycle.start("w", (ReplicaPlacement("m", (GpuShare(0, 1000),)),), 0.0)
    _same(lifecycle, NODES, 1.0)
    fewer = NODES[:1]
    session = lifecycle.session(fewer, QUEUES, 2.0, POLICY)
    assert [d.workload for d in session.decisions] == ["w"]  # NODE_LOST, decided on building
    assert lifecycle.standing is None
    lifecycle.apply(decide(session), 2.0)  # requeued at once, and started on the node left
    assert [r.node for r in lifecycle.lives["w"].placement] == ["n"]
    _same(lifecycle, fewer, 3.0)
    assert lifecycle.standing is not None
