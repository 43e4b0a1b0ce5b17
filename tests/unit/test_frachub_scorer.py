"""The engine's ``frachub`` scorer: FGD's choice, exactly, however the ledger got where it is."""

from __future__ import annotations

import math
import random

import pytest

from scheduler.common.limits import MILLI
from scheduler.common.placement import GpuShare, ReplicaPlacement
from scheduler.engine.fragmentation import (
    TaskShape,
    node_fragmentation,
    recent_workload,
    target_workload,
)
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Node, Request
from scheduler.engine.placement import DEFAULT_SHAPES, SCORERS, FracHub, place

pytestmark = pytest.mark.unit

MODELS = ("A100", "T4", "V100")


def _cluster(rng: random.Random, count: int) -> list[Node]:
    return [
        Node(
            f"n{i}",
            gpus=rng.choice([1, 2, 4, 8]),
            gpu_model=rng.choice(MODELS),
            cpu_milli=rng.choice([16_000, 64_000]),
            memory_mib=rng.choice([65_536, 262_144]),
        )
        for i in range(count)
    ]


def _request(rng: random.Random) -> Request:
    kind = rng.random()
    models = frozenset(rng.sample(MODELS, 1)) if rng.random() < 0.2 else frozenset()
    cpu, mem = rng.choice([0, 2000, 8000]), rng.choice([0, 4096, 32_768])
    if kind < 0.5:
        return Request(
            gpus=rng.choice([0.25, 0.5, 0.3]), cpu_milli=cpu, memory_mib=mem, gpu_models=models
        )
    if kind < 0.85:
        return Request(gpus=rng.choice([1, 2, 4]), cpu_milli=cpu, memory_mib=mem, gpu_models=models)
    return Request(cpu_milli=rng.choice([1000, 30_000]), memory_mib=mem)


def _brute_force(ledger: Ledger, request: Request, workload) -> tuple[str, tuple] | None:
    """FGD by the definition: every node and GPU scored from scratch with node_fragmentation."""
    best = None
    for n, node in enumerate(ledger.nodes):
        if not ledger.admits(n, request):
            continue
        free = ledger.free[n]
        cpu, mem = ledger.cpu_free[n], ledger.mem_free[n]
        before = node_fragmentation(free, cpu, mem, node.gpu_model, workload)
        after_cpu, after_mem = cpu - request.cpu_milli, mem - request.memory_mib
        options = []
        if request.whole_gpus:
            if free.count(MILLI) >= request.whole_gpus:
                chosen = [g for g, f in enumerate(free) if f == MILLI][: request.whole_gpus]
                new = [0 if g in chosen else f for g, f in enumerate(free)]
                growth = node_fragmentation(new, after_cpu, after_mem, node.gpu_model, workload)
                options.append((growth - before, tuple((g, MILLI) for g in chosen)))
        elif request.is_fraction:
            milli = request.milli_on(node.gpu_memory_mib)
            by_free = {}
            for g, f in enumerate(free):
                if f >= milli and f not in by_free:
                    by_free[f] = g
            for f in sorted(by_free):  # ties go to the tightest GPU
                new = list(free)
                new[by_free[f]] -= milli
                growth = node_fragmentation(new, after_cpu, after_mem, node.gpu_model, workload)
                options.append((growth - before, ((by_free[f], milli),)))
            if options:
                options = [min(options, key=lambda o: round(o[0] + before, 6))]
        else:
            growth = node_fragmentation(free, after_cpu, after_mem, node.gpu_model, workload)
            options.append((growth - before, ()))
        for growth, shares in options:
            growth = round(growth, 6)
            if request.whole_gpus or request.is_fraction:
                key = -math.floor(100.0 / (1.0 + math.exp(growth / 1000.0)))
            else:
                key = growth
            if best is None or key < best[0] - 1e-9:
                best = (key, node.name, shares, growth)
    if best is None:
        return None
    if not (request.whole_gpus or request.is_fraction):  # CPU-only: first within the window
        lowest = best[3]
        for n, node in enumerate(ledger.nodes):
            if ledger.admits(n, request):
                free = ledger.free[n]
                cpu, mem = ledger.cpu_free[n], ledger.mem_free[n]
                growth = node_fragmentation(
                    free,
                    cpu - request.cpu_milli,
                    mem - request.memory_mib,
                    node.gpu_model,
                    workload,
                ) - node_fragmentation(free, cpu, mem, node.gpu_model, workload)
                if growth <= lowest + FracHub.cpu_pod_window + 1e-9:
                    return node.name, ()
    return best[1], best[2]


