"""Usage-decayed fair share (docs/scheduling.md, "Usage-decayed fair share"): KAI's
time-aware fairness.

A queue's recent GPU use, decayed with a half-life and normalised to the cluster's capacity
over a window, shifts its part of the over-quota GPUs: the fair-share water-fill divides
each round by ``share_weights`` instead of the plain over-quota weights. Deserved quotas are
untouched. The engine keeps no clock: a ``Usage`` is data a driver computes (the service from
its usage samples, scenarios and the fleet in simulated time with ``UsageHistory``) and hands
to the cycle.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

DEFAULT_K = 1.0
"""KAI's default ``kValue``."""


@dataclass(frozen=True)
class Usage:
    """Each queue's decayed GPU use as a fraction of the cluster's decayed capacity (0..1; a
    department's is its subtree's), and ``k``, how hard it moves the over-quota weights."""

    fractions: Mapping[str, float] = field(default_factory=dict)
    k: float = DEFAULT_K

    def of(self, queue: str) -> float:
        return self.fractions.get(queue, 0.0)


def share_weights(weights: Sequence[float], usages: Sequence[float], k: float) -> list[float]:
    """KAI's share weight of each queue still wanting more in one round of the water-fill:
    ``max(0, n + k·(n - u))`` with ``n`` its weight's part of the round's weights. When all
    come out 0 (everyone used more than their part, with a large ``k``), the plain weights:
    the GPUs are still handed out."""
    total = sum(weights)
    if total <= 0:
        return list(weights)
    adjusted = [
        max(0.0, w / total + k * (w / total - u)) for w, u in zip(weights, usages, strict=True)
    ]
    return adjusted if sum(adjusted) > 0 else list(weights)


def decay(age: float, half_life: float) -> float:
    """The weight of use ``age`` seconds ago: ``0.5^(age / half_life)``."""
    return 0.5 ** (max(0.0, age) / half_life)


class UsageHistory:
    """Allocated GPU-seconds per queue and the cluster's GPU-seconds, kept in buckets of
    ``bucket`` seconds over a sliding ``window``; each bucket is weighted by the decay at its
    middle (with a bucket of a tenth of the half-life, within 3.5% of the exact integral).

    The drivers that simulate time (scenario runner, fleet) accrue the step function of the
    allocation between their instants; the engine never calls it.
    """

    def __init__(self, half_life: float, window: float, bucket: float | None = None) -> None:
        if half_life <= 0 or window <= 0:
            raise ValueError("half_life and window must be positive")
        self.half_life = half_life
        self.window = window
        self.bucket = bucket if bucket is not None else min(half_life / 10, window / 20)
        self.buckets: dict[int, tuple[dict[str, float], float]] = {}
        """Bucket index -> (GPU-seconds per queue, the cluster's GPU-seconds)."""
        self.totals: dict[str, float] = {}
        """Undecayed GPU-seconds per queue since the history began (for reports)."""

    def accrue(
        self, start: float, end: float, allocated: Mapping[str, float], capacity: float
    ) -> None:
        """Queues held ``allocated`` GPUs (the cluster had ``capacity``) from start to end."""
        for name, gpus in allocated.items():
            if gpus:
                self.totals[name] = self.totals.get(name, 0.0) + gpus * (end - start)
        t = start
        while t < end:
            index = math.floor(t / self.bucket)
            stop = min(end, (index + 1) * self.bucket)
            held, cap = self.buckets.get(index, ({}, 0.0))
            for name, gpus in allocated.items():
                if gpus:
                    held[name] = held.get(name, 0.0) + gpus * (stop - t)
            self.buckets[index] = (held, cap + capacity * (stop - t))
            t = stop

    def fractions(self, now: float) -> dict[str, float]:
        """Each queue's decayed use over the window as a fraction of the decayed capacity."""
        first = math.floor((now - self.window) / self.bucket)
        for index in [i for i in self.buckets if i < first]:
            del self.buckets[index]
        used: dict[str, float] = {}
        capacity = 0.0
        for index, (held, cap) in self.buckets.items():
            weight = decay(now - (index + 0.5) * self.bucket, self.half_life)
            capacity += cap * weight
            for name, seconds in held.items():
                used[name] = used.get(name, 0.0) + seconds * weight
        if capacity <= 0:
            return {}
        return {name: round(amount / capacity, 6) for name, amount in sorted(used.items())}
