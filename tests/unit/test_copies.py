"""Copies share what neither side has changed yet, and never see each other's changes.

Ledger and session copies (``Ledger.copy``, ``Session.fork``, ``Standing.fork``) share each
node's lists until one side changes them; these tests change both sides after copying."""

from __future__ import annotations

from dataclasses import replace

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


def _training(
    name: str, queue: str = "q", state: State = State.RUNNING, node: str = "a", **fields
) -> Workload:
    """A preemptible 1-GPU training job on GPU 0 of ``node``, started at t=0."""
    return Workload(
        name=name,
        queue=queue,
        kind=Kind.TRAINING,
        request=Request(gpus=1),
        priority=50,
        preemptible=True,
        submitted_at=0.0,
        seq=1,
        state=state,
        placement=_on(node, 0, 1000),
        started_at=0.0,
        start_seq=1,
        **fields,
    )


def _releasing(name: str, node: str) -> Workload:
    return _training(name, state=State.RELEASING, node=node)


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
    running = _training("w")
    standing = Standing(Snapshot(NODES, (queue,), (running,)), 0.0, policy)
    fork = standing.fork(5.0, policy)
    standing.put("w", None)
    assert "w" in fork.running and fork.ledger.free[0] == [0, 1000]
    assert [w.name for w in fork.victim_lists()["q"]] == ["w"]
    assert [n.name for n in fork.ledger.nodes if fork.on_node(n.name)] == ["a"]
    later = standing.fork(6.0, policy)
    assert "w" not in later.running and later.ledger.free[0] == [1000, 1000]
    assert "q" not in later.victim_lists() and not later.on_node("a")


def _borrower(name: str, **fields) -> Workload:
    return _training(name, queue="batch", **fields)


def _notebook() -> Workload:
    """A 1-GPU notebook of the lab project, just submitted."""
    pending = {"state": State.PENDING, "placement": (), "started_at": None, "start_seq": 0}
    return replace(
        _training("nb", queue="lab"), kind=Kind.INTERACTIVE, preemptible=False, seq=2, **pending
    )


def test_forks_sharing_victim_lists_filter_them_at_their_own_time():
    """Forks of one settled session share its victim lists and the victim search's filter
    of them (``Filtered``); a fork at a later ``now``, when a protection has ended, must not
    inherit the earlier fork's cut."""
    from scheduler.engine import decide

    nodes = (Node("a", gpus=1),)
    queues = (Queue("batch", deserved_gpus=0.0), Queue("lab", deserved_gpus=1.0))
    running = _borrower("w", min_runtime=100.0)
    session = Session(Snapshot(nodes, queues, (running,)), 10.0, Policy(scorer_named("pack")))
    decide(session)
    session.victim_lists()  # sorted once, then shared with every fork (as a driver keeps them)
    early = session.fork([_notebook()], 50.0)
    late = session.fork([_notebook()], 150.0)
    assert early.victim_lists() is late.victim_lists()
    assert not decide(early).decisions  # w is protected until t=100
    assert [d.workload for d in decide(late).decisions] == ["w", "nb"]


def test_a_shared_filter_is_not_used_for_other_running_work():
    """The shared filter holds only while every candidate's running workload is the object
    it was made from: a checkpoint reported since changes what an eviction loses."""
    from scheduler.engine.actions.victims import Candidates

    nodes = (Node("a", gpus=1),)
    queues = (Queue("batch", deserved_gpus=0.0), Queue("lab", deserved_gpus=1.0))
    session = Session(
        Snapshot(nodes, queues, (_borrower("w"),)), 1000.0, Policy(scorer_named("pack"))
    )
    session.victim_lists()
    first = session.fork([_notebook()], 1000.0)
    second = session.fork([_notebook()], 1000.0)
    assert first.victim_lists() is second.victim_lists()
    saved = _borrower("w", checkpointed_at=900.0)
    second.running["w"] = saved
    assert Candidates(first)._filter("batch").within(first, 1e9)[0].checkpointed_at is None
    filtered = Candidates(second)._filter("batch")
    assert filtered.usable == [saved] and filtered.within(second, 1e9) == [saved]
    assert filtered.risks == [100.0]
