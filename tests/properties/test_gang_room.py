"""The gang room test (``placement._may_hold``) is speed only: it never refuses a gang that
``place`` would have placed.

Random ledgers (nodes of 1-8 GPUs, some GPU models, CPU and memory, whole and fractional
work already taken) and random whole-GPU gangs: wherever the search without the test finds
a placement, the test must say yes, and ``place`` with it must give the same placement.
Over the whole cluster the test reads ``Ledger.whole_counts`` (nodes per count of wholly free
GPUs) instead of walking the nodes: after any takes, give-backs, rollbacks and copies it must
be the count of ``whole_free`` by value, and the test must answer as the walk over the nodes.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.common.limits import MILLI
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import placement as placing
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Node, Request
from scheduler.engine.placement import place, scorer_named
from tests.properties.test_invariants import PROFILE

pytestmark = pytest.mark.properties


@st.composite
def ledgers_and_gangs(draw: st.DrawFn) -> tuple[list[Node], list, Request, str]:
    count = draw(st.integers(1, 6))
    nodes = [
        Node(
            f"n{i}",
            draw(st.integers(1, 8)),
            gpu_model=draw(st.sampled_from(["A100", "H100"])),
            cpu_milli=draw(st.sampled_from([None, 16_000])),
            labels={"rack": draw(st.sampled_from(["r1", "r2"]))},
        )
        for i in range(count)
    ]
    taken = []
    for node in nodes:
        for g in range(node.gpus):
            used = draw(st.sampled_from([0, 0, 250, 500, MILLI]))
            if used:
                taken.append(((ReplicaPlacement(node.name, (GpuShare(g, used),)),), 0, 0))
    request = Request(
        gpus=float(draw(st.integers(1, 4))),
        replicas=draw(st.integers(2, 6)),
        cpu_milli=draw(st.sampled_from([0, 4_000])),
        gpu_models=draw(st.sampled_from([frozenset(), frozenset({"H100"})])),
    )
    return nodes, taken, request, draw(st.sampled_from(["frachub", "pack", "spread"]))


@settings(PROFILE, max_examples=300)
@given(case=ledgers_and_gangs(), subset=st.booleans())
def test_the_room_test_never_refuses_a_gang_the_search_would_place(case, subset) -> None:
    nodes, taken, request, scorer = case
    only = set(range(0, len(nodes), 2)) if subset else None

    def placed(with_test: bool):
        ledger = Ledger(nodes, taken)
        real = placing._may_hold
        placing._may_hold = real if with_test else (lambda *_: True)
        try:
            return place(ledger, request, scorer_named(scorer), only)
        finally:
            placing._may_hold = real

    plain = placed(with_test=False)
    if plain is not None:
        assert placing._may_hold(Ledger(nodes, taken), request, only)
    fast = placed(with_test=True)
    assert fast == plain


def _walk(ledger: Ledger, request: Request) -> bool:
    """The room test written node by node, as it was before ``whole_counts``."""
    per_replica = request.whole_gpus
    if ledger.total_free < request.replicas * per_replica * MILLI:
        return False
    return sum(free // per_replica for free in ledger.whole_free) >= request.replicas


@settings(PROFILE, max_examples=300)
@given(
    case=ledgers_and_gangs(),
    steps=st.lists(
        st.tuples(st.sampled_from(["give", "take", "undo", "copy"]), st.integers(0, 99))
    ),
)
def test_whole_counts_follow_every_change_and_the_room_test_matches_the_walk(case, steps) -> None:
    nodes, taken, request, _ = case
    ledger = Ledger(nodes, taken)
    held = [placement for placement, _, _ in taken]
    marks: list[int] = []
    for action, pick in steps:
        if action == "give" and held:
            ledger.give_back(held.pop(pick % len(held)))
        elif action == "take":
            node = nodes[pick % len(nodes)]
            g = pick % node.gpus
            free = ledger.free[ledger.index[node.name]][g]
            if free:
                placement = (ReplicaPlacement(node.name, (GpuShare(g, free),)),)
                marks.append(ledger.mark())
                ledger.take(placement)
        elif action == "undo" and marks:
            ledger.rollback(marks.pop())  # a give-back it undoes is never given back again
        elif action == "copy":
            ledger, marks = ledger.copy(), []
        most = max(node.gpus for node in nodes)
        assert ledger.whole_counts == [ledger.whole_free.count(v) for v in range(most + 1)]
        assert placing._may_hold(ledger, request, None) == _walk(ledger, request)
