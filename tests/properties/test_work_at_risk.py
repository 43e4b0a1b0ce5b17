"""Hypothesis properties of work at risk, over the random scenarios of
``test_invariants`` with random checkpoint intervals and a small ``Policy.loss_bound``:

1. every eviction and move reports the work it destroys: ``lost_seconds`` is the time since the
   workload's last save (start, or the last declared checkpoint interval after it) and
   ``lost_gpu_seconds`` that time its placed GPUs, computed here independently;
2. no move of work protected by min_runtime, and no move losing more than the bound;
3. no eviction losing more than the bound unless its claimant is a notebook or inside its
   queue's deserved quota (with the claimant, at its turn in the cycle); for an in-quota
   training claimant, not more than it has waited for either (its GPUs times the time
   since it was submitted);
4. every cycle keeps the invariants ``check_cycle`` checks.

The "settled stays settled until the next instant" check of ``test_invariants`` is left out
here: with a declared interval the work at risk falls at every checkpoint, so a victim over
the bound can come within it between instants (the next cycle sees it; docs/scheduling.md).
"""

from __future__ import annotations

import copy
import math
from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from scheduler.common.limits import MILLI
from scheduler.common.placement import Placement
from scheduler.engine import (
    CycleResult,
    Evict,
    EvictReason,
    Kind,
    Move,
    Snapshot,
    Start,
    State,
    Workload,
)
from scheduler.engine.model import Request
from scheduler.scenario import parse_scenario
from scheduler.scenario.runner import Runner
from tests.properties.test_invariants import (
    EXAMPLES,
    PROFILE,
    Tree,
    _protected,
    _yaml,
    check_cycle,
    scenario_docs,
)

pytestmark = pytest.mark.properties

EPS = 1e-6


@st.composite
def checkpointing_docs(draw) -> tuple[dict, float]:
    doc = draw(scenario_docs())
    for entry in doc["workloads"]:
        interval = draw(st.sampled_from([None, None, 5, 15, 40]))
        if interval is not None:
            entry["checkpoint_interval_seconds"] = interval
    return doc, draw(st.sampled_from([0.0, 2.0, 10.0, 30.0]))


def _saved_at(workload: Workload, now: float) -> float:
    """When the work was last saved, from the scenario's own terms (not the engine's helper)."""
    start = workload.started_at if workload.started_at is not None else now
    interval = workload.checkpoint_interval
    if not interval:
        return start
    return start + math.floor((now - start) / interval) * interval


def _held(placement: Placement) -> int:
    return sum(share.milli for replica in placement for share in replica.gpus)


