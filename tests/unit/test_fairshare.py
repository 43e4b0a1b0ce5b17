"""Rule 2, table-driven: each case is queues, demands in GPUs, capacity, expected shares."""

from __future__ import annotations

import pytest

from scheduler.common.limits import MILLI
from scheduler.engine.fairshare import deserved_quotas, fair_shares, subtree_totals
from scheduler.engine.model import Queue

pytestmark = pytest.mark.unit

CASES = {
    "quota capped by demand, rest by weight": (
        [Queue("a", deserved_gpus=4), Queue("b", deserved_gpus=4, over_quota_weight=3)],
        {"a": 2, "b": 20},
        10,
        {"a": 2, "b": 8},
    ),
    "quotas above capacity granted in full": (
        [Queue("a", deserved_gpus=6), Queue("b", deserved_gpus=6)],
        {"a": 10, "b": 10},
        8,
        {"a": 6, "b": 6},
    ),
    "weight zero gets only its quota": (
        [Queue("a", deserved_gpus=1, over_quota_weight=0), Queue("b", deserved_gpus=1)],
        {"a": 10, "b": 10},
        10,
        {"a": 1, "b": 9},
    ),
    "all weights zero: nothing beyond quotas": (
        [Queue("a", deserved_gpus=1, over_quota_weight=0)],
        {"a": 10},
        10,
        {"a": 1},
    ),
    "limit caps the share": (
        [Queue("a", deserved_gpus=1, limit_gpus=3), Queue("b", deserved_gpus=1)],
        {"a": 10, "b": 10},
        10,
        {"a": 3, "b": 7},
    ),
    "higher priority fills first": (
        [Queue("low", deserved_gpus=0), Queue("high", deserved_gpus=0, priority=2)],
        {"low": 10, "high": 6},
        8,
        {"low": 2, "high": 6},
    ),
    "equal split rounds down, leftover to the first declared": (
        [Queue("a", deserved_gpus=0), Queue("b", deserved_gpus=0), Queue("c", deserved_gpus=0)],
        {"a": 10, "b": 10, "c": 10},
        4,
        {"a": 2, "b": 1, "c": 1},
    ),
    "largest remainder wins the leftover": (
        [
            Queue("a", deserved_gpus=0, over_quota_weight=1),
            Queue("b", deserved_gpus=0, over_quota_weight=2),
        ],
        {"a": 10, "b": 10},
        5,
        {"a": 2, "b": 3},
    ),
    "demand reached keeps an unrounded share": (
        [Queue("a", deserved_gpus=0), Queue("b", deserved_gpus=0)],
        {"a": 0.5, "b": 10},
        4,
        {"a": 0.5, "b": 3.5},
    ),
    "fractional capacity left over": (
        [Queue("a", deserved_gpus=1), Queue("b", deserved_gpus=1)],
        {"a": 2, "b": 0.25},
        2,
        {"a": 1.75, "b": 0.25},
    ),
    "no demand, no share": (
        [Queue("a", deserved_gpus=4)],
        {},
        8,
        {"a": 0},
    ),
    "department divides its share": (
        [
            Queue("dept", deserved_gpus=4),
            Queue("p1", parent="dept", deserved_gpus=1),
            Queue("p2", parent="dept", deserved_gpus=1),
            Queue("other", deserved_gpus=4),
        ],
        {"p1": 10, "p2": 10, "other": 2},
        8,
        {"dept": 6, "p1": 3, "p2": 3, "other": 2},
    ),
    "department without a quota deserves its children's": (
        [
            Queue("dept"),
            Queue("p1", parent="dept", deserved_gpus=3),
            Queue("p2", parent="dept", deserved_gpus=2),
            Queue("other", deserved_gpus=0),
        ],
        {"p1": 3, "p2": 2, "other": 10},
        8,
        {"dept": 5, "p1": 3, "p2": 2, "other": 3},
    ),
}


@pytest.mark.parametrize("queues, demand, capacity, expected", CASES.values(), ids=CASES.keys())
def test_fair_shares(queues, demand, capacity, expected) -> None:
    shares = fair_shares(
        queues, deserved_quotas(queues), {k: v * MILLI for k, v in demand.items()}, capacity * MILLI
    )
    assert {k: round(v / MILLI, 6) for k, v in shares.items()} == expected


def test_shares_never_exceed_capacity_when_quotas_fit() -> None:
    queues = [Queue(f"q{i}", deserved_gpus=i % 3, over_quota_weight=(i % 4) + 1) for i in range(9)]
    demand = {q.name: 7 * MILLI for q in queues}
    shares = fair_shares(queues, deserved_quotas(queues), demand, 37 * MILLI)
    assert sum(shares.values()) == pytest.approx(37 * MILLI)


def test_subtree_totals_sum_up_the_tree() -> None:
    queues = [
        Queue("root"),
        Queue("mid", parent="root"),
        Queue("leaf", parent="mid"),
        Queue("solo"),
    ]
    assert subtree_totals(queues, {"leaf": 3, "mid": 1, "solo": 2}) == {
        "root": 4,
        "mid": 4,
        "leaf": 3,
        "solo": 2,
    }
