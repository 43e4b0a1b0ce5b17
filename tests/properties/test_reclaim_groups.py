"""Reclaim's group shortcut (``Policy.reclaim_groups``) is speed only: same decisions.

Random scenarios (the invariants' own generator, with and without a grace period) are
replayed through the real runner; at every cycle and every settled instant the snapshot is
decided twice, with the shortcut and with ``reclaim_groups=False`` (every queue with victims
weighed for every claimant), and the two results must be equal: decisions, pending reasons
and positions, queue status and the next wake-up. The generator's trees are at most two
levels of few queues, so the benchmark's synthetic cluster (departments of ten projects,
half of them far over their fair share) is decided both ways too, at its smoke size.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest
from hypothesis import given, note, settings

from benchmarks.engine_speed import NOW, QUICK, build_cycle_snapshot
from scheduler.engine import CycleResult, Evict, Snapshot, decide
from scheduler.engine.placement import scorer_named
from scheduler.engine.session import Policy, Session
from scheduler.scenario import parse_scenario
from scheduler.scenario.runner import Runner
from tests.properties.test_invariants import EXAMPLES, PROFILE, _yaml
from tests.properties.test_standing import docs_with_grace

pytestmark = pytest.mark.properties


class TwiceDecidingRunner(Runner):
    """The real runner, deciding each state again with and without the shortcut."""

    def __init__(self, scenario) -> None:
        super().__init__(scenario)
        self.compared = 0

    def compare(self, snapshot: Snapshot, now: float) -> None:
        policy = self.policy.for_snapshot(snapshot)
        assert policy.reclaim_groups  # the product's default
        fast = decide(Session(snapshot, now, policy))
        plain = decide(Session(snapshot, now, replace(policy, reclaim_groups=False)))
        assert fast == plain, f"t={now:g}: the shortcut changed the cycle"
        self.compared += 1

    def after_cycle(self, snapshot: Snapshot, result: CycleResult, now: float) -> None:
        self.compare(self.snapshot(), now)

    def after_instant(self, now: float) -> None:
        self.compare(self.snapshot(), now)


@settings(PROFILE, max_examples=max(30, EXAMPLES // 2))
@given(doc=docs_with_grace())
def test_reclaim_groups_decide_as_weighing_every_queue(doc):
    note("scenario:\n" + _yaml(doc))
    runner = TwiceDecidingRunner(parse_scenario(copy.deepcopy(doc)))
    runner.run()
    assert runner.compared > 0


@pytest.mark.parametrize("placement", ["frachub", "pack"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_reclaim_groups_decide_the_benchmark_cluster_alike(seed, placement):
    snapshot = build_cycle_snapshot(QUICK, seed)
    policy = Policy(scorer=scorer_named(placement)).for_snapshot(snapshot)
    fast = decide(Session(snapshot, NOW, policy))
    plain = decide(Session(snapshot, NOW, replace(policy, reclaim_groups=False)))
    assert any(isinstance(d, Evict) for d in fast.decisions)  # reclaim had work to do
    assert fast == plain
