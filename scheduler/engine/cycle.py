"""One scheduling cycle: snapshot and time in, decisions and pending reasons out.

    for each pending workload, in service order (rule 7):
        start it on idle capacity,
        else consolidate (rule 6), else reclaim (rule 4, across queues),
        else preempt (rule 4, inside its queue)
    -> pending reasons, queue positions, queue status, next wake-up

The cycle reads no clock and does no I/O; drivers (the service, the scenario
runner, the simulators) apply the decisions and call it again.
"""

from __future__ import annotations

from scheduler.common.limits import MILLI
from scheduler.engine import reasons
from scheduler.engine.actions.allocate import Failures, Outcome, try_start
from scheduler.engine.actions.consolidate import consolidate
from scheduler.engine.actions.order import ServiceOrder
from scheduler.engine.actions.preempt import preempt
from scheduler.engine.actions.reclaim import reclaim
from scheduler.engine.actions.victims import Candidates
from scheduler.engine.borrowing import borrowed
from scheduler.engine.fairshare import subtree_totals
from scheduler.engine.model import (
    CycleResult,
    Pending,
    QueueStatus,
    ResourceStatus,
    Snapshot,
    Workload,
)
from scheduler.engine.session import Policy, Session


def run_cycle(
    snapshot: Snapshot, now: float, policy: Policy, *, report_borrowed: bool = False
) -> CycleResult:
    """Decide what starts, what is evicted or moved, and why everything else waits."""
    return decide(Session(snapshot, now, policy), report_borrowed=report_borrowed)


def decide(session: Session, *, report_borrowed: bool = False) -> CycleResult:
    """Run one cycle on a session (from a snapshot, or a ``Session.fork`` of a settled one).

    Each pending workload, in service order, first tries idle capacity and, failing that,
    makes room, before the next one is served: a later, smaller workload must not take the
    idle GPUs an earlier claim was about to complete with evictions. The session is left in
    the state its decisions describe, so it can be forked for the next arrivals.

    ``report_borrowed`` fills ``CycleResult.borrowed``: a walk over the running work of
    every project beyond its quota, which a driver that shows it (the service) asks for and
    the others (simulators, dry runs, feasibility checks) do not pay for.
    """
    order = ServiceOrder(session, list(session.pending.values()))
    failures = Failures()
    failures.watch(session.ledger)
    candidates: Candidates | None = None
    outcomes: dict[str, Outcome] = {}
    yielded: list[Workload] = []
    for workload in order:
        if workload.name in session.yielding:
            yielded.append(workload)  # after its claimant has had its turn: see below
            continue
        claim = session.open_claim(workload.name)
        if claim:
            # work was evicted for this one: it takes that capacity or waits for it, and never
            # makes room a second time
            outcome = try_start(session, workload, claimed=True)
            if outcome is not None or workload.name not in session.reserved:
                session.close_claim(claim)
            if outcome is not None:
                outcomes[workload.name] = Outcome(reasons.reserved(), capacity=False)
            continue
        outcome = try_start(session, workload, failures)
        if outcome is None:
            continue
        if outcome.capacity or outcome.limit_blocked:
            candidates = candidates or Candidates(session)
            before = len(session.decisions)
            evicted = len(session.requeued)
            started, suffix = _make_room(session, workload, outcome, candidates)
            if started:
                if len(session.decisions) > before + 1:
                    failures.revisit(session.ledger)  # capacity came back: misses may fit now
                    order.touch({w.queue for w in session.requeued[evicted:]})
                continue
            outcome.reason += suffix
        outcomes[workload.name] = outcome
    # Work evicted for a claimant that still waits goes last, and only onto idle capacity:
    # served in its usual order it could take back the GPUs its eviction freed (its queue is
    # often the more starved one) and be evicted again, every grace period.
    for workload in yielded:
        outcome = try_start(session, workload, failures)
        if outcome is not None:
            outcomes[workload.name] = outcome
    return _result(session, outcomes, report_borrowed)


def _make_room(
    session: Session, workload: Workload, outcome: Outcome, candidates: Candidates
) -> tuple[bool, str]:
    """Consolidate, else reclaim, else preempt; returns whether it started and, if not, what
    to add to its pending reason."""
    suffix = ""
    consolidating = outcome.capacity and session.policy.consolidate
    if consolidating and consolidate(session, workload, candidates):
        return True, ""
    if outcome.capacity or outcome.limit_blocked:
        # limits are checked with the victims gone, so a project of a department at its
        # limit can still reclaim from a sibling above its fair share
        started, suffix = reclaim(session, workload, candidates)
        if started:
            return True, ""
    started, preempt_suffix = preempt(session, workload, candidates)
    return started, suffix or preempt_suffix


def _result(session: Session, outcomes: dict[str, Outcome], report_borrowed: bool) -> CycleResult:
    waiting = [
        w for w in session.pending.values() if w.name in outcomes or w.name in session.reserved
    ]
    by_queue: dict[str, list[Workload]] = {}
    for workload in sorted(waiting, key=session.order_key()):
        by_queue.setdefault(workload.queue, []).append(workload)
    pending: dict[str, Pending] = {}
    for queue_pending in by_queue.values():
        for position, workload in enumerate(queue_pending, start=1):
            reason = session.reserved.get(workload.name) or outcomes[workload.name].reason
            pending[workload.name] = Pending(reason, position)

    running_counts = subtree_totals(tuple(session.queues.values()), session.running_count)
    pending_counts = subtree_totals(
        tuple(session.queues.values()), _count(w.queue for w in waiting)
    )
    queues = {
        name: QueueStatus(
            allocated_gpus=session.use.allocated[name] / MILLI,
            fair_share_gpus=round(session.fair.get(name, 0.0) / MILLI, 6),
            deserved_gpus=session.deserved[name] / MILLI,
            running=int(running_counts[name]),
            pending=int(pending_counts[name]),
            **_usage_status(session, name),
            resources={
                r.key: ResourceStatus(
                    allocated=r.allocated[name],
                    fair_share=round(r.fair.get(name, 0.0), 3),
                    deserved=r.status_deserved(name),
                    limit=None if r.limits[name] is None else int(r.limits[name]),
                )
                for r in session.host
            },
        )
        for name in session.queues
    }
    return CycleResult(
        decisions=tuple(session.decisions),
        pending=pending,
        queues=queues,
        next_wakeup=session.next_wakeup(),
        borrowed=borrowed(session, queues) if report_borrowed else {},
    )


def _count(names) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts


def _usage_status(session: Session, name: str) -> dict[str, float]:
    """A queue's decayed use and the fair share without it, when usage-decayed fair share is on."""
    if session.usage is None:
        return {}
    plain = session.fair_without_usage.get(name, 0.0)
    return {
        "usage": session.usage.of(name),
        "fair_share_without_usage_gpus": round(plain / MILLI, 6),
    }
