"""Hypothesis invariants of CPU and memory quotas (docs/scheduling.md, rule 3b).

The invariants' random scenarios, given CPUs and memory on nodes and workloads (some of
them CPU-only), and CPU and memory quotas, limits and weights on queues, are replayed
through the real runner. Every cycle must keep the GPU invariants (``check_cycle``) and:

1. no node holds more CPUs or memory than it has;
2. ``limit_cpu`` and ``limit_memory_gib`` are never exceeded at any level by a start;
3. non-preemptible work is never started beyond its deserved CPUs or memory at any level;
4. a settled instant stays settled, and the runner never raises ``Unsettled``;

and the lifecycle's standing state, kept change by change, counts CPUs and memory as a
session rebuilt from the snapshot does.
"""

from __future__ import annotations

import copy
from collections import Counter

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from scheduler.engine import CycleResult, Snapshot, State, run_cycle
from scheduler.engine.resources import CPU, MEMORY, host_resources
from scheduler.scenario import parse_scenario
from scheduler.scenario.runner import Runner
from tests.properties.test_invariants import (
    EXAMPLES,
    PROFILE,
    Tree,
    _yaml,
    apply_decisions,
    check_cycle,
    scenario_docs,
)
from tests.properties.test_standing import ComparingRunner

pytestmark = pytest.mark.properties

EPS = 1e-6


@st.composite
def host_docs(draw) -> dict:
    """``scenario_docs`` with CPUs and memory on nodes, workloads and queue quotas."""
    doc = draw(scenario_docs())
    for group in doc["cluster"]["nodes"]:
        group["cpu"] = draw(st.sampled_from([8, 16, 32, 64]))
        group["memory_gib"] = draw(st.sampled_from([32, 64, 256]))
    if draw(st.booleans()):
        doc["cluster"]["nodes"].append({"name": "cpuonly", "gpus": 0, "cpu": 32, "memory_gib": 64})
    for entry in doc["workloads"]:
        if "placement" in entry:
            continue  # explicit placements were drawn against GPUs only
        entry["cpu"] = draw(st.sampled_from([0, 0, 1, 2, 4, 8, 16]))
        entry["memory_gib"] = draw(st.sampled_from([0, 0, 4, 16, 32]))
        if draw(st.integers(0, 4)) == 0:
            entry.pop("gpu_memory_gib", None)
            entry["gpus"] = 0
            entry["cpu"] = entry["cpu"] or 2
    for queue in doc["queues"]:
        for key, values in (
            ("deserved_cpu", [None, None, 0, 4, 8, 16, 32]),
            ("limit_cpu", [None, None, None, 8, 16, 48]),
            ("over_quota_weight_cpu", [None, None, 0, 2]),
            ("deserved_memory_gib", [None, None, 16, 64]),
            ("limit_memory_gib", [None, None, None, 32, 128]),
            ("over_quota_weight_memory", [None, None, 3]),
        ):
            value = draw(st.sampled_from(values))
            if value is not None:
                queue[key] = value
    if not any("deserved_cpu" in q or "limit_cpu" in q for q in doc["queues"]):
        doc["queues"][0]["limit_cpu"] = draw(st.sampled_from([4, 16, 64]))
    return doc


def _amount(workload, key: str) -> int:
    request = workload.request
    return (request.cpu_milli if key == CPU else request.memory_mib) * request.replicas


def host_problems(snapshot: Snapshot, result: CycleResult, now: float) -> list[str]:
    """Invariants 1-3 for one cycle, from the snapshot and the decisions alone."""
    at = f"t={now:g}"
    tree = Tree(snapshot.queues)
    problems: list[str] = []
    after = apply_decisions(snapshot, result)
    before = {w.name for w in snapshot.workloads if w.state is State.RUNNING}
    started = {name for name in after if name not in before}
    nodes = {node.name: node for node in snapshot.nodes}
    for key, attr in ((CPU, "cpu_milli"), (MEMORY, "memory_mib")):
        held: Counter = Counter()
        for workload, placement in after.values():
            per_replica = getattr(workload.request, attr)
            for replica in placement:
                held[replica.node] += per_replica
        for node, amount in held.items():
            size = getattr(nodes[node], attr) if node in nodes else None
            if size is not None and amount > size:
                problems.append(f"{at}: {node} holds {amount} of its {size} {key}")
    for resource in host_resources(snapshot.queues, snapshot.nodes):
        use: Counter = Counter()
        np_use: Counter = Counter()
        for workload, _placement in after.values():
            for level in tree.up(workload.queue):
                use[level] += _amount(workload, resource.key)
                if not workload.preemptible:
                    np_use[level] += _amount(workload, resource.key)
        for name in started:
            workload = next(w for w, _ in [after[name]])
            if not _amount(workload, resource.key):
                continue
            for level in tree.up(workload.queue):
                limit = resource.limits[level]
                if limit is not None and use[level] > limit + EPS:
                    problems.append(
                        f"{at}: {name} started; {level} uses {use[level]} {resource.key}, "
                        f"limit {limit}"
                    )
                if not workload.preemptible and np_use[level] > resource.deserved[level] + EPS:
                    problems.append(
                        f"{at}: non-preemptible {name} started; {level} non-preemptible "
                        f"{resource.key} {np_use[level]}, deserved {resource.deserved[level]}"
                    )
    return problems


class HostRunner(Runner):
    """The real runner, checking every cycle and every settled instant."""

    def __init__(self, scenario) -> None:
        super().__init__(scenario)
        self.cycles = 0

    def after_cycle(self, snapshot: Snapshot, result: CycleResult, now: float) -> None:
        self.cycles += 1
        problems = check_cycle(snapshot, result, now, churn=False)
        problems += host_problems(snapshot, result, now)
        assert not problems, "\n".join(problems[:10])

    def after_instant(self, now: float) -> None:
        snapshot = self.snapshot()
        settled = self.result
        assert settled is not None and not settled.decisions
        again = run_cycle(snapshot, now, self.policy)
        assert not again.decisions, f"t={now:g}: settled, but decides {again.decisions} again"
        assert again.pending == settled.pending


@settings(PROFILE)
@given(doc=host_docs())
def test_cpu_and_memory_quotas_keep_the_invariants(doc):
    note("scenario:\n" + _yaml(doc))
    HostRunner(parse_scenario(copy.deepcopy(doc))).run()  # raises with the problems


class HostComparingRunner(ComparingRunner):
    """The standing state's CPU and memory counts equal a rebuilt session's."""

    def compare(self, snapshot: Snapshot, now: float) -> None:
        super().compare(snapshot, now)
        from scheduler.engine.session import Session

        kept = self.lifecycle.session(tuple(self.nodes), self.scenario.queues, now, self.policy)
        rebuilt = Session(snapshot, now, kept.policy)
        assert kept.host == rebuilt.host, f"t={now:g}: {kept.host} != {rebuilt.host}"


@settings(PROFILE, max_examples=max(20, EXAMPLES // 3))
@given(doc=host_docs())
def test_the_standing_state_counts_cpus_and_memory_as_a_rebuilt_one(doc):
    doc["grace_seconds"] = 2
    note("scenario:\n" + _yaml(doc))
    runner = HostComparingRunner(parse_scenario(copy.deepcopy(doc)))
    runner.run()
    assert runner.compared > 0