@pytest.mark.parametrize("seed", range(6), ids=lambda s: f"seed{s}")
def test_frachub_chooses_what_fgd_by_definition_chooses(seed: int) -> None:
    """Placements, trial rollbacks and ledger copies in between: the memoised, journal-driven
    columns must always score the ledger as it is now."""
    rng = random.Random(seed)
    ledger = Ledger(_cluster(rng, 12))
    requests = [_request(rng) for _ in range(30)]
    workload = recent_workload(requests, 80 * 1024)
    scorer = FracHub(workload)
    for step in range(120):
        request = requests[rng.randrange(len(requests))]
        expected = _brute_force(ledger, request, scorer.workload)
        chosen = scorer.choose(ledger, request, None)
        got = (
            None
            if chosen is None
            else (chosen.node, tuple((s.index, s.milli) for s in chosen.gpus))
        )
        assert got == expected, (step, request)
        if chosen is None:
            continue
        mark = ledger.mark()
        ledger.take((chosen,), request.cpu_milli, request.memory_mib)
        if rng.random() < 0.2:
            ledger.rollback(mark)
        if rng.random() < 0.1:
            ledger = ledger.copy()


def test_frachub_keeps_to_the_nodes_and_models_it_is_given() -> None:
    nodes = [Node("a", 2, gpu_model="T4"), Node("b", 2, gpu_model="A100"), Node("c", 2)]
    ledger = Ledger(nodes)
    scorer = FracHub()
    only_a100 = Request(gpus=0.5, gpu_models=frozenset({"A100"}))
    assert scorer.choose(ledger, only_a100, None).node == "b"
    assert scorer.choose(ledger, only_a100, {0, 2}) is None
    assert scorer.choose(ledger, Request(gpus=1), {2}).node == "c"
    assert scorer.choose(ledger, Request(gpus=4), None) is None


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_every_scorer_holds_a_request_to_its_gpu_models(name: str) -> None:
    nodes = [Node("t4", 4, gpu_model="T4"), Node("a100", 4, gpu_model="A100")]
    scorer = SCORERS[name]()
    for request in (Request(gpus=0.5), Request(gpus=2), Request(gpus=1, replicas=2)):
        ledger = Ledger(nodes)
        placed = place(
            ledger, Request(**{**request.__dict__, "gpu_models": frozenset({"A100"})}), scorer
        )
        assert placed is not None and {r.node for r in placed} == {"a100"}
    ledger.take((ReplicaPlacement("a100", tuple(GpuShare(g, MILLI) for g in range(4))),))
    assert place(ledger, Request(gpus=0.5, gpu_models=frozenset({"A100"})), scorer) is None
    assert place(ledger, Request(gpus=0.5, gpu_models=frozenset({"H100"})), scorer) is None


def test_recent_workload_is_the_frequent_shapes_of_the_requests_per_replica() -> None:
    requests = (
        [Request(gpus=0.5)] * 6
        + [Request(gpus=2, replicas=2)]
        + [Request(gpu_memory_mib=20 * 1024)] * 2
    )
    shapes = recent_workload(requests, gpu_memory_mib=80 * 1024, coverage=1.0)
    assert shapes == (
        TaskShape(0, 500, 1, 0.6),
        TaskShape(0, 250, 1, 0.2),
        TaskShape(0, 1000, 2, 0.2),
    )
    assert recent_workload([], 80 * 1024) == ()
    assert FracHub(()).workload == DEFAULT_SHAPES


def test_a_new_target_workload_is_a_new_scorer_an_equal_one_is_the_same() -> None:
    scorer = FracHub()
    shapes = target_workload([(0, 0, 500, 1, frozenset())])
    assert scorer.with_workload(DEFAULT_SHAPES) is scorer
    fed = scorer.with_workload(shapes)
    assert fed is not scorer and fed.workload == shapes
    assert fed.with_workload(shapes) is fed


def test_the_memo_stays_bounded(monkeypatch) -> None:
    from scheduler.engine import fragmentation

    monkeypatch.setattr(fragmentation, "MEMO_LIMIT", 5)
    table = fragmentation.FragmentationTable(DEFAULT_SHAPES, ["m"], [(0, 0, 500, 1)])
    for free in range(0, 1000, 50):
        table.row([free, MILLI], 0, 0, 0)
        assert len(table._memo) <= 5