def _request_milli(request: Request, largest_mib: int) -> int:
    if request.gpu_memory_mib is not None:
        per = -(-request.gpu_memory_mib * MILLI // largest_mib)
    elif request.gpus >= 1:
        per = int(request.gpus) * MILLI
    else:
        per = round(request.gpus * MILLI)
    return per * request.replicas


def loss_problems(snapshot: Snapshot, result: CycleResult, now: float, bound: float) -> list[str]:
    problems = []
    at = f"t={now:g}"
    workloads = {w.name: w for w in snapshot.workloads}
    largest = max((node.gpu_memory_mib for node in snapshot.nodes), default=1)
    tree = Tree(snapshot.queues)
    # leaf allocation as the cycle goes, to know each claimant's standing at its turn
    use: Counter = Counter()
    for w in snapshot.workloads:
        if w.state is State.RUNNING:
            use[w.queue] += _held(w.placement)
    standing: dict[str, int] = {}
    for decision in result.decisions:
        workload = workloads[decision.workload]
        if isinstance(decision, (Evict, Move)):
            lost = now - _saved_at(workload, now)
            gpu_seconds = _held(workload.placement) / MILLI * lost
            if abs(decision.lost_seconds - lost) > EPS:
                problems.append(f"{at}: {decision} reports lost_seconds, expected {lost:g}")
            if abs(decision.lost_gpu_seconds - gpu_seconds) > 1e-3:
                problems.append(f"{at}: {decision} reports lost GPU-s, expected {gpu_seconds:g}")
            claimant = workloads.get(decision.claimant or "")
            if claimant is not None and claimant.name not in standing:
                standing[claimant.name] = use[claimant.queue]
            if isinstance(decision, Move):
                if _protected(workload, now):
                    problems.append(f"{at}: {workload.name} moved inside its min_runtime")
                if gpu_seconds > bound + EPS:
                    problems.append(f"{at}: move of {workload.name} loses {gpu_seconds:g} GPU-s")
            elif decision.reason is not EvictReason.NODE_LOST and gpu_seconds > bound + EPS:
                in_quota = claimant is not None and (
                    standing[claimant.name] + _request_milli(claimant.request, largest)
                    <= tree.deserved[claimant.queue] + EPS
                )
                notebook = claimant is not None and claimant.kind is Kind.INTERACTIVE
                if not (in_quota or notebook):
                    problems.append(
                        f"{at}: {workload.name} evicted losing {gpu_seconds:g} GPU-s > {bound:g} "
                        f"for {decision.claimant}, neither a notebook nor inside its quota"
                    )
                elif not notebook:
                    size = _request_milli(claimant.request, largest) / MILLI
                    waited = size * (now - claimant.submitted_at)
                    if gpu_seconds > waited + 1e-3:
                        problems.append(
                            f"{at}: {workload.name} evicted losing {gpu_seconds:g} GPU-s for "
                            f"{decision.claimant}, more than the {waited:g} it has waited for"
                        )
        if isinstance(decision, Start):
            use[workload.queue] += _held(decision.placement)
        elif isinstance(decision, Evict):
            use[workload.queue] -= _held(workload.placement)
        elif isinstance(decision, Move):
            use[workload.queue] += _held(decision.placement) - _held(workload.placement)
        if isinstance(decision, (Evict, Move)):
            workloads[workload.name] = replace(
                workload,
                placement=decision.placement if isinstance(decision, Move) else (),
                started_at=now,
            )
    return problems


class BoundedRunner(Runner):
    """Checks every cycle through the runner's public hook (``after_cycle`` gets the snapshot
    the engine saw and its result)."""

    def __init__(self, scenario, bound: float) -> None:
        super().__init__(scenario)
        self.policy = replace(self.policy, loss_bound=bound)
        self.bound = bound
        self.evictions = 0

    def after_cycle(self, snapshot: Snapshot, result: CycleResult, now: float) -> None:
        problems = check_cycle(snapshot, result, now, churn=False)
        problems += loss_problems(snapshot, result, now, self.bound)
        if problems:
            raise AssertionError("\n".join(problems[:10]))
        self.evictions += sum(isinstance(d, (Evict, Move)) for d in result.decisions)


@settings(PROFILE, max_examples=max(10, EXAMPLES // 2))
@given(case=checkpointing_docs())
def test_evictions_report_and_respect_the_work_at_risk(case):
    doc, bound = case
    note(f"loss_bound: {bound}\nscenario:\n" + _yaml(doc))
    BoundedRunner(parse_scenario(copy.deepcopy(doc)), bound).run()


def test_the_checker_sees_a_costly_move_and_a_wrong_report():
    """The property above is not vacuous: doctored decisions break it."""
    doc = {
        "cluster": {"nodes": [{"name": "a", "gpus": 2}]},
        "queues": [{"name": "lab", "deserved_gpus": 0}],
        "workloads": [
            {
                "name": "t",
                "queue": "lab",
                "gpus": 1,
                "state": "running",
                "placement": [{"node": "a", "gpus": [0]}],
            },
            {"name": "c", "queue": "lab", "gpus": 2, "at": 50},
        ],
    }
    runner = Runner(parse_scenario(doc))
    runner.begin_running()
    for seq, spec in list(runner.unsubmitted):
        runner.submit(seq, spec, 50.0)
    snapshot = runner.snapshot()
    placement = runner.lives["t"].placement
    moved = (replace(placement[0], gpus=(replace(placement[0].gpus[0], index=1),)),)
    costly = CycleResult((Move("t", moved, "c", 50.0, 50.0),), {}, {}, None)
    assert any("move of t loses 50" in p for p in loss_problems(snapshot, costly, 50.0, 10.0))
    wrong = CycleResult((Evict("t", EvictReason.RECLAIM, "c", 3.0, 3.0),), {}, {}, None)
    found = loss_problems(snapshot, wrong, 50.0, 100.0)
    assert any("lost_seconds, expected 50" in p for p in found)
    over = CycleResult((Evict("t", EvictReason.PREEMPT, "c", 50.0, 50.0),), {}, {}, None)
    assert any("neither a notebook" in p for p in loss_problems(snapshot, over, 50.0, 10.0))


def test_the_checker_sees_an_in_quota_job_costing_more_than_it_waited_for():
    """An in-quota training claimant that has just arrived may not cost 50 GPU-seconds."""
    doc = {
        "cluster": {"nodes": [{"name": "a", "gpus": 2}]},
        "queues": [{"name": "lab", "deserved_gpus": 2}, {"name": "other", "deserved_gpus": 0}],
        "workloads": [
            {
                "name": "t",
                "queue": "other",
                "gpus": 1,
                "state": "running",
                "placement": [{"node": "a", "gpus": [0]}],
            },
            {"name": "c", "queue": "lab", "gpus": 2, "at": 50},
        ],
    }
    runner = Runner(parse_scenario(doc))
    runner.begin_running()
    for seq, spec in list(runner.unsubmitted):
        runner.submit(seq, spec, 50.0)
    costly = CycleResult((Evict("t", EvictReason.RECLAIM, "c", 50.0, 50.0),), {}, {}, None)
    found = loss_problems(runner.snapshot(), costly, 50.0, 10.0)
    assert any("more than the 0 it has waited for" in p for p in found), found
