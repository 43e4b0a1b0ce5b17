"""Hand-made cases for subtle corners, and the shrunk reproductions in ``repro/``.

Every case runs through ``ObservedRunner``, so all the invariants of ``test_invariants.py`` are
checked at every cycle on top of the case's own expectations.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_invariants import ObservedRunner

from scheduler.scenario import load_scenario, parse_scenario

pytestmark = pytest.mark.properties

REPRO = sorted((Path(__file__).parent / "repro").glob("*.yaml"))


def _run(doc: dict):
    return ObservedRunner(parse_scenario(doc)).run()


def _states(outcome) -> dict[str, str]:
    return {name: entry["state"] for name, entry in outcome.to_json()["workloads"].items()}


@pytest.mark.parametrize("path", REPRO, ids=[p.stem for p in REPRO])
def test_reproduction_behaves_as_expected(path: Path):
    """A shrunk failing example: its comment says what should happen; ``expect:`` checks it."""
    scenario = load_scenario(str(path))
    outcome = ObservedRunner(scenario).run()  # raises on any invariant, with the problems
    expect = scenario.extra.get("expect", {})
    states = _states(outcome)
    for name in expect.get("running", []):
        assert states[name] == "running", (name, states)
    for name in expect.get("pending", []):
        assert states[name] == "pending", (name, states)
    for name, count in expect.get("preemptions", {}).items():
        assert outcome.lives[name].preemptions == count, (name, outcome.events)


def test_protection_ending_triggers_reclaim_at_that_instant():
    """Rule 4: min_runtime protects a borrower; the reclaim happens at t=30, not later."""
    outcome = _run(
        yaml.safe_load(
            """
            cluster: {nodes: [{name: a, gpus: 1}]}
            queues:
              - {name: borrower, deserved_gpus: 0}
              - {name: owner, deserved_gpus: 1}
            workloads:
              - {name: t1, queue: borrower, kind: training, gpus: 1, min_runtime: 30}
              - {name: o1, queue: owner, kind: training, gpus: 1, at: 10}
            run_until: 100
            """
        )
    )
    evicted = [e for e in outcome.events if e["type"] == "evicted"]
    assert evicted == [
        {
            "time": 30,
            "type": "evicted",
            "workload": "t1",
            "reason": "reclaim",
            "message": "preempted for owner/o1 (borrowed GPUs reclaimed); 30 s of work lost "
            "(0.01 GPU-hours)",
        }
    ]
    started = {e["workload"]: e["time"] for e in outcome.events if e["type"] == "started"}
    assert started["o1"] == 30


def test_lost_node_evicts_a_gang_whole_and_frees_its_other_replicas():
    """A gang with one replica on a removed node is evicted once, whole; its GPU on the node
    that stays is free again for the next workload in the same instant."""
    outcome = _run(
        yaml.safe_load(
            """
            cluster: {nodes: [{name: a, gpus: 1}, {name: b, gpus: 1}]}
            queues: [{name: lab, deserved_gpus: 2}]
            workloads:
              - {name: gang, queue: lab, kind: training, gpus: 1, replicas: 2}
              - {name: solo, queue: lab, kind: training, gpus: 1, at: 5}
            events:
              - {at: 10, remove_node: b}
            run_until: 20
            """
        )
    )
    evicted = [e for e in outcome.events if e["type"] == "evicted"]
    assert evicted == [
        {
            "time": 10,
            "type": "evicted",
            "workload": "gang",
            "reason": "node-lost",
            "message": "its node was lost; 10 s of work lost (0.01 GPU-hours)",
        }
    ]
    states = _states(outcome)
    assert states == {"gang": "pending", "solo": "running"}
    assert outcome.lives["gang"].preemptions == 1
    assert outcome.lives["solo"].started_at == 10


def test_non_preemptible_notebook_never_borrows_beyond_deserved():
    """Rule 3 at department level: each project is inside its own quota, the department is not."""
    outcome = _run(
        yaml.safe_load(
            """
            cluster: {nodes: [{name: a, gpus: 4}]}
            queues:
              - {name: dept, deserved_gpus: 1}
              - {name: p1, parent: dept, deserved_gpus: 1}
              - {name: p2, parent: dept, deserved_gpus: 1}
            workloads:
              - {name: nb1, queue: p1, kind: interactive, gpus: 1}
              - {name: nb2, queue: p2, kind: interactive, gpus: 1}
            """
        )
    )
    json = outcome.to_json()["workloads"]
    assert json["nb1"]["state"] == "running"
    assert json["nb2"]["state"] == "pending"
    assert "department dept" in json["nb2"]["pending_reason"]
    assert json["nb2"]["queue_position"] == 1


CONSOLIDATE = """
cluster: {nodes: [{name: a, gpus: 2}]}
queues: [{name: lab, deserved_gpus: 2}]
workloads:
  - {name: f1, queue: lab, kind: training, gpus: 0.5, state: running,
     placement: [{node: a, gpus: [0]}]}
  - {name: f2, queue: lab, kind: KIND, gpus: 0.5, state: running,
     placement: [{node: a, gpus: [1]}]}
  - {name: whole, queue: lab, kind: training, gpus: 1, at: 10}
"""


def test_scattered_fractions_are_consolidated_for_a_whole_gpu():
    """Rule 6: one half moves next to the other, and the whole-GPU job starts in that cycle."""
    outcome = _run(yaml.safe_load(CONSOLIDATE.replace("KIND", "training")))
    events = [(e["time"], e["type"], e.get("reason")) for e in outcome.events]
    assert events == [(10, "evicted", "consolidate"), (10, "started", None), (10, "started", None)]
    moved = outcome.events[0]["workload"]
    assert moved in ("f1", "f2") and outcome.events[1]["workload"] == moved
    assert outcome.events[2]["workload"] == "whole"
    assert _states(outcome) == dict.fromkeys(["f1", "f2", "whole"], "running")


def test_only_the_preemptible_half_moves():
    """Rule 6: the notebook f2 stays where it is; the training half f1 moves next to it."""
    outcome = _run(yaml.safe_load(CONSOLIDATE.replace("KIND", "interactive")))
    evicted = [(e["workload"], e["reason"]) for e in outcome.events if e["type"] == "evicted"]
    assert evicted == [("f1", "consolidate")]
    assert outcome.lives["f2"].placement[0].gpus[0].index == 1
    assert outcome.lives["f1"].placement[0].gpus[0].index == 1
    assert _states(outcome) == dict.fromkeys(["f1", "f2", "whole"], "running")
