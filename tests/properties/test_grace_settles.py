"""Regression: under a grace period, reclaim between many projects must settle.

Found by the service benchmark (``benchmarks/service_api.py``): 30 projects sharing 128 GPUs
with 0.25/0.5/1-GPU training and a 0.3 s grace period traded the same GPUs forever (37,702
evictions in 600 simulated seconds for 1,000 submissions). Two rules stop it: capacity a
releasing workload holds goes to the claimant it was evicted for, and beyond its deserved
quota a claimant only reclaims from a queue that keeps at least its own share ratio.
"""

from __future__ import annotations

import random

import pytest

from scheduler.scenario.runner import run_scenario
from scheduler.scenario.spec import parse_scenario

pytestmark = pytest.mark.properties


def busy_cluster(count: int, grace: float) -> dict:
    rng = random.Random(1)
    sizes = rng.choices([0.25, 0.5, 1], weights=[50, 30, 20], k=count)
    return {
        "cluster": {"nodes": [{"name": "node", "count": 16, "gpus": 8}]},
        "queues": [{"name": f"p{i:02d}", "deserved_gpus": 4} for i in range(30)],
        "grace_seconds": grace,
        "workloads": [
            {
                "name": f"w{i}",
                "queue": f"p{i % 30:02d}",
                "kind": "training",
                "gpus": sizes[i],
                "at": round(i * 0.005, 3),
            }
            for i in range(count)
        ],
        "run_until": 120,
    }


@pytest.mark.parametrize("grace", [0.3, 1.0])
def test_reclaim_under_a_grace_period_settles(grace: float) -> None:
    outcome = run_scenario(parse_scenario(busy_cluster(600, grace))).to_json()
    evictions = [e for e in outcome["events"] if e["type"] == "evicted"]
    starts = [e["time"] for e in outcome["events"] if e["type"] == "started"]
    assert max(starts) < 30, "still starting (and evicting) long after the last arrival"
    assert len(evictions) < 1_000
    allocated = sum(queue["allocated_gpus"] for queue in outcome["queues"].values())
    assert allocated == 128  # and every GPU is still in use
