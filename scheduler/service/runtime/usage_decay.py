"""Usage-decayed fair share in the service: each project's decayed GPU use, from the service's
own usage samples (``runtime/sampler.py``), handed to every cycle (docs/scheduling.md,
"Usage-decayed fair share"). No Prometheus needed: the same store on a workstation and on
Kubernetes.

Cheap by construction: the database sums the window's samples into buckets of a twentieth of
the half-life (``Store.sample_buckets``, the history charts' query, run in a thread), and that
happens at most every ``refresh_seconds``; every cycle in between reuses the last ``Usage``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from scheduler.engine.usage import Usage, decay
from scheduler.service.persistence.store import SampleBucket, Store
from scheduler.service.runtime.sampler import CLUSTER


@dataclass(frozen=True)
class UsageDecaySettings:
    """The ``FracHubService.fair_share_usage*`` traits, in seconds."""

    half_life: float
    window: float
    k: float
    refresh: float

    @classmethod
    def of_hours(
        cls, half_life_hours: float, window_days: float, k: float, refresh: float
    ) -> UsageDecaySettings:
        return cls(half_life_hours * 3600, window_days * 86400, k, refresh)


def decayed_usage(
    buckets: Sequence[SampleBucket], now: float, half_life: float
) -> dict[str, float]:
    """Each project's decayed GPUs in use over the cluster's decayed GPUs: KAI's
    ``Σ a(t)·0.5^((now-t)/t½) / Σ C(t)·0.5^((now-t)/t½)`` over the samples, each bucket
    weighted by its number of samples and the decay at its last sample. A parent project's
    rows already hold its children's use."""
    used: dict[str, float] = {}
    capacity = 0.0
    for bucket in buckets:
        weight = bucket.samples * decay(now - bucket.time, half_life)
        if bucket.project == CLUSTER:
            capacity += bucket.cluster_gpus * weight
        else:
            used[bucket.project] = used.get(bucket.project, 0.0) + bucket.allocated_gpus * weight
    if capacity <= 0:
        return {}
    return {name: round(amount / capacity, 6) for name, amount in sorted(used.items()) if amount}


class UsageTracker:
    """The ``Usage`` each cycle sees, recomputed from the store at most every ``refresh``."""

    def __init__(
        self, store: Store, settings: UsageDecaySettings, log: logging.Logger | None = None
    ) -> None:
        self.store = store
        self.settings = settings
        self.log = log or logging.getLogger("frachub")
        self.usage = Usage({}, settings.k)
        """The latest computed usage (empty until the first refresh)."""
        self.computed_at: float | None = None

    def due(self, now: float) -> bool:
        return self.computed_at is None or now - self.computed_at >= self.settings.refresh

    async def current(self, now: float) -> Usage:
        """The usage for a cycle at ``now``: the cached one, or freshly read when it is due.
        A failed read keeps the last one (and says so in the log): a cycle never waits on it
        twice in one refresh period."""
        if self.due(now):
            self.computed_at = now
            try:
                self.usage = await asyncio.to_thread(self.compute, now)
            except Exception:
                self.log.exception("could not read usage samples; keeping the last usage")
        return self.usage

    def compute(self, now: float) -> Usage:
        """Read the window's samples and decay them (in a thread: a week of samples)."""
        settings = self.settings
        step = max(settings.half_life / 20, 1.0)
        buckets = self.store.sample_buckets(now - settings.window, now + 1e-6, step)
        return Usage(decayed_usage(buckets, now, settings.half_life), settings.k)


def usage_source(
    store: Store,
    enabled: bool,
    sample_interval: float,
    settings: UsageDecaySettings,
    log: logging.Logger,
) -> Callable[[float], Awaitable[Usage]] | None:
    """What the scheduling loop asks for each cycle's usage (``SchedulingLoop.usage_source``),
    or None when usage-decayed fair share is off, or on without usage samples to decay
    (``usage_sample_interval`` 0, said in the log)."""
    if not enabled:
        return None
    if sample_interval <= 0:
        log.warning(
            "fair_share_usage is on but usage_sample_interval is 0: no usage samples to "
            "decay, so fair share stays instantaneous"
        )
        return None
    log.info(
        "usage-decayed fair share: half-life %gh over %g days, k %g",
        settings.half_life / 3600,
        settings.window / 86400,
        settings.k,
    )
    return UsageTracker(store, settings, log).current
