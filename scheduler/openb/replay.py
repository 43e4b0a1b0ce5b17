"""Replay an openb pod list against a node list, the FGD paper's way, and measure.

The method (docs/benchmarks.md section 1): time is ignored; pods sorted by name are
shuffled with the seed, then copies drawn at random (with replacement) from the
sorted list are appended while the requested GPU total is below 130% of the
cluster's GPU capacity (the copy that crosses 130% is the last one). Each pod
is placed at once or fails for good. After every pod the replay records the
allocation (GPU-milli in use / capacity) and the arrival (GPU-milli requested
so far, failed pods included / capacity).

A bucket's value is the allocation right after the *first* pod whose arrival
reaches the bucket (arrived >= bucket %). Decision time is the CPU time of
feasibility, scoring, commit and cache refresh for each pod.

All randomness comes from one ``random.Random(seed)``, drawn in a fixed order:
the shuffle, the inflation copies, the node ranks (a random permutation), then
whatever the policy draws. So every policy sees the same pods in the same
order and the same node ranks.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from scheduler.openb.cluster import ClusterState, Request, request_key
from scheduler.openb.policies import POLICIES
from scheduler.openb.trace import Node, Pod

BUCKETS = (50, 70, 80, 90, 95, 100, 105, 110, 120, 130)
"""Arrived-% points the paper reports allocation at."""

INFLATE_TO = 1.3
"""Inflate the pod list until its requested GPU total reaches 130% of capacity."""


@dataclass(frozen=True)
class RunResult:
    """One policy, one seed: allocation per bucket and the full curves."""

    policy: str
    seed: int
    allocation_pct: dict[int, float]
    arrived_pct: np.ndarray
    curve_pct: np.ndarray
    decision_ns: np.ndarray
    placed: int
    failed: int


def arrival_order(pods: Sequence[Pod], capacity_milli: int, rng: random.Random) -> list[Pod]:
    """Pods sorted by name, shuffled, then inflated with random copies to 130% of capacity."""
    base = sorted(pods, key=lambda p: p.name)
    order = list(base)
    rng.shuffle(order)
    total = sum(p.gpu_total_milli for p in order)
    if any(p.gpu_total_milli for p in base):
        while total < INFLATE_TO * capacity_milli:
            pod = base[rng.randrange(len(base))]
            order.append(pod)
            total += pod.gpu_total_milli
    return order


def bucket_values(arrived_pct: np.ndarray, curve_pct: np.ndarray) -> dict[int, float]:
    """Allocation at the first pod whose arrival reaches each bucket (NaN if never reached)."""
    out = {}
    for bucket in BUCKETS:
        hit = np.flatnonzero(arrived_pct >= bucket)
        out[bucket] = float(curve_pct[hit[0]]) if hit.size else float("nan")
    return out


def replay(
    nodes: Sequence[Node],
    pods: Sequence[Pod],
    policy: str,
    seed: int,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Run one policy over one seeded arrival order and measure it."""
    rng = random.Random(seed)
    state = ClusterState(nodes)
    order = arrival_order(pods, state.capacity_milli, rng)
    ranks = list(range(len(state)))
    rng.shuffle(ranks)
    rank = np.array(ranks, dtype=np.int64)

    requests: dict[tuple, Request] = {}
    for pod in pods:
        key = request_key(pod)
        if key not in requests:
            requests[key] = Request(len(requests), *key)
    chosen = POLICIES[policy](state, rank, rng, list(requests.values()), pods)

    count = len(order)
    arrived = np.zeros(count, dtype=np.int64)
    used = np.zeros(count, dtype=np.int64)
    decision_ns = np.zeros(count, dtype=np.int64)
    requested = placed = 0
    # CPU time of this thread: on a shared machine, time spent descheduled is
    # not the policy's cost. On an idle machine it equals wall time.
    clock = time.thread_time_ns
    for i, pod in enumerate(order):
        req = requests[request_key(pod)]
        start = clock()
        node, gpu = chosen.choose(req, state.feasible(req))
        if node >= 0:
            state.place(node, req, gpu)
            chosen.placed(node)
            placed += 1
        decision_ns[i] = clock() - start
        requested += req.gpu_total_milli
        arrived[i] = requested
        used[i] = state.used_milli
        if progress is not None and (i % 256 == 0 or i == count - 1):
            progress(i + 1, count)
    arrived_pct = arrived * 100.0 / state.capacity_milli
    curve_pct = used * 100.0 / state.capacity_milli
    return RunResult(
        policy=policy,
        seed=seed,
        allocation_pct=bucket_values(arrived_pct, curve_pct),
        arrived_pct=arrived_pct,
        curve_pct=curve_pct,
        decision_ns=decision_ns,
        placed=placed,
        failed=count - placed,
    )


def summarize(results: Sequence[RunResult]) -> dict[str, object]:
    """Seed-averaged figures for one policy, in the CLI's ``--json`` shape.

    Means and sample standard deviations (ddof=1; 0 for a single seed) over
    seeds; decision times are percentiles over every pod of every seed, in µs.
    A bucket a run never reached is ``None``.
    """
    alloc = np.array([[r.allocation_pct[b] for b in BUCKETS] for r in results])
    unalloc = 100.0 - alloc
    std = unalloc.std(axis=0, ddof=1) if len(results) > 1 else np.zeros(len(BUCKETS))
    times = np.concatenate([r.decision_ns for r in results]) / 1000.0

    def per_bucket(values: np.ndarray) -> dict[str, float | None]:
        return {
            str(b): (None if np.isnan(v) else round(float(v), 4))
            for b, v in zip(BUCKETS, values, strict=True)
        }

    return {
        "policy": results[0].policy,
        "seeds": [r.seed for r in results],
        "allocation_pct": per_bucket(alloc.mean(axis=0)),
        "unallocated_pct": per_bucket(unalloc.mean(axis=0)),
        "unallocated_pct_std": per_bucket(std),
        "decision_us": {
            "p50": round(float(np.percentile(times, 50)), 2),
            "p99": round(float(np.percentile(times, 99)), 2),
        },
    }
