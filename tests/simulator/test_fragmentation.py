"""FGD's fragmentation measure on hand-computed nodes, and its numpy fast path on random ones."""

from __future__ import annotations

import random

import numpy as np
import pytest

from scheduler.engine.fragmentation import (
    FragmentationTable,
    TaskShape,
    node_fragmentation,
    target_workload,
    task_fragmentation,
)

pytestmark = pytest.mark.simulator

SHARE600 = TaskShape(cpu_milli=1000, gpu_milli=600, num_gpu=1, probability=1.0)


@pytest.mark.parametrize(
    ("free", "cpu", "mem", "model", "task", "expected"),
    [
        pytest.param(
            [1000, 500],
            8000,
            0,
            "T4",
            TaskShape(4000, 0, 0, 1.0),
            1500,
            id="cpu-only-task-sees-all-free-gpu-as-fragment",
        ),
        pytest.param(
            [1000, 500, 300],
            8000,
            0,
            "T4",
            SHARE600,
            800,
            id="share-task-fragment-is-milli-on-too-small-gpus",
        ),
        pytest.param([600, 600], 8000, 0, "T4", SHARE600, 0, id="exact-fit-is-no-fragment"),
        pytest.param(
            [1000, 500],
            8000,
            0,
            "T4",
            TaskShape(1000, 600, 1, 1.0, models=frozenset({"V100M16"})),
            1500,
            id="wrong-model-sees-all",
        ),
        pytest.param([1000, 500], 500, 0, "T4", SHARE600, 1500, id="too-little-cpu-sees-all"),
        pytest.param(
            [1000, 500],
            8000,
            100,
            "T4",
            TaskShape(1000, 600, 1, 1.0, memory_mib=200),
            1500,
            id="too-little-memory-sees-all",
        ),
        pytest.param(
            [1000, 500],
            8000,
            0,
            "T4",
            TaskShape(1000, 1000, 2, 1.0),
            1500,
            id="multi-gpu-task-short-of-whole-gpus-sees-all",
        ),
        pytest.param(
            [1000, 1000, 200],
            8000,
            0,
            "T4",
            TaskShape(1000, 1000, 2, 1.0),
            200,
            id="multi-gpu-task-fits-and-strands-the-partial-gpu",
        ),
        pytest.param(
            [400, 0, 0, 0], 8000, 0, "T4", SHARE600, 400, id="zero-free-padding-changes-nothing"
        ),
    ],
)
def test_task_fragmentation(free, cpu, mem, model, task, expected):
    assert task_fragmentation(free, cpu, mem, model, task) == expected


def test_node_fragmentation_is_the_expectation_over_the_workload():
    workload = [
        TaskShape(0, 0, 0, 0.5),
        TaskShape(1000, 600, 1, 0.25),
        TaskShape(1000, 1000, 2, 0.25),
    ]
    # cpu-only: 1500; share 600: 500 (the 500 GPU); 2 whole GPUs: only one -> 1500.
    assert node_fragmentation([1000, 500], 4000, 0, "T4", workload) == pytest.approx(
        0.5 * 1500 + 0.25 * 500 + 0.25 * 1500
    )


@pytest.mark.parametrize(
    ("coverage", "expected"),
    [
        pytest.param(0.5, [(1000, 500, 1, 0.5)], id="most-frequent-shape-covers-half"),
        pytest.param(
            0.8, [(1000, 500, 1, 0.5), (2000, 1000, 1, 0.3)], id="crossing-shape-included"
        ),
        pytest.param(
            1.0, [(1000, 500, 1, 0.5), (2000, 1000, 1, 0.3), (4000, 0, 0, 0.2)], id="all-shapes"
        ),
    ],
)
def test_target_workload_takes_most_frequent_shapes(coverage, expected):
    reqs = (
        [(1000, 64, 500, 1, frozenset())] * 5
        + [(2000, 64, 1000, 1, frozenset())] * 3
        + [(4000, 64, 0, 0, frozenset())] * 2
    )
    shapes = target_workload(reqs, coverage=coverage)
    got = [(s.cpu_milli, s.gpu_milli, s.num_gpu, s.probability) for s in shapes]
    assert got == [pytest.approx(e) for e in expected]
    assert all(s.memory_mib == 0 for s in shapes)


