"""Usage-decayed fair share in the pure engine and the simulators (docs/scheduling.md,
"Usage-decayed fair share"): KAI's share weights, the decay and its normalisation, the one
seam in the water-fill, the lifecycle's forks, scenario files' ``usage:`` section and the
fleet's cumulative GPU-hours."""

from __future__ import annotations

import math
import re

import pytest

from scheduler.common.limits import MILLI
from scheduler.engine import Node, Policy, Queue, Session, Snapshot, decide, scorer_named
from scheduler.engine.fairshare import deserved_quotas, fair_shares
from scheduler.engine.lifecycle import Life, Lifecycle
from scheduler.engine.model import Kind, Request, WorkloadRequest
from scheduler.engine.usage import Usage, UsageHistory, decay, share_weights
from scheduler.fields import InvalidSpec
from scheduler.fleet.description import parse_description_text
from scheduler.fleet.driver import simulate
from scheduler.fleet.metrics import cumulative_gpu_hours, summarize
from scheduler.fleet.variants import VARIANTS
from scheduler.fleet.workload import Job
from scheduler.scenario import parse_scenario, run_scenario

TWO = (Queue("a"), Queue("b"))


def test_share_weights_follow_kai():
    # n = 0.5 each; a used 0.75 of the cluster, b nothing: max(0, n + k(n - u))
    assert share_weights([1.0, 1.0], [0.75, 0.0], 1.0) == [0.25, 1.0]
    assert share_weights([1.0, 1.0], [0.75, 0.0], 0.0) == [0.5, 0.5]  # k 0: the weights' parts
    assert share_weights([3.0, 1.0], [0.0, 0.0], 1.0) == [1.5, 0.5]  # unused: twice the part
    assert share_weights([1.0, 1.0], [1.0, 0.0], 2.0) == [0.0, 1.5]  # floored at 0
    # everyone over their part with a large k: the plain weights, so GPUs are still handed out
    assert share_weights([1.0, 1.0], [0.9, 0.9], 5.0) == [1.0, 1.0]


def test_usage_moves_only_the_over_quota_part():
    queues = (Queue("a", deserved_gpus=2), Queue("b", deserved_gpus=2))
    deserved = deserved_quotas(queues)
    demand = {"a": 10 * MILLI, "b": 10 * MILLI}
    plain = fair_shares(queues, deserved, demand, 10 * MILLI)
    assert plain == {"a": 5 * MILLI, "b": 5 * MILLI}
    assert fair_shares(queues, deserved, demand, 10 * MILLI, None) == plain
    moved = fair_shares(queues, deserved, demand, 10 * MILLI, Usage({"a": 0.75}))
    # 6 GPUs over quota, share weights 0.25 : 1.0 -> 1.2 / 4.8, rounded 1 / 4, the leftover
    # GPU to the larger remainder (b); quotas stay
    assert moved == {"a": 3 * MILLI, "b": 7 * MILLI}
    # a queue that alone still wants more gets the rest, whatever its past: no idle GPUs
    alone = fair_shares(queues, deserved, {"a": 10 * MILLI, "b": 0}, 10 * MILLI, Usage({"a": 1}))
    assert alone["a"] == 10 * MILLI


def test_decay_halves_every_half_life():
    assert decay(0, 10) == 1 and decay(10, 10) == 0.5 and decay(30, 10) == 0.125


def test_history_normalises_to_the_decayed_capacity():
    history = UsageHistory(half_life=3600, window=7 * 86400)
    # a held all 8 GPUs for the last hour, b half of them the hour before
    history.accrue(0, 3600, {"b": 4}, 8)
    history.accrue(3600, 7200, {"a": 8}, 8)
    fractions = history.fractions(7200)
    # exact: a = ∫_0^1 0.5^t dt / ∫_0^2 0.5^t dt = (1 - 1/2) / (1 - 1/4) = 2/3, b = 1/6
    assert fractions["a"] == pytest.approx(2 / 3, rel=0.035)
    assert fractions["b"] == pytest.approx(1 / 6, rel=0.035)
    assert history.totals == {"b": 4 * 3600, "a": 8 * 3600}
    # outside the window it is gone
    later = UsageHistory(half_life=3600, window=7200)
    later.accrue(0, 3600, {"a": 8}, 8)
    later.accrue(3600, 20000, {}, 8)
    assert later.fractions(20000) == {}


def _workloads(queue: str, count: int, start: int) -> list:
    ask = WorkloadRequest.of(Kind.TRAINING, Request(gpus=1), project=queue)
    return [ask.workload(f"{queue}{i}", start + i, 0.0) for i in range(count)]


