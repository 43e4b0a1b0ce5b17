"""Rule 4 inside a queue: evict the queue's own lower-priority preemptible work."""

from __future__ import annotations

from scheduler.engine.actions.victims import (
    Candidates,
    VictimSearch,
    loss_bounds_for,
    shape_key,
)
from scheduler.engine.model import EvictReason, Workload
from scheduler.engine.session import Session


def preempt(session: Session, claimant: Workload, candidates: Candidates) -> tuple[bool, str]:
    """Evict lower-priority preemptible work of the claimant's own queue; equal never preempts."""
    suffix = ""
    for bound in loss_bounds_for(session, claimant):
        memo = (claimant.queue, claimant.priority, shape_key(session, claimant), bound)
        if memo in candidates.preempt_failed:
            suffix = candidates.preempt_failed[memo]
            continue
        search = VictimSearch(session, claimant, bound)
        for victim in candidates.walk(claimant.queue, search, below_priority=claimant.priority):
            placement = search.add(victim)
            if placement is not None:
                search.commit(placement, EvictReason.PREEMPT)
                return True, ""
        suffix = search.give_up(candidates.preempt_failed, memo)
        if not search.over_bound:
            break  # the bound passed nobody over: without it the search would be the same
    return False, suffix
