"""Running work beyond its project's quota, and who may take the GPUs back."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from scheduler.display import gpus
from scheduler.engine import Queue, QueueStatus
from scheduler.engine.lifecycle import WorkloadState
from scheduler.service.effects import held_gpus
from scheduler.service.orm import WorkloadRecord


def borrowed(
    queues: Iterable[Queue],
    queue_status: Mapping[str, QueueStatus],
    holding: Iterable[WorkloadRecord],
) -> dict[int, str]:
    """Running preemptible work beyond its project's quota, in the order it started (the
    latest started is the first reclaimed), each with who may take the GPUs back."""
    queues = tuple(queues)
    parents = {queue.parent for queue in queues}
    projects = [queue.name for queue in queues if queue.name not in parents]
    over = {
        name
        for name in projects
        if (status := queue_status.get(name)) is not None
        and status.allocated_gpus > status.deserved_gpus + 1e-9
    }
    if not over:
        return {}
    runs: dict[str, list[WorkloadRecord]] = {}
    for record in holding:
        if record.project in over and record.state == WorkloadState.RUNNING and record.preemptible:
            runs.setdefault(record.project, []).append(record)
    result: dict[int, str] = {}
    for project in sorted(over):
        status = queue_status[project]
        running = sorted(runs.get(project, ()), key=lambda record: record.start_seq)
        held = status.allocated_gpus - sum(held_gpus(r.placement) for r in running)
        lenders = [
            name
            for name in projects
            if name != project
            and (other := queue_status.get(name)) is not None
            and other.deserved_gpus > other.allocated_gpus + 1e-9
        ]
        if lenders:
            who = " or ".join(lenders)
            needs = "needs its" if len(lenders) == 1 else "need their"
            when = f"may be preempted when {who} {needs} GPUs"
        else:
            when = "may be preempted when another project needs its quota"
        words = (
            f"{project} is using {gpus(status.allocated_gpus)}, beyond its "
            f"{gpus(status.deserved_gpus)} quota; {when}"
        )
        for record in running:
            held += held_gpus(record.placement)
            if held > status.deserved_gpus + 1e-9:
                result[record.id] = words
    return result
