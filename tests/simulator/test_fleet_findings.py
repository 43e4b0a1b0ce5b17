"""Engine behaviour the fleet simulation found, kept as regression tests.

Reclaim ping-pong at the end of a grace period, fixed: a requeued victim now yields to its
claimant, trying only after it in each cycle while the claimant waits. Before the fix, ``c``
(project a, inside its deserved quota) reclaimed ``v`` (project b, above its deserved
quota). When v's grace period ended, v was requeued and, in the same cycle, b was served
before a: b is the more starved queue, and a is not "inside its quota" in the service order
because its head-of-line job ``h`` (a gang that does not fit) would take it over. So v took
its own GPUs back as idle capacity, and c reclaimed them again: every grace period, for
ever. In the institute preset the whole-GPU reclaim baseline evicted one 8-GPU job 1,818
times in 14 simulated days this way.
"""

from __future__ import annotations

import pytest

from scheduler.scenario import parse_scenario, run_scenario

pytestmark = pytest.mark.simulator

PING_PONG = {
    "cluster": {"nodes": [{"name": "n", "count": 2, "gpus": 8}]},
    "queues": [{"name": "a", "deserved_gpus": 10}, {"name": "b", "deserved_gpus": 2}],
    "workloads": [
        {
            "name": "a1",
            "queue": "a",
            "gpus": 2,
            "state": "running",
            "placement": [{"node": "n-1", "gpus": [0, 1]}],
        },
        {
            "name": "v",
            "queue": "b",
            "gpus": 8,
            "state": "running",
            "placement": [{"node": "n-0", "gpus": list(range(8))}],
        },
        {"name": "h", "queue": "a", "gpus": 8, "replicas": 2},
        {"name": "c", "queue": "a", "gpus": 8},
    ],
    "grace_seconds": 30,
    "run_until": 150,
}


def test_a_reclaimed_workload_does_not_take_its_gpus_back_from_its_claimant():
    outcome = run_scenario(parse_scenario(PING_PONG)).to_json()
    assert outcome["workloads"]["v"]["preemptions"] == 1
    assert outcome["workloads"]["c"]["state"] == "running"
