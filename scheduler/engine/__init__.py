"""The scheduling engine: pure and deterministic, no I/O and no clock.

    run_cycle(snapshot, now, policy) -> CycleResult(decisions, pending reasons, queue status)
    decide(lifecycle.session(nodes, queues, now, policy)) -> the same without a snapshot: the
        lifecycle's standing state, kept current with each change since the last cycle
    decide(settled_session.fork(arrivals, now)) -> the same, in milliseconds, for a few arrivals

Where things are: ``model`` (the data), ``fairshare`` (rule 2), ``placement``
(rule 5 scorers), ``ledger`` (free capacity with undo), ``session`` (one cycle's
state and the pluggable ``Policy``), ``standing`` (that state kept from cycle to cycle,
change by change, for ``lifecycle``), ``actions/`` (one module per action: allocate,
consolidate, reclaim, preempt; beside them the victim search, the service order and the
quota check), ``reasons`` (pending reasons in words), ``cycle`` (the order of it all),
``feasibility`` (whether a request can ever start, decided on the idle cluster), ``dryrun``
(what would happen to it if it arrived now),
``borrowing`` (which running work is beyond its project's quota, reported with the cycle's
result).
"""

from scheduler.engine.aging import Aging
from scheduler.engine.cycle import decide, run_cycle
from scheduler.engine.model import (
    CycleResult,
    Decision,
    Evict,
    EvictReason,
    Kind,
    Move,
    Node,
    Pending,
    Queue,
    QueueStatus,
    Request,
    Snapshot,
    Start,
    State,
    Workload,
    WorkloadRequest,
    default_priority,
)
from scheduler.engine.placement import SCORERS, scorer_named
from scheduler.engine.session import Policy, Session

__all__ = [
    "SCORERS",
    "Aging",
    "CycleResult",
    "Decision",
    "Evict",
    "EvictReason",
    "Kind",
    "Move",
    "Node",
    "Pending",
    "Policy",
    "Queue",
    "QueueStatus",
    "Request",
    "Session",
    "Snapshot",
    "Start",
    "State",
    "Workload",
    "WorkloadRequest",
    "decide",
    "default_priority",
    "run_cycle",
    "scorer_named",
]
