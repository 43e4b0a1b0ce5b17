"""The fast path and notebooks (``scheduler/service/scheduling/arrivals.py``): a released
notebook's share is free on ``settled`` at once, so the next notebook starts in its request
instead of waiting for a cycle; a notebook that cannot start at once asks for the next
cycle without the spacing a burst of submissions gets."""

from __future__ import annotations

import logging

from scheduler.engine import (
    Kind,
    Node,
    Policy,
    Queue,
    Session,
    Snapshot,
    Start,
    Workload,
    decide,
    scorer_named,
)
from scheduler.service.runtime.metrics import Metrics
from scheduler.service.scheduling.arrivals import FastPath
from tests.unit.test_cycle import workload

QUEUES = (Queue("lab", deserved_gpus=2),)


def notebook(name: str, seq: int) -> Workload:
    return workload(name, kind=Kind.INTERACTIVE, seq=seq)


def settled_with(fast: FastPath, *arrivals: Workload) -> Session:
    """``settled`` after a cycle that started ``arrivals`` on a 1-GPU node."""
    snapshot = Snapshot((Node("n", 1, 80 * 1024),), QUEUES, arrivals)
    session = Session(snapshot, 0.0, Policy(scorer=scorer_named("pack")))
    decide(session)
    fast.settle(session)
    return session


def test_a_released_notebook_frees_its_gpu_on_settled_for_the_next_one() -> None:
    fast = FastPath(Metrics(), logging.getLogger("test"))
    session = settled_with(fast, notebook("1", 1))
    assert "1" in session.running and session.ledger.total_free == 0
    assert fast.decide([notebook("2", 2)], {}, 1.0) is None  # the GPU is taken
    assert fast.urgent  # so the next cycle comes at once
    fast.cycle_began()
    fast.urgent = False
    session = settled_with(fast, notebook("1", 1))
    fast.released("1", 2.0)
    assert fast.settled is not session and fast.settled.ledger.total_free == 1000
    assert session.ledger.total_free == 0  # the cycle's own session is left as it was
    decided = fast.decide([notebook("3", 3)], {}, 2.0)
    assert decided is not None
    result, _, _ = decided
    assert [d.workload for d in result.decisions if isinstance(d, Start)] == ["3"]
    assert not fast.urgent


def test_releasing_what_settled_does_not_hold_changes_nothing() -> None:
    fast = FastPath(Metrics(), logging.getLogger("test"))
    fast.released("1", 0.0)  # no settled session
    assert fast.settled is None
    session = settled_with(fast)
    fast.released("9", 0.0)
    assert fast.settled is session
