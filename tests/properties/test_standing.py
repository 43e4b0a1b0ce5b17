"""The lifecycle's standing state, kept current change by change, equals a rebuilt one.

Random scenarios (the invariants' own generator, with and without a grace period, so that
releasing work, claims and yielding victims occur) are replayed through the real runner,
which decides every cycle on ``Lifecycle.session`` (the standing state brought up to date
with the workloads that changed). After every cycle and every settled instant the session it
hands out is compared, field by field and by what ``decide`` makes of it, with
``Session(snapshot)`` built from scratch for the same workloads; arrivals, starts,
evictions, requeues, exits, cancellations and node changes all pass through it.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

from scheduler.engine import CycleResult, Snapshot, decide
from scheduler.engine.session import Session
from scheduler.scenario import parse_scenario
from scheduler.scenario.runner import Runner
from tests.properties.test_invariants import EXAMPLES, PROFILE, _yaml, scenario_docs

pytestmark = pytest.mark.properties


def state_of(session: Session) -> dict:
    """Everything a cycle reads from a session, in a form that compares by value."""
    ledger = session.ledger
    ledger.sync()
    victims = session.victim_lists()
    return {
        "running": dict(session.running),
        "pending": dict(session.pending),
        "placed": dict(session._placed_size),
        "demand": {q: v for q, v in session.demand.items()},
        "allocated": dict(session.use.allocated),
        "non_preemptible": dict(session.use.non_preemptible),
        "running_count": dict(session.running_count),
        "yielding": set(session.yielding),
        "claimed": {k: sorted(map(repr, v)) for k, v in session.claimed.items() if v},
        "held": [list(gpus) for gpus in session.held],
        "free": [list(gpus) for gpus in ledger.free],
        "cpu": list(ledger.cpu_free),
        "mem": list(ledger.mem_free),
        "whole": list(ledger.whole_free),
        "whole_counts": list(ledger.whole_counts),
        "total": ledger.total_free,
        "by_memory": {m: list(index) for m, index in ledger.by_memory.items()},
        "by_whole": list(ledger.by_whole),
        "fair": dict(session.fair),
        "protections": sorted(session._protections_now()),
        "victims": {q: [w.name for w in victims[q]] for q in victims},
        "on_node": {
            node.name: sorted(w.name for w in session.on_node(node.name)) for node in ledger.nodes
        },
        "wakeup": session.next_wakeup(),
        "policy": session.policy,
    }


def differences(kept: Session, rebuilt: Session) -> list[str]:
    mine, theirs = state_of(kept), state_of(rebuilt)
    found = [f"{key}: {mine[key]!r} != {theirs[key]!r}" for key in mine if mine[key] != theirs[key]]
    if kept._next_start_seq < rebuilt._next_start_seq:
        found.append("start numbering went back")
    return found


class ComparingRunner(Runner):
    """The real runner, comparing its standing state with a rebuilt one at every step."""

    def __init__(self, scenario) -> None:
        super().__init__(scenario)
        self.compared = 0

    def compare(self, snapshot: Snapshot, now: float) -> None:
        kept = self.lifecycle.session(tuple(self.nodes), self.scenario.queues, now, self.policy)
        rebuilt = Session(snapshot, now, kept.policy)
        assert kept.policy == self.policy.for_snapshot(snapshot)
        problems = differences(kept, rebuilt)
        assert not problems, f"t={now:g}: " + "\n".join(problems[:5])
        assert decide(kept) == decide(rebuilt), f"t={now:g}: the two decide differently"
        self.compared += 1

    def after_cycle(self, snapshot: Snapshot, result: CycleResult, now: float) -> None:
        self.compare(self.snapshot(), now)

    def after_instant(self, now: float) -> None:
        self.compare(self.snapshot(), now)


@st.composite
def docs_with_grace(draw) -> dict:
    doc = draw(scenario_docs())
    doc["grace_seconds"] = draw(st.sampled_from([0, 0, 2, 7]))
    return doc


@settings(PROFILE, max_examples=max(20, EXAMPLES // 3))
@given(doc=docs_with_grace())
def test_the_standing_state_equals_a_rebuilt_session(doc):
    note("scenario:\n" + _yaml(doc))
    runner = ComparingRunner(parse_scenario(copy.deepcopy(doc)))
    runner.run()
    assert runner.compared > 0


def test_the_comparison_sees_a_difference():
    """Not vacuous: a standing state that missed a change differs from the rebuilt one."""
    doc = {
        "cluster": {"nodes": [{"name": "a", "gpus": 2}]},
        "queues": [{"name": "lab", "deserved_gpus": 2}],
        "workloads": [
            {"name": "t", "queue": "lab", "gpus": 1, "state": "running"},
            {"name": "u", "queue": "lab", "gpus": 1, "at": 5},
        ],
    }
    runner = Runner(parse_scenario(doc))
    runner.run()
    nodes, queues = tuple(runner.nodes), runner.scenario.queues
    snapshot = runner.snapshot()
    kept = runner.lifecycle.session(nodes, queues, 10.0, runner.policy)
    assert differences(kept, Session(snapshot, 10.0, kept.policy)) == []
    # the lifecycle never hears that t ended: its standing state still counts it
    runner.lifecycle.lives.pop("t")
    stale = runner.lifecycle.session(nodes, queues, 10.0, runner.policy)
    assert differences(stale, Session(runner.snapshot(), 10.0, stale.policy))