def test_target_workload_with_memory_splits_shapes_by_memory():
    reqs = [(1000, 64, 500, 1, frozenset())] * 3 + [(1000, 128, 500, 1, frozenset())]
    plain = target_workload(reqs, coverage=1.0)
    with_memory = target_workload(reqs, coverage=1.0, with_memory=True)
    assert [(s.memory_mib, s.probability) for s in plain] == [(0, 1.0)]
    assert [(s.memory_mib, s.probability) for s in with_memory] == [(64, 0.75), (128, 0.25)]


MODELS = ["G2", "T4", "V100M16"]


def _random_workload(rng: random.Random) -> list[TaskShape]:
    shapes = []
    for _ in range(rng.randint(1, 8)):
        num = rng.choice([0, 1, 1, 1, 2, 4])
        milli = 0 if num == 0 else 1000 if num >= 2 else rng.choice([100, 250, 500, 600, 1000])
        models = (
            frozenset(rng.sample(MODELS, rng.randint(1, 2)))
            if rng.random() < 0.3
            else (frozenset())
        )
        shapes.append(
            TaskShape(
                rng.choice([0, 2000, 8000, 16000]),
                milli,
                num,
                rng.random(),
                models,
                rng.choice([0, 0, 4096, 65536]),
            )
        )
    return shapes


def _random_state(rng: random.Random) -> tuple[list[int], int, int, int]:
    gpus = rng.choice([1, 2, 4, 8])
    free = [rng.choice([0, 100, 250, 400, 500, 750, 1000, 1000]) for _ in range(gpus)]
    return (
        free + [0] * (8 - gpus),
        rng.randint(0, 32) * 1000,
        rng.randint(0, 8) * 16384,
        (rng.randrange(len(MODELS))),
    )


@pytest.mark.parametrize("seed", range(10), ids=lambda s: f"seed{s}")
def test_fast_fragmentation_equals_the_plain_function(seed):
    rng = random.Random(seed)
    workload = _random_workload(rng)
    keys = sorted(
        {
            (rng.choice([0, 1000, 4000]), rng.choice([0, 8192]), *g)
            for g in [(0, 0), (200, 1), (500, 1), (1000, 1), (1000, 2), (1000, 4)]
            for _ in range(2)
        }
    )
    table = FragmentationTable(workload, MODELS, keys)
    for _ in range(40):
        free, cpu, mem, model = _random_state(rng)
        plain = node_fragmentation(free, cpu, mem, MODELS[model], workload)
        assert table.fragmentation(free, cpu, mem, model) == pytest.approx(plain)
        delta, pick = table.row(np.array(free, dtype=np.int64), cpu, mem, model)
        for kc, km, milli, num in keys:
            k = table.key_index[table.normal((kc, km, milli, num))]
            if kc > cpu or km > mem:
                continue  # CPU and memory fit are checked by the caller, not the table
            after = []
            if num == 1:
                for g, f in enumerate(free):
                    if f >= milli:
                        new = list(free)
                        new[g] -= milli
                        after.append(
                            node_fragmentation(new, cpu - kc, mem - km, MODELS[model], workload)
                        )
            elif num >= 2 and sum(f == 1000 for f in free) >= num:
                new = list(free)
                for _ in range(num):
                    new[new.index(1000)] = 0
                after.append(node_fragmentation(new, cpu - kc, mem - km, MODELS[model], workload))
            elif num == 0:
                after.append(node_fragmentation(free, cpu - kc, mem - km, MODELS[model], workload))
            if not after:
                assert delta[k] == np.inf, (free, (kc, km, milli, num))
                continue
            assert delta[k] == pytest.approx(min(after) - plain, abs=1e-6), (
                free,
                (kc, km, milli, num),
            )
            if num == 1:
                # the picked GPU's free milli gives the best delta too
                new = list(free)
                new[free.index(int(pick[k]))] -= milli
                best = node_fragmentation(new, cpu - kc, mem - km, MODELS[model], workload)
                assert best == pytest.approx(min(after), abs=1e-6)
