"""Rule 3, the check every action makes: limits at every level of a queue's ancestry, and
non-preemptible work inside its deserved quota at every level."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.common.limits import MILLI
from scheduler.engine import reasons
from scheduler.engine.model import Workload
from scheduler.engine.session import Session

EPS = 1e-6
"""Slack for comparing allocations (milli-GPUs) with quotas computed in floating point."""


def quota_refusal(
    session: Session,
    workload: Workload,
    size: int,
    freed: Mapping[str, int] | None = None,
    freed_np: Mapping[str, int] | None = None,
) -> str | None:
    """Rule 3: limits at every level; non-preemptible work inside deserved at every level."""
    freed = freed or {}
    freed_np = freed_np or {}
    for name in session.ancestry[workload.queue]:
        queue = session.queues[name]
        used = session.use.allocated[name] - freed.get(name, 0)
        if queue.limit_gpus is not None and used + size > queue.limit_gpus * MILLI + EPS:
            return reasons.at_limit(session, name, used, size)
        if not workload.preemptible:
            used_np = session.use.non_preemptible[name] - freed_np.get(name, 0)
            if used_np + size > session.deserved[name] + EPS:
                return reasons.beyond_deserved(session, name, workload, used_np, size)
    return None
