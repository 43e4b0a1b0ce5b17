"""Rule 6: move preemptible single-replica work so that scattered free capacity comes
together for a claimant that idle capacity alone cannot place."""

from __future__ import annotations

import heapq
from dataclasses import replace

from scheduler.common.placement import Placement
from scheduler.engine.actions.quota import quota_refusal
from scheduler.engine.actions.victims import Candidates, shape_key
from scheduler.engine.model import Workload, held_milli
from scheduler.engine.placement import choose, place
from scheduler.engine.session import Session


def consolidate(session: Session, claimant: Workload, candidates: Candidates) -> bool:
    """Move preemptible single-replica work so that scattered free capacity comes together.

    Tries the emptiest nodes first (a bounded number of them); on a node, moves the movable
    workloads with the least work at risk until one replica fits, then must place every moved
    workload elsewhere. Work over ``Policy.loss_bound`` is never moved, whoever the claimant.
    A request shape that could not be consolidated is not tried again in the same cycle.
    """
    ledger = session.ledger
    size = session.request_size(claimant)
    if quota_refusal(session, claimant, size) is not None or ledger.total_free < size:
        return False
    memo = shape_key(session, claimant)
    if memo in candidates.consolidate_failed:
        return False
    one = replace(claimant.request, replicas=1)
    mark = ledger.mark()
    moved: dict[str, tuple[Workload, Placement]] = {}
    replicas: list = []
    for _ in range(claimant.request.replicas):
        spot = place(ledger, one, session.policy.scorer, None, claimant.user)
        if spot is None:
            spot = _consolidate_one(session, one, moved, claimant.user)
        if spot is None:
            ledger.rollback(mark)
            candidates.consolidate_failed.add(memo)
            return False
        replicas.extend(spot)
    if quota_refusal(session, claimant, held_milli(tuple(replicas))) is not None:
        ledger.rollback(mark)
        return False
    for workload, placement in moved.values():
        if placement != workload.placement:
            session.move(workload, placement, claimant.name)
    session.start(claimant, tuple(replicas))
    return True


def _movers_on(session: Session, n: int, moved: dict) -> list[Workload]:
    """Work consolidation may move off node ``n``, least work at risk first: preemptible,
    single-replica, not protected by min_runtime, and losing at most ``Policy.loss_bound``."""
    bound = session.policy.loss_bound
    movers = [
        w
        for w in session.on_node(session.ledger.nodes[n].name)
        if w.preemptible
        and w.request.replicas == 1
        and w.name not in moved
        and w.start_seq < session.first_new_start
        and session.protected_until(w) is None
        and (bound is None or session.at_risk(w) <= bound)
    ]
    movers.sort(key=lambda w: (session.at_risk(w), session.size(w), w.seq))
    return movers


def _move_fits_quota(session: Session, workload: Workload, placement: Placement) -> bool:
    """A memory request moved to a smaller GPU grows; its queue's limits must still hold."""
    old, new = session.size(workload), held_milli(placement)
    if new <= old:
        return True
    freed = dict.fromkeys(session.ancestry[workload.queue], old)
    freed_np = {} if workload.preemptible else freed
    return quota_refusal(session, workload, new, freed, freed_np, host=False) is None


def _consolidate_one(
    session: Session, one, moved: dict[str, tuple[Workload, Placement]], account: str | None
) -> Placement | None:
    ledger = session.ledger
    emptiest = heapq.nsmallest(
        session.policy.consolidation_nodes,
        (n for n in range(len(ledger.nodes)) if ledger.nodes[n].gpus),
        key=lambda n: (-sum(ledger.free[n]), n),
    )
    for n in emptiest:
        movers = _movers_on(session, n, moved)
        if not movers:
            continue
        mark = ledger.mark()
        removed: list[Workload] = []
        spot = None
        for workload in movers:
            ledger.give_back(
                workload.placement,
                workload.request.cpu_milli,
                workload.request.memory_mib,
                workload.user,
            )
            removed.append(workload)
            spot = choose(ledger, one, session.policy.scorer, {n}, account)
            if spot is not None:
                break
        if spot is None:
            ledger.rollback(mark)
            continue
        ledger.take((spot,), one.cpu_milli, one.memory_mib, account)
        new_places = []
        for workload in sorted(removed, key=lambda w: (-session.size(w), w.seq)):
            placement = place(ledger, workload.request, session.policy.scorer, None, workload.user)
            if placement is None or not _move_fits_quota(session, workload, placement):
                break
            new_places.append((workload, placement))
        else:
            for workload, placement in new_places:
                moved[workload.name] = (workload, placement)
            return (spot,)
        ledger.rollback(mark)
    return None
