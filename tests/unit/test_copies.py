"""Copies share what neither side has changed yet, and never see each other's changes.

Ledger and session copies (``Ledger.copy``, ``Session.fork``, ``Standing.fork``) share each
node's lists until one side changes them; these tests change both sides after copying."""

from __future__ import annotations

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import (
    Kind,
    Node,
    Policy,
    Queue,
    Request,
    Snapshot,
    State,
    Workload,
    scorer_named,
)
from scheduler.engine.ledger import Ledger
from scheduler.engine.session import Session
from scheduler.engine.standing import Standing

pytestmark = pytest.mark.unit

NODES = (Node("a", gpus=2), Node("b", gpus=2))


def _on(node: str, gpu: int, milli: int) -> tuple[ReplicaPlacement, ...]:
    return (ReplicaPlacement(node, (GpuShare(gpu, milli),)),)


def test_a_ledger_copy_and_its_original_change_independently():
    ledger = Ledger(NODES, [(_on("a", 0, 500), 0, 0)])
    twin = ledger.copy()
    twin.take(_on("a", 0, 250))
    ledger.take(_on("b", 1, 1000))
    assert ledger.free == [[500, 1000], [1000, 0]]
    assert twin.free == [[250, 1000], [1000, 1000]]
    again = twin.copy()
    again.rollback(again.mark())
    again.take(_on("b", 0, 1000))
    assert twin.free == [[250, 1000], [1000, 1000]]
    assert again.free == [[250, 1000], [0, 1000]]
    for each in (ledger, twin, again):
        each.sync()
        expected = sorted(
            (free, n, g) for n, gpus in enumerate(each.free) for g, free in enumerate(gpus) if free
        )
        assert list(each.by_memory[NODES[0].gpu_memory_mib]) == expected


def _releasing(name: str, node: str) -> Workload:
    return Workload(
        name=name,
        queue="q",
        kind=Kind.TRAINING,
        request=Request(gpus=1),
        priority=50,
        preemptible=True,
        submitted_at=0.0,
        seq=1,
        state=State.RELEASING,
        placement=(ReplicaPlacement(node, (GpuShare(0, 1000),)),),
        started_at=0.0,
        start_seq=1,
    )


def test_held_capacity_of_a_fork_and_its_session_change_independently():
    policy = Policy(scorer=scorer_named("pack"), immediate_evictions=False)
    snapshot = Snapshot(NODES, (Queue("q", deserved_gpus=4.0),), (_releasing("r", "a"),))
    session = Session(snapshot, 0.0, policy)
    twin = session.fork([], 1.0)
    twin._hold(_on("b", 1, 1000))
    session._hold(_on("a", 0, 1000), -1)
    assert session.held == [[0, 0], [0, 0]]
    assert twin.held == [[1000, 0], [0, 1000]]


def test_a_standing_fork_never_sees_a_later_change():
    policy = Policy(scorer=scorer_named("frachub"))
    queue = Queue("q", deserved_gpus=4.0)
    running = Workload(
        name="w",
        queue="q",
        kind=Kind.TRAINING,
        request=Request(gpus=1),
        priority=50,
        preemptible=True,
        submitted_at=0.0,
        seq=1,
        state=State.RUNNING,
        placement=_on("a", 0, 1000),
        started_at=0.0,
        start_seq=1,
    )
    standing = Standing(Snapshot(NODES, (queue,), (running,)), 0.0, policy)
    fork = standing.fork(5.0, policy)
    standing.put("w", None)
    assert "w" in fork.running and fork.ledger.free[0] == [0, 1000]
    assert [w.name for w in fork.victim_lists()["q"]] == ["w"]
    assert [n.name for n in fork.ledger.nodes if fork.on_node(n.name)] == ["a"]
    later = standing.fork(6.0, policy)
    assert "w" not in later.running and later.ledger.free[0] == [1000, 1000]
    assert "q" not in later.victim_lists() and not later.on_node("a")
