"""The interactive reserve: idle GPU capacity batch work may not borrow.

A notebook inside its project's quota may evict borrowed work to start, but then it waits
out the victims' grace period. The admin's reserve (``Policy.interactive_reserve``, in
milli-GPUs; 0: off) keeps that much capacity idle for it instead: a *lending* start,
preemptible work that takes its project beyond its deserved quota, may start on idle
capacity only if it leaves the reserve idle, while some project still has deserved quota
its non-preemptible work does not use (the reserve is the smaller of the two: no more is
kept than in-quota notebooks could take). docs/scheduling.md, "The interactive reserve",
states the rule.

"Idle" is counted where a notebook can use it: on the fewest GPUs that could hold the
reserve (1.5 GPUs: the two most free GPUs must hold 1.5 together), so slivers of 0.25 GPU
spread over many GPUs do not count as a whole one.

Work inside its quota, non-preemptible work and a claimant taking the capacity evicted for
it are never held back by the reserve; nor is reclaim, which makes room by eviction (the
claimant takes what it freed). A lending start refused here does not make room for itself
either: it waits for capacity beyond the reserve. Pure, like the rest of the engine.
"""

from __future__ import annotations

import heapq
import math

from scheduler.common.limits import MILLI
from scheduler.common.quantities import milli_gpus
from scheduler.engine.actions.quota import EPS
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Workload
from scheduler.engine.session import Session


def headroom(session: Session) -> int:
    """Milli-GPUs of deserved quota the projects' non-preemptible work does not use."""
    deserved, used = session.deserved, session.use.non_preemptible
    return sum(
        max(0, deserved[name] - used[name])
        for name in session.queues
        if name not in session.departments
    )


def floor(session: Session, workload: Workload, size: int) -> int:
    """Milli-GPUs this start must leave idle: the reserve when it lends (preemptible work
    going beyond its project's deserved quota), capped by the projects' unused deserved
    quota; 0 when the reserve does not hold it back."""
    reserve = session.policy.interactive_reserve
    if not reserve or not workload.preemptible:
        return 0
    queue = workload.queue
    if session.use.allocated[queue] + size <= session.deserved[queue] + EPS:
        return 0
    return min(reserve, headroom(session))


def kept(ledger: Ledger, amount: int) -> bool:
    """Whether the ``ceil(amount)`` most free GPUs hold ``amount`` milli-GPUs idle together."""
    if amount <= 0:
        return True
    if ledger.total_free < amount:
        return False
    count = math.ceil(amount / MILLI)
    ledger.sync()
    tails = (index[-count:] for index in ledger.by_memory.values() if index)
    most = heapq.nlargest(count, (entry[0] for tail in tails for entry in tail))
    return sum(most) >= amount


def held_back(session: Session, workload: Workload, amount: int) -> str:
    """Why a lending start waits, in words."""
    return (
        f"the last {milli_gpus(amount)} of idle capacity is the interactive reserve, kept for "
        f"notebooks inside their project's quota; {workload.queue} is beyond its deserved "
        f"{milli_gpus(session.deserved[workload.queue])}, so this job waits for other GPUs"
    )
