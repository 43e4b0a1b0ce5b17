"""Aging (``scheduler/engine/aging.py``): the effective priority, the order it gives, the
scenario that shows it (with and without), and that aging at rate 0 changes no scenario's
output by a byte."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.engine import Aging, Kind, Request, WorkloadRequest
from scheduler.fields import InvalidSpec
from scheduler.scenario import load_scenario, run_scenario
from scheduler.scenario.spec import parse_scenario

SCENARIOS = Path(__file__).parents[1] / "scenarios"
AGING = SCENARIOS / "40_aging_lifts_a_long_wait.yaml"


def workload(name: str, priority: int, submitted_at: float):
    ask = WorkloadRequest(Kind.TRAINING, Request(gpus=1), priority, True, project="lab")
    return ask.workload(name, int(submitted_at), submitted_at)


def test_gain_is_linear_in_the_wait_and_capped() -> None:
    aging = Aging(per_hour=10, most=25)
    assert aging.gain(0) == 0 and aging.gain(-5) == 0  # a clock skew gains nothing
    assert aging.gain(1800) == pytest.approx(5)
    assert aging.gain(10 * 3600) == 25
    assert Aging(per_hour=10).gain(10 * 3600) == pytest.approx(100)


def test_a_long_wait_outranks_newer_higher_priority_work() -> None:
    old = workload("old", 40, 0.0)
    new = workload("new", 50, 3600.0)
    key = Aging(per_hour=10).key
    assert sorted([old, new], key=key(1800.0))[0] is new  # gained 5 of the 10 between them
    assert key(3600.0)(old)[0] == key(3600.0)(new)[0]  # gained 10: equal, the earlier leads
    assert sorted([new, old], key=key(3600.0))[0] is old
    capped = Aging(per_hour=10, most=5).key(10 * 3600.0)
    assert sorted([old, new], key=capped)[0] is new  # never more than 5 points


def test_same_priority_keeps_first_come_first_served() -> None:
    first, second = workload("a", 50, 0.0), workload("b", 50, 10.0)
    assert sorted([second, first], key=Aging(per_hour=1000).key(5000.0)) == [first, second]


def test_the_scenario_starves_the_small_job_without_aging() -> None:
    scenario = load_scenario(str(AGING))
    aged = run_scenario(scenario).to_json()["workloads"]
    plain = run_scenario(replace(scenario, aging=None)).to_json()["workloads"]
    assert aged["small"]["state"] == "succeeded"
    assert plain["small"]["state"] == "pending"  # every priority-50 job went first
    assert plain["h5"]["state"] == "running"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_aging_at_rate_zero_changes_no_output(path: Path) -> None:
    scenario = replace(load_scenario(str(path)), aging=None)
    plain = json.dumps(run_scenario(scenario).to_json(), sort_keys=True)
    zero = json.dumps(run_scenario(replace(scenario, aging=Aging(0.0))).to_json(), sort_keys=True)
    assert zero == plain


@pytest.mark.parametrize(
    ("aging", "message"),
    [
        ({"most": 3}, "aging.per_hour: is required"),
        ({"per_hour": -1}, "aging.per_hour: must be >= 0"),
        ({"per_hour": 1, "max": 3}, "aging.max: unknown field"),
        ("fast", "aging: must be a mapping"),
    ],
)
def test_the_scenario_format_refuses_a_bad_aging_block(aging, message: str) -> None:
    document = {
        "cluster": {"nodes": [{"name": "n", "gpus": 1}]},
        "queues": [{"name": "lab"}],
        "workloads": [],
        "aging": aging,
    }
    with pytest.raises(InvalidSpec) as error:
        parse_scenario(document)
    assert str(error.value).startswith(message)
