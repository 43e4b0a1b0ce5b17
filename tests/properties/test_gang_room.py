"""The gang room test (``placement._may_hold``) is speed only: it never refuses a gang that
``place`` would have placed.

Random ledgers (nodes of 1-8 GPUs, some GPU models, CPU and memory, whole and fractional
work already taken) and random whole-GPU gangs: wherever the search without the test finds
a placement, the test must say yes, and ``place`` with it must give the same placement.
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
