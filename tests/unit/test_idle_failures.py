"""A request shape that found no idle room is not placed again until room for it may exist.

Within a cycle idle capacity only shrinks until an eviction or a move frees some; then a
failed shape is asked again only if a node the ledger changed on could hold one replica of
it (``Failures.revisit``). The cycle's decisions are those of asking every time.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.common.limits import MILLI
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import Evict, Node, Queue, Snapshot, Start, run_cycle
from scheduler.engine.actions.allocate import Failures
from scheduler.engine.ledger import Ledger
from tests.unit.test_cycle import PACK, running, workload

pytestmark = pytest.mark.unit


def _one_gpu(node: str, gpu: int, milli: int = MILLI) -> tuple[ReplicaPlacement, ...]:
    return (ReplicaPlacement(node, (GpuShare(gpu, milli),)),)


def test_a_failed_shape_stays_failed_while_no_changed_node_can_hold_it() -> None:
    nodes = (Node("a", 2), Node("b", 2))
    ledger = Ledger(nodes)
    ledger.take(_one_gpu("a", 0) + _one_gpu("a", 1) + _one_gpu("b", 0) + _one_gpu("b", 1))
    failures = Failures()
    failures.watch(ledger)
    whole = (False, MILLI, 1, 0, 0, frozenset())
    half = (True, 500, 1, 0, 0, frozenset())
    failures.add(whole)
    failures.add(half)
    ledger.give_back(_one_gpu("a", 0, 400))  # 0.4 of a GPU on a: neither shape fits there
    failures.revisit(ledger)
    assert failures.known(whole) and failures.known(half)
    ledger.give_back(_one_gpu("b", 1, 500))  # half a GPU on b: the half fits, the whole not
    failures.revisit(ledger)
    assert failures.known(whole)
    assert not failures.known(half)
    assert not failures.known((True, 600, 1, 0, 0, frozenset()))  # it leant on the half
    ledger.give_back(_one_gpu("b", 1, 500))  # b's GPU 1 wholly free
    failures.revisit(ledger)
    assert not failures.known(whole)
    assert failures.shapes == []


def test_a_shape_bound_to_a_gpu_model_ignores_room_on_other_models() -> None:
    nodes = (Node("a", 1, gpu_model="A"), Node("b", 1, gpu_model="B"))
    ledger = Ledger(nodes, [(_one_gpu("a", 0), 0, 0), (_one_gpu("b", 0), 0, 0)])
    failures = Failures()
    failures.watch(ledger)
    on_a = (False, MILLI, 1, 0, 0, frozenset({"A"}))
    failures.add(on_a)
    ledger.give_back(_one_gpu("b", 0))
    failures.revisit(ledger)
    assert failures.known(on_a)


def test_room_an_eviction_leaves_over_goes_to_a_shape_that_failed_before_it() -> None:
    # q1 borrows node a's two GPUs with one 2-GPU job. w1 (1 GPU, q0 inside its quota)
    # finds no idle room, so its shape fails; reclaim evicts the 2-GPU job and w1 takes one
    # GPU. w2, the same shape in q2, would borrow (q2 deserves nothing), so no eviction may
    # make room for it: it starts only if it is placed on the GPU left over instead of
    # being refused from memory.
    queues = (Queue("q0", deserved_gpus=1), Queue("q1"), Queue("q2"))
    borrower = running("t1", "a", [(0, MILLI), (1, MILLI)], queue="q1")
    w1 = workload("w1", "q0", seq=2)
    w2 = workload("w2", "q2", seq=3)
    no_moves = replace(PACK, consolidate=False)  # consolidation would place it on idle GPUs
    snapshot = Snapshot((Node("a", 2),), queues, (borrower, w1, w2))
    result = run_cycle(snapshot, 100.0, no_moves)
    decided = [(type(d), d.workload) for d in result.decisions]
    assert decided == [(Evict, "t1"), (Start, "w1"), (Start, "w2")]
    assert result.pending == {}