def test_a_fork_of_the_standing_state_sees_the_usage_it_is_given():
    nodes = (Node("n", 4),)
    policy = Policy(scorer=scorer_named("pack"))
    lifecycle = Lifecycle(grace_seconds=0, immediate=True)
    for workload in [*_workloads("a", 4, 0), *_workloads("b", 4, 10)]:
        lifecycle.submit(Life(workload, title=workload.name), 0.0)
    usage = Usage({"a": 0.6})
    first = lifecycle.session(nodes, TWO, 0.0, policy)  # builds the standing state, no usage
    assert first.fair == {"a": 2 * MILLI, "b": 2 * MILLI}
    fork = lifecycle.session(nodes, TWO, 1.0, policy, usage=usage)
    fresh = Session(Snapshot(nodes, TWO, tuple(first.pending.values()), usage), 1.0, policy)
    assert fork.fair == fresh.fair == {"a": 1 * MILLI, "b": 3 * MILLI}
    assert fork.fair_without_usage == first.fair
    result = decide(fork)
    assert result.queues["a"].usage == 0.6
    assert result.queues["a"].fair_share_without_usage_gpus == 2
    assert lifecycle.session(nodes, TWO, 2.0, policy).fair == first.fair  # off again


SCENARIO = {
    "cluster": {"nodes": [{"name": "n", "gpus": 4}]},
    "queues": [{"name": "a"}, {"name": "b"}],
    "workloads": [
        {"name": f"{q}{i}", "queue": q, "gpus": 1, "duration": 600} for q in "ab" for i in range(8)
    ],
    "run_until": 3600,
}


def test_a_scenario_accrues_usage_in_simulated_time():
    def first_starts(outcome: dict) -> list[str]:
        return [e["workload"] for e in outcome["events"] if e["type"] == "started"][:4]

    plain = run_scenario(parse_scenario(SCENARIO)).to_json()
    assert "usage" not in plain["queues"]["a"]
    assert first_starts(plain) == ["a0", "b0", "a1", "b1"]
    spec = {**SCENARIO, "usage": {"half_life": 600, "past": {"a": 4}}}
    outcome = run_scenario(parse_scenario(spec)).to_json()
    # a held the whole cluster all last week: its fair share is 0, so once it holds anything
    # b is served first (with nothing held, both are equally starved: a, declared first)
    assert first_starts(outcome) == ["a0", "b0", "b1", "b2"]
    assert outcome["queues"]["a"]["usage"] > outcome["queues"]["b"]["usage"] > 0


@pytest.mark.parametrize(
    ("usage", "message"),
    [
        ({"window": 10}, "usage.half_life: is required"),
        ({"half_life": 0}, "usage.half_life: must be greater than 0"),
        ({"half_life": 10, "past": {"c": 1}}, "usage.past.c: is not a queue of this scenario"),
        ({"half_life": 10, "decay": 1}, "usage.decay: unknown field"),
    ],
)
def test_a_bad_usage_section_names_the_field(usage, message):
    with pytest.raises(InvalidSpec, match=re.escape(message)):
        parse_scenario({**SCENARIO, "usage": usage})


TWINS = """\
name: twins
cluster:
  nodes: [{name: n, gpus: 4}]
usage: {half_life: 3600}
projects:
  - {name: a}
  - {name: b}
"""


def test_the_fleet_reports_each_projects_cumulative_gpu_hours():
    description = parse_description_text(TWINS)
    assert description.usage is not None and description.usage.half_life == 3600
    jobs = [
        Job(f"{p}{i}", p, Kind.TRAINING, 1.0, 1, at=0.0, duration=7200.0)
        for p in "ab"
        for i in range(4)
    ]
    run = simulate(description, jobs, VARIANTS["frachub"], 1)
    series = cumulative_gpu_hours(run)
    assert len(series["a"]) == len(run.timeline.times) + 1
    summary = summarize(run)
    # 8 two-hour jobs of one GPU on 4 GPUs: 16 GPU-hours in all, half each
    assert math.isclose(sum(summary.project_gpu_hours.values()), 16, rel_tol=1e-9)
    assert summary.project_gpu_hours == {"a": 8.0, "b": 8.0}
    with pytest.raises(InvalidSpec, match=r"usage\.past: is for scenario files"):
        parse_description_text(TWINS.replace("{half_life: 3600}", "{half_life: 1, past: {}}"))
