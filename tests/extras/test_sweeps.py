"""Sweeps without a service: the request's bounds, the members' environments, and which
pending members the parallel limit holds back from the engine."""

from __future__ import annotations

import pytest

from scheduler.fields import InvalidSpec
from scheduler.service.persistence.orm import WorkloadRecord
from scheduler.service.policies.sweeps import held_back, member_env, parse_sweep

pytestmark = pytest.mark.unit


def test_members_are_the_product_in_order() -> None:
    sweep = parse_sweep({"parameters": {"lr": ["0.1", 0.01], "bs": [32, 64]}, "parallel": 2})
    assert sweep is not None and sweep.parallel == 2
    assert sweep.members() == [
        {"lr": "0.1", "bs": "32"},
        {"lr": "0.1", "bs": "64"},
        {"lr": "0.01", "bs": "32"},
        {"lr": "0.01", "bs": "64"},
    ]
    assert member_env(7, 3, sweep.members()[3]) == {
        "FRACHUB_SWEEP_LR": "0.01",
        "FRACHUB_SWEEP_BS": "64",
        "FRACHUB_SWEEP_ID": "7",
        "FRACHUB_SWEEP_INDEX": "3",
    }
    assert parse_sweep({"parameters": {"x": [1, 2, 3]}}).parallel == 3  # default: all
    assert parse_sweep(None) is None


@pytest.mark.parametrize(
    ("sweep", "where", "words"),
    [
        ([], "sweep", "must be an object"),
        ({"parameters": {}}, "sweep.parameters", "at least one parameter"),
        ({"parameters": {"lr": []}}, "sweep.parameters.lr", "1 to 100 values"),
        ({"parameters": {"1lr": [1]}}, "sweep.parameters.1lr", "not starting with a digit"),
        ({"parameters": {"lr": [1], "LR": [2]}}, "sweep.parameters.LR", "same variable"),
        ({"parameters": {"lr": [True]}}, "sweep.parameters.lr", "strings or numbers"),
        ({"parameters": {"lr": ["x" * 1025]}}, "sweep.parameters.lr", "at most 1024"),
        ({"parameters": {"a": list(range(20)), "b": list(range(20))}}, "sweep.parameters", "400"),
        ({"parameters": {"lr": [1]}, "parallel": 0}, "sweep.parallel", "from 1 to 256"),
        ({"parameters": {"lr": [1]}, "parallel": 2.5}, "sweep.parallel", "from 1 to 256"),
        ({"parameters": {"lr": [1]}, "paralel": 2}, "sweep.paralel", "not a sweep field"),
    ],
)
def test_bounds_name_the_field(sweep, where: str, words: str) -> None:
    with pytest.raises(InvalidSpec) as raised:
        parse_sweep(sweep)
    assert raised.value.where == where and words in raised.value.message


def member(id_: int, state: str, sweep_id: int = 1, parallel: int = 2) -> WorkloadRecord:
    return WorkloadRecord(id=id_, state=state, sweep_id=sweep_id, sweep_parallel=parallel)


def test_held_back_fills_free_slots_lowest_ids_first() -> None:
    records = [member(1, "running"), member(2, "pending"), member(3, "pending")]
    records += [member(4, "pending"), WorkloadRecord(id=9, state="pending")]
    held = held_back(records)
    assert sorted(held) == [3, 4]  # one slot free: job 2 goes to the engine
    assert held[3] == "sweep 1 runs at most 2 jobs at once; 1 of its jobs holds GPUs"
    # a preempted member (pending again) competes for the slots like the others
    assert sorted(held_back([member(1, "pending"), member(2, "running"), member(3, "running")]))
    assert held_back([member(5, "pending", sweep_id=5, parallel=1)]) == {}
