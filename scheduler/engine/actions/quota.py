"""Rule 3, the check every action makes: limits at every level of a queue's ancestry, and
non-preemptible work inside its deserved quota at every level, for GPUs and for every
counted host resource (rule 3b)."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.common.limits import MILLI
from scheduler.engine import reasons
from scheduler.engine.model import Workload
from scheduler.engine.session import Session

EPS = 1e-6
"""Slack for comparing allocations (milli-GPUs) with quotas computed in floating point."""

Freed = Mapping[str, Mapping[str, int]]
"""Host resource key -> queue -> amount a victim search has given back so far."""


def quota_refusal(
    session: Session,
    workload: Workload,
    size: int,
    freed: Mapping[str, int] | None = None,
    freed_np: Mapping[str, int] | None = None,
    freed_host: Freed | None = None,
    freed_host_np: Freed | None = None,
    *,
    host: bool = True,
) -> str | None:
    """Rule 3: limits at every level; non-preemptible work inside deserved at every level.
    GPUs first, then CPUs and memory when they are counted (``host`` False: a move, which
    changes no host use, checks GPUs alone)."""
    freed = freed or {}
    freed_np = freed_np or {}
    # locals: this runs for every try and every victim step (100,000 times a 4,000-node cycle)
    queues, allocated, deserved = session.queues, session.use.allocated, session.deserved
    non_preemptible = None if workload.preemptible else session.use.non_preemptible
    for name in session.ancestry[workload.queue]:
        limit = queues[name].limit_gpus
        used = allocated[name] - freed.get(name, 0)
        if limit is not None and used + size > limit * MILLI + EPS:
            return reasons.at_limit(session, name, used, size)
        if non_preemptible is not None:
            used_np = non_preemptible[name] - freed_np.get(name, 0)
            if used_np + size > deserved[name] + EPS:
                return reasons.beyond_deserved(session, name, workload, used_np, size)
    if session.host and host:
        return _host_refusal(session, workload, freed_host or {}, freed_host_np or {})
    return None


def _host_refusal(
    session: Session, workload: Workload, freed: Freed, freed_np: Freed
) -> str | None:
    for resource in session.host:
        amount = resource.amount(workload.request)
        if not amount:
            continue
        gone = freed.get(resource.key, {})
        gone_np = freed_np.get(resource.key, {})
        for name in session.ancestry[workload.queue]:
            used = resource.allocated[name] - gone.get(name, 0)
            limit = resource.limits[name]
            if limit is not None and used + amount > limit + EPS:
                return reasons.at_host_limit(session, resource.key, name, used, amount, limit)
            if not workload.preemptible:
                used_np = resource.non_preemptible[name] - gone_np.get(name, 0)
                deserved = resource.deserved[name]
                if used_np + amount > deserved + EPS:
                    return reasons.beyond_host_deserved(
                        session, resource.key, name, workload, used_np, amount, deserved
                    )
    return None


def host_limited(session: Session, workload: Workload) -> bool:
    """Whether a CPU or memory limit refuses this workload now (preempting the queue's own
    work, or reclaim with a department's limit, may help)."""
    for resource in session.host:
        amount = resource.amount(workload.request)
        if amount and any(
            (limit := resource.limits[name]) is not None
            and resource.allocated[name] + amount > limit + EPS
            for name in session.ancestry[workload.queue]
        ):
            return True
    return False
