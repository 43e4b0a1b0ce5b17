"""Usage samples: every ``usage_sample_interval`` the service writes each project's GPUs in
use (and the CPU and memory its running work asked for), quota, fair share and queue
lengths (as the last cycle left them) into the store, so the panel can chart the last day
and week without Prometheus.

The row with the empty project name is the whole cluster: the sums over the top-level
projects (a parent project's numbers already include its children's), with the cluster's
GPU count. Samples are deleted after ``usage_sample_retention_days`` by the retention pass.
"""

from __future__ import annotations

import asyncio
import logging

from scheduler.service.persistence.orm import UsageSampleRecord
from scheduler.service.scheduling.loop import SchedulingLoop

CLUSTER = ""
"""The project name of the whole cluster's row (no project can be called that)."""


def take_sample(loop: SchedulingLoop, now: float) -> list[UsageSampleRecord]:
    """Write one sample of every project, and the cluster's, in one transaction of its own
    (it never awaits, so no request or cycle shares it)."""
    statuses = dict(loop.queue_status)
    if not statuses:
        return []
    cluster_gpus = float(len(loop.inventory.gpus))
    roots = {queue.name for queue in loop.queues if queue.parent is None}
    held = subtree_sums(loop.roster.held_resources(), {q.name: q.parent for q in loop.queues})
    rows = [
        UsageSampleRecord(
            time=now,
            project=name,
            allocated_gpus=status.allocated_gpus,
            deserved_gpus=status.deserved_gpus,
            fair_share_gpus=status.fair_share_gpus,
            running=status.running,
            pending=status.pending,
            cluster_gpus=cluster_gpus,
            allocated_cpu=round(held.get(name, (0.0, 0.0))[0], 6),
            allocated_memory_gib=round(held.get(name, (0.0, 0.0))[1], 6),
        )
        for name, status in sorted(statuses.items())
    ]
    top = [row for row in rows if row.project in roots]
    rows.append(
        UsageSampleRecord(
            time=now,
            project=CLUSTER,
            allocated_gpus=round(sum(row.allocated_gpus for row in top), 6),
            deserved_gpus=round(sum(row.deserved_gpus for row in top), 6),
            fair_share_gpus=round(sum(row.fair_share_gpus for row in top), 6),
            running=sum(row.running for row in top),
            pending=sum(row.pending for row in top),
            cluster_gpus=cluster_gpus,
            allocated_cpu=round(sum(row.allocated_cpu for row in top), 6),
            allocated_memory_gib=round(sum(row.allocated_memory_gib for row in top), 6),
        )
    )
    loop.store.add_samples(rows)
    loop.store.commit()  # rolls back by itself if the database refuses
    return rows


def subtree_sums(
    held: dict[str, tuple[float, float]], parents: dict[str, str | None]
) -> dict[str, tuple[float, float]]:
    """Each project's (cores, GiB) with its descendants' added, as a department's GPUs in
    use include its projects'."""
    total: dict[str, tuple[float, float]] = {}
    for project, (cores, gib) in held.items():
        seen: set[str] = set()
        name: str | None = project
        while name is not None and name not in seen:
            seen.add(name)
            before = total.get(name, (0.0, 0.0))
            total[name] = (before[0] + cores, before[1] + gib)
            name = parents.get(name)
    return total


async def sample_every(loop: SchedulingLoop, seconds: float, log: logging.Logger) -> None:
    """The sampling timer; a failed sample is logged and the next one tried."""
    while True:
        await asyncio.sleep(seconds)
        try:
            take_sample(loop, loop.clock())
        except Exception:
            log.exception("usage sample failed; trying again in %g seconds", seconds)
