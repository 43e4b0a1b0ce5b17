"""The engine-speed benchmark builds a valid synthetic cluster (behaviour only, no timing)."""

from __future__ import annotations

import importlib.util
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from scheduler.common.limits import MILLI
from scheduler.engine import Kind, State

pytestmark = pytest.mark.unit

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "engine_speed.py"


def _load():
    spec = importlib.util.spec_from_file_location("engine_speed_bench", _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


bench = _load()


@pytest.fixture(scope="module")
def cycle_snapshot():
    return bench.build_cycle_snapshot(bench.QUICK, seed=1)


def _gpu_load(snapshot) -> dict[tuple[str, int], int]:
    load: Counter[tuple[str, int]] = Counter()
    for w in snapshot.workloads:
        if w.state is State.RUNNING:
            for replica in w.placement:
                for share in replica.gpus:
                    load[replica.node, share.index] += share.milli
    return load


def test_quick_cycle_snapshot_has_the_requested_counts(cycle_snapshot):
    scale = bench.QUICK
    counts = bench.validate(cycle_snapshot)
    assert counts["nodes"] == scale.nodes == len(cycle_snapshot.nodes)
    assert counts["gpus"] == scale.nodes * scale.gpus_per_node
    assert all(node.gpus == 8 and node.gpu_memory_mib == 80 * 1024 for node in cycle_snapshot.nodes)
    assert counts["running"] == scale.running
    assert counts["pending"] == scale.pending
    assert counts["departments"] == scale.departments
    assert counts["queues"] == scale.departments * (1 + scale.projects_per_department)
    assert counts["gangs"] > 0
    assert counts["over_deserved_queues"] > 0


def test_no_gpu_is_over_capacity_and_fill_is_as_asked(cycle_snapshot):
    load = _gpu_load(cycle_snapshot)
    assert max(load.values()) <= MILLI
    capacity = bench.QUICK.nodes * bench.QUICK.gpus_per_node * MILLI
    assert sum(load.values()) == round(bench.QUICK.fill * capacity / MILLI) * MILLI


def test_the_mix_has_fractions_whole_gpus_gangs_and_protected_work(cycle_snapshot):
    shapes = Counter((w.request.gpus, w.request.replicas > 1) for w in cycle_snapshot.workloads)
    for gpus in (0.25, 0.5, 1, 2, 4, 8):
        assert shapes[gpus, False] > 0, gpus
    running = [w for w in cycle_snapshot.workloads if w.state is State.RUNNING]
    assert all(w.preemptible == (w.kind is Kind.TRAINING) for w in cycle_snapshot.workloads)
    assert any(w.kind is Kind.INTERACTIVE for w in running)
    assert any(w.min_runtime > 0 for w in running)
    assert len({w.start_seq for w in running}) == len(running)


def test_build_is_deterministic():
    assert bench.build_cycle_snapshot(bench.QUICK, seed=3) == bench.build_cycle_snapshot(
        bench.QUICK, seed=3
    )


@pytest.mark.parametrize("gpus", [0.5, 1.0])
def test_probe_snapshot_is_fully_packed_with_one_notebook_under_quota(gpus):
    snapshot = bench.build_probe_snapshot(bench.QUICK, seed=1, gpus=gpus)
    counts = bench.validate(snapshot)
    assert counts["running"] == bench.QUICK.running
    assert counts["pending"] == 1
    load = _gpu_load(snapshot)
    assert len(load) == counts["gpus"] and set(load.values()) == {MILLI}
    (notebook,) = [w for w in snapshot.workloads if w.state is State.PENDING]
    assert notebook.kind is Kind.INTERACTIVE and not notebook.preemptible
    assert notebook.request.gpus == gpus
    used, _ = bench._usage(snapshot.queues, snapshot.workloads)
    queues = {q.name: q for q in snapshot.queues}
    home = queues[notebook.queue]
    for queue in (home, queues[home.parent]):
        assert used[queue.name] + gpus * MILLI <= queue.deserved_gpus * MILLI


def test_a_small_run_reports_every_measurement_and_the_notebook_starts():
    tiny = replace(bench.QUICK, nodes=20, running=400, pending=200)
    report = bench.run(tiny, reps=1, probe_reps=1, seed=1)
    assert report["cycle"]["n"] == 1 and report["session"]["n"] == 1
    decisions = report["cycle_decisions"]
    assert decisions["evicted_non_preemptible"] == decisions["evicted_protected"] == 0
    assert decisions["evictions_for_unstarted"] == 0
    for gpus in ("0.5", "1"):
        outcome = report["notebooks"][gpus]["outcome"]
        assert outcome["started"], outcome
        assert outcome["victims"], "a fully packed cluster needs victims"
        assert all(v["kind"] == "training" for v in outcome["victims"])
    report["peak_rss_mib"] = bench.peak_rss_mib()
    assert "full cycle: decide(lifecycle.session())" in bench.table(report)


def test_kai_size_has_a_three_level_tree_and_runs_small():
    """The 4,000-node configuration's tree (4 divisions > 20 departments > 200 projects), at a
    size small enough for a unit test, builds valid and reports every measurement."""
    small = replace(bench.KAI, nodes=80, running=1_600, pending=800)
    snapshot = bench.build_cycle_snapshot(small, seed=1)
    counts = bench.validate(snapshot)
    assert counts["queues"] == 4 + 20 + 200 and counts["departments"] == 4
    queues = {q.name: q for q in snapshot.queues}
    parents = {q.parent for q in snapshot.queues}
    for leaf in (q for q in snapshot.queues if q.name not in parents):
        chain = [leaf.name]
        while queues[chain[-1]].parent is not None:
            chain.append(queues[chain[-1]].parent)
        assert len(chain) == 3, chain
    for division in (q for q in snapshot.queues if q.parent is None):
        kids = [q for q in snapshot.queues if q.parent == division.name]
        assert len(kids) == 5
        assert division.deserved_gpus == sum(k.deserved_gpus for k in kids)
    report = bench.run(small, reps=1, probe_reps=1, seed=1, only="cycle")
    assert report["cycle_decisions"]["evicted_non_preemptible"] == 0
