"""Aging: a pending workload's rank inside its queue rises with its wait (issue 28, rule 7).

Without aging, a queue serves its pending work by priority, then by submission time: a
low-priority job waits as long as higher-priority work keeps arriving, however long that is.
With aging, each pending workload is ranked by its *effective* priority

    effective = priority + min(most, per_hour × hours waited)

(waited: since it was submitted; a requeued victim keeps its submission time, and so its
wait), then by submission time as before. A job of priority 50 with ``per_hour: 10`` ranks
with new priority-100 work after five hours of waiting, and ahead of it after that.

Aging changes only the order in which a queue's pending work is served (and the queue
positions shown), never who may evict whom: in-queue preemption still compares the
priorities as submitted, so waiting long never lets a job evict work it could not evict
before. Between workloads of the same priority it changes nothing (they age alike).

The wait is data: ``submitted_at`` from the snapshot and the cycle's ``now``; the engine
keeps no clock. Off (``Policy.aging`` None) the order is the plain one, so every scenario's
output stays byte-identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scheduler.engine.model import Workload

HOUR = 3600.0


@dataclass(frozen=True)
class Aging:
    """How fast a pending workload's rank rises: ``per_hour`` priority points for each hour
    it has waited, at most ``most`` points in all (None: no cap)."""

    per_hour: float
    most: float | None = None

    def gain(self, waited: float) -> float:
        """Priority points gained after ``waited`` seconds pending."""
        gain = max(0.0, waited) * self.per_hour / HOUR
        return gain if self.most is None else min(gain, self.most)

    def key(self, now: float) -> Callable[[Workload], tuple]:
        """The order inside a queue at ``now``: highest effective priority first, then the
        earliest submission (as ``default_workload_key``)."""
        rate = self.per_hour / HOUR
        most = self.most

        def aged(workload: Workload) -> tuple:
            gain = max(0.0, now - workload.submitted_at) * rate
            if most is not None and gain > most:
                gain = most
            return (-(workload.priority + gain), workload.submitted_at, workload.seq)

        return aged
