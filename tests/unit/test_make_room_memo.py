"""A failed make-room search is remembered only for claimants it would treat the same.

Reclaim, preemption and consolidation remember a failure for the rest of the cycle by the
claimant's queue and request shape. A claimant that may only use one GPU model fails where
an unrestricted one of the same queue and size succeeds: it must not pass its failure on.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import Evict, Node, Queue, Snapshot, Start, State, run_cycle
from tests.unit.test_cycle import PACK, workload

pytestmark = pytest.mark.unit

NODES = (Node("a", 1, gpu_model="A"), Node("b", 1, gpu_model="B"))
QUEUES = (Queue("q0", deserved_gpus=1), Queue("q1", deserved_gpus=1))


def _running(name: str, node: str, seq: int, **fields):
    w = workload(name, "q1", seq=seq, **fields)
    share = (ReplicaPlacement(node, (GpuShare(0, 1000),)),)
    return replace(w, state=State.RUNNING, placement=share, started_at=0.0)


def test_a_model_bound_failure_does_not_hold_back_an_unbound_claimant():
    # q1 borrows both GPUs; only its job on the B node may be evicted. w1 (model A only)
    # cannot be helped; w2, the same size in the same queue, can take the B GPU.
    kept = _running("t1", "a", 0, preemptible=False)
    borrower = _running("t2", "b", 1)
    w1 = workload("w1", "q0", seq=2)
    w1 = replace(w1, request=replace(w1.request, gpu_models=frozenset({"A"})))
    w2 = workload("w2", "q0", seq=3)
    result = run_cycle(Snapshot(NODES, QUEUES, (kept, borrower, w1, w2)), 100.0, PACK)
    assert [(type(d), d.workload) for d in result.decisions] == [(Evict, "t2"), (Start, "w2")]
    assert set(result.pending) == {"w1"}
