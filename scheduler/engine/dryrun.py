"""What the scheduler would do with a request if it arrived now, without storing anything.

The spawn form asks before a researcher clicks Start: "will this notebook start now, after
evicting borrowed work, wait, or never?". The answer is the engine's own decision, made the
way the service decides an arrival (``decide(standing.fork([arrival], now))`` on the session
of its last settled cycle, ``SchedulingLoop.standing``), so the hint and what then happens
cannot disagree by construction, only by the cluster changing in between.

Pure: a session and a workload in, a ``Verdict`` out.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduler.common.placement import describe_placement
from scheduler.common.quantities import plural
from scheduler.engine import Evict, EvictReason, Move, Session, Start, Workload, decide

NOW = "now"
RECLAIM = "reclaim"
PREEMPT = "preempt"
WAIT = "wait"
NEVER = "never"
OUTCOMES = (NOW, RECLAIM, PREEMPT, WAIT, NEVER)


@dataclass(frozen=True)
class Verdict:
    outcome: str
    """One of OUTCOMES: starts now; starts once borrowed work of other projects is reclaimed
    (``reclaims_from``); once lower-priority work of its own project is preempted; waits;
    can never start."""
    message: str
    """The same in words, with the engine's reason where it waits."""
    reclaims_from: tuple[str, ...] = ()
    queue_position: int | None = None

    def as_json(self) -> dict:
        return {
            "outcome": self.outcome,
            "message": self.message,
            "reclaims_from": list(self.reclaims_from),
            "queue_position": self.queue_position,
        }


def dry_run(standing: Session, arrival: Workload, now: float, grace_seconds: float) -> Verdict:
    """The engine's decision for ``arrival`` on a fork of ``standing`` (left unchanged)."""
    session = standing.fork([arrival], now)
    result = decide(session)
    mine = [
        d
        for d in result.decisions
        if (isinstance(d, Start) and d.workload == arrival.name)
        or (isinstance(d, (Evict, Move)) and d.claimant == arrival.name)
    ]
    evicted = [d for d in mine if isinstance(d, Evict)]
    started = next((d for d in mine if isinstance(d, Start)), None)
    reserved = arrival.name in session.reserved
    if started is None and not reserved:
        pending = result.pending.get(arrival.name)
        reason = pending.reason if pending else "the scheduler would not start it now"
        return Verdict(
            WAIT, f"would wait: {reason}", queue_position=pending.position if pending else None
        )
    if not evicted:
        where = describe_placement(started.placement) if started else ""
        moved = sum(isinstance(d, Move) for d in mine)
        text = "starts now" + (f" on {where}" if where else "")
        if moved:
            text += f" (moving {plural(moved, 'running workload')} to make room)"
        return Verdict(NOW, text)
    owners = {w.name: w for w in standing.running.values()}
    queues = sorted({owners[d.workload].queue for d in evicted if d.workload in owners})
    grace = f"; they get {grace_seconds:g}s to save their work" if grace_seconds else ""
    if all(d.reason is EvictReason.PREEMPT for d in evicted):
        return Verdict(
            PREEMPT,
            f"starts after preempting {plural(len(evicted), 'lower-priority workload')} of "
            f"{arrival.queue}{grace}",
            reclaims_from=tuple(queues),
        )
    return Verdict(
        RECLAIM,
        f"starts after reclaiming GPUs that {_names(queues)} borrowed "
        f"({plural(len(evicted), 'workload')}){grace}",
        reclaims_from=tuple(queues),
    )


def never(reason: str) -> Verdict:
    """``reason`` is ``feasibility.never_starts``'s, which says "can never start"."""
    return Verdict(NEVER, reason)


def _names(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names) or "other projects"
    return ", ".join(names[:-1]) + " and " + names[-1]
