"""The interactive reserve (``scheduler/engine/reserve.py``): lending starts leave it idle,
while some project has deserved quota its non-preemptible work does not use."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine import (
    Kind,
    Node,
    Policy,
    Queue,
    Snapshot,
    Start,
    run_cycle,
    scorer_named,
)
from scheduler.engine.ledger import Ledger
from scheduler.engine.reserve import kept
from scheduler.fields import InvalidSpec
from scheduler.scenario import load_scenario, run_scenario
from scheduler.scenario.spec import parse_scenario
from tests.unit.test_cycle import running, workload

pytestmark = pytest.mark.unit

SCENARIOS = Path(__file__).parents[1] / "scenarios"

NODES = (Node("a", 4, 80 * 1024), Node("b", 4, 80 * 1024))
QUEUES = (Queue("batch", deserved_gpus=2), Queue("notebooks", deserved_gpus=2))


def policy(reserve_gpus: float) -> Policy:
    return Policy(scorer=scorer_named("pack"), interactive_reserve=round(reserve_gpus * 1000))


def batch(count: int, gpus: float = 1.0, start: int = 0) -> list:
    return [workload(f"j{i}", "batch", gpus=gpus, seq=i) for i in range(start, start + count)]


def started(result) -> list[str]:
    return sorted(d.workload for d in result.decisions if isinstance(d, Start))


def test_off_batch_borrows_every_idle_gpu() -> None:
    result = run_cycle(Snapshot(NODES, QUEUES, tuple(batch(10))), 0.0, policy(0))
    assert len(started(result)) == 8


def test_on_lending_batch_leaves_the_reserve_idle_and_says_why() -> None:
    result = run_cycle(Snapshot(NODES, QUEUES, tuple(batch(10))), 0.0, policy(1))
    assert len(started(result)) == 7  # 8 GPUs, one kept idle
    reason = next(iter(result.pending.values())).reason
    assert "interactive reserve" in reason and "batch is beyond its deserved 2 GPUs" in reason


def test_an_in_quota_notebook_then_starts_on_the_reserve_at_once() -> None:
    full = run_cycle(Snapshot(NODES, QUEUES, tuple(batch(10))), 0.0, policy(1))
    first = set(started(full))
    placed = {d.workload: d.placement for d in full.decisions if isinstance(d, Start)}
    runs = [
        running(name, placed[name][0].node, [(placed[name][0].gpus[0].index, 1000)], queue="batch")
        for name in first
    ]
    notebook = workload("nb", "notebooks", kind=Kind.INTERACTIVE, gpus=0.5, seq=99)
    waiting = [w for w in batch(10) if w.name not in first]
    result = run_cycle(Snapshot(NODES, QUEUES, (*runs, *waiting, notebook)), 1.0, policy(1))
    assert started(result) == ["nb"]  # no eviction, and batch did not take the rest
    assert all(isinstance(d, Start) for d in result.decisions)


def test_work_inside_its_quota_may_use_the_reserve() -> None:
    queues = (Queue("batch", deserved_gpus=8), Queue("notebooks", deserved_gpus=0))
    result = run_cycle(Snapshot(NODES, queues, tuple(batch(10))), 0.0, policy(1))
    assert len(started(result)) == 8


def test_nothing_is_kept_once_no_project_has_unused_deserved_quota() -> None:
    """The batch project's deserved quota counts as unused non-preemptible quota too; with
    every deserved GPU used by non-preemptible work, nothing is held back."""
    queues = (Queue("batch", deserved_gpus=0), Queue("notebooks", deserved_gpus=1))
    notebook = running("nb", "a", [(0, 1000)], queue="notebooks", kind=Kind.INTERACTIVE)
    notebook = replace(notebook, preemptible=False)
    result = run_cycle(Snapshot(NODES, queues, (notebook, *batch(10))), 0.0, policy(2))
    assert len(started(result)) == 7


def test_the_reserve_is_capped_by_the_unused_deserved_quota() -> None:
    queues = (Queue("batch", deserved_gpus=0), Queue("notebooks", deserved_gpus=0.5))
    result = run_cycle(Snapshot(NODES, queues, tuple(batch(16, gpus=0.5))), 0.0, policy(2))
    assert len(started(result)) == 15  # 0.5 GPU kept, not 2


def test_slivers_spread_over_gpus_do_not_count_as_a_whole_gpu() -> None:
    ledger = Ledger((Node("a", 4, 80 * 1024),))
    assert kept(ledger, 1000) and kept(ledger, 4000) and not kept(ledger, 4001)
    # 0.75 taken from each GPU: 1 GPU idle in all, on no one GPU
    ledger.take((ReplicaPlacement("a", tuple(GpuShare(g, 750) for g in range(4))),))
    assert ledger.total_free == 1000
    assert not kept(ledger, 1000) and not kept(ledger, 500)
    assert kept(ledger, 250)


RESERVE = SCENARIOS / "41_interactive_reserve.yaml"


def test_the_scenario_without_the_reserve_makes_the_notebook_wait_out_a_grace_period() -> None:
    scenario = load_scenario(str(RESERVE))
    kept_idle = run_scenario(scenario).to_json()
    lent = run_scenario(replace(scenario, interactive_reserve_gpus=0.0, run_until=50)).to_json()
    notebook = [e for e in kept_idle["events"] if e["workload"] == "nb"]
    assert [(e["type"], e["time"]) for e in notebook] == [("started", 10)]
    assert sum(w["preemptions"] for w in kept_idle["workloads"].values()) == 0
    assert lent["workloads"]["nb"]["started_at"] == 40  # 10 + the victim's 30 s grace
    assert sum(w["preemptions"] for w in lent["workloads"].values()) == 1


def test_a_negative_reserve_in_a_scenario_file_is_refused_with_the_field_named() -> None:
    document = yaml.safe_load(RESERVE.read_text())
    document["interactive_reserve_gpus"] = -1
    with pytest.raises(InvalidSpec, match="interactive_reserve_gpus: must be >= 0, got -1"):
        parse_scenario(document)
