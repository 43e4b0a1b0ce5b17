"""``Session.finish``: a running workload that ended leaves a session (a fork the service's
fast path keeps between cycles) as one built without it would be: free GPUs, use, demand
and fair shares."""

from __future__ import annotations

import pytest

from scheduler.engine import Kind, Node, Policy, Queue, Session, Snapshot, scorer_named
from tests.unit.test_cycle import running, workload

pytestmark = pytest.mark.unit

NODES = (Node("a", 2, 80 * 1024), Node("b", 2, 80 * 1024))
QUEUES = (
    Queue("dept"),
    Queue("lab", parent="dept", deserved_gpus=1),
    Queue("nb", deserved_gpus=1),
)


def session(*workloads) -> Session:
    return Session(Snapshot(NODES, QUEUES, workloads), 5.0, Policy(scorer=scorer_named("pack")))


def test_finish_is_a_session_built_without_the_workload() -> None:
    notebook = running("n1", "a", [(0, 500)], queue="nb", kind=Kind.INTERACTIVE)
    others = (
        running("j1", "a", [(1, 1000)], queue="lab"),
        running("j2", "b", [(0, 250)], queue="lab"),
        workload("j3", "lab", gpus=2, seq=9),
    )
    whole = session(notebook, *others)
    fork = whole.fork((), 5.0)
    fork.finish("n1")
    without = session(*others)
    assert fork.ledger.free == without.ledger.free
    assert fork.ledger.total_free == without.ledger.total_free
    assert fork.use == without.use
    assert fork.demand == without.demand
    assert fork.fair == without.fair
    assert set(fork.running) == set(without.running)
    assert fork.running_count == without.running_count
    assert "n1" in whole.running and whole.ledger.total_free == 2250  # the original is untouched
