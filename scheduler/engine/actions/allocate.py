"""Start a pending workload on idle capacity, or say why it cannot start there."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler.common.limits import MILLI
from scheduler.engine import reasons, reserve
from scheduler.engine.actions.quota import EPS, host_limited, quota_refusal
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import Workload, held_milli
from scheduler.engine.placement import fits_somewhere_ever, place
from scheduler.engine.session import Session


@dataclass
class Outcome:
    """Why a workload could not start in this cycle (None when it started)."""

    reason: str
    capacity: bool
    """True when only free capacity was missing, so evictions might help."""
    limit_blocked: bool = False
    """True when a limit refused it: preempting the queue's own lower-priority work can help.
    (Nothing can help a non-preemptible workload beyond its deserved quota: victims are
    always preemptible, so evicting them frees none of that quota.)"""


Shape = tuple[bool, int, int, int, int, frozenset[str]]


@dataclass
class Failures:
    """Request shapes that found no idle room. Idle capacity only shrinks until an eviction
    frees some, so meanwhile any request at least as large fails too and need not be placed
    again, if it may use no GPU model the failed one could not.

    After an eviction (the cycle calls ``revisit``) a failed shape is asked again only if
    one of the nodes the ledger changed on since the last look could now hold one replica
    of it: every other node could not hold one when the shape failed and has not changed,
    so the placement would fail again (for a gang too: a replica takes exactly one of a
    node's places for its shape, so a greedy gang placement fits as long as the places add
    up, and no place was added)."""

    shapes: list[Shape] = field(default_factory=list)
    _known: set[Shape] = field(default_factory=set)
    """Speed only: shapes ``known`` answered True for since the last change to ``shapes``.
    The list only grows until then, so a True answer stays True; at 4,000 nodes tens of
    thousands of pending workloads share a handful of shapes, and the dominance scan was 4%
    of a cycle."""
    _seen: int = 0
    """How far ``revisit`` has read the ledger's change journal."""

    @staticmethod
    def shape(workload: Workload) -> Shape | None:
        request = workload.request
        if request.gpu_memory_mib is not None:
            return None
        size = request.whole_gpus * MILLI if request.whole_gpus else round(request.gpus * MILLI)
        return (
            request.is_fraction,
            size,
            request.replicas,
            request.cpu_milli,
            request.memory_mib,
            request.gpu_models,
        )

    def known(self, shape: Shape | None) -> bool:
        if shape is None:
            return False
        if shape in self._known:
            return True
        dominated = any(
            failed[0] == shape[0]
            and all(a >= b for a, b in zip(shape[1:5], failed[1:5], strict=True))
            and (not failed[5] or (shape[5] and shape[5] <= failed[5]))
            for failed in self.shapes
        )
        if dominated:
            self._known.add(shape)
        return dominated

    def add(self, shape: Shape) -> None:
        """Remember a shape that found no idle room."""
        self.shapes.append(shape)
        self._known.add(shape)

    def watch(self, ledger: Ledger) -> None:
        """Start reading ``ledger``'s change journal from where it is now."""
        self._seen = len(ledger.watch())

    def revisit(self, ledger: Ledger) -> None:
        """Capacity came back (an eviction or a move): forget the failed shapes that one of
        the nodes changed since the last look could now hold (``watch`` first)."""
        journal = ledger.watch()
        changed = set(journal[self._seen :])
        self._seen = len(journal)
        if not changed or not self.shapes:
            return
        kept = [s for s in self.shapes if not any(_holds(ledger, n, s) for n in changed)]
        if len(kept) != len(self.shapes):
            self.shapes = kept
            self._known = set()  # some answers leant on a dropped shape: ask again


def _holds(ledger: Ledger, n: int, shape: Shape) -> bool:
    """Whether node ``n`` has room for one replica of ``shape`` now (never False where a
    placement could put one there: an overestimate only costs a placement question)."""
    fraction, size, _, cpu, memory, models = shape
    if models and ledger.nodes[n].gpu_model not in models:
        return False
    if not ledger.host_fits(n, cpu, memory):
        return False
    if fraction:
        return any(free >= size for free in ledger.free[n])
    return ledger.whole_free[n] >= size // MILLI


def try_start(
    session: Session,
    workload: Workload,
    failures: Failures | None = None,
    *,
    claimed: bool = False,
) -> Outcome | None:
    """Start ``workload`` on idle capacity, or say why not. ``claimed``: it takes capacity
    evicted for it, which the interactive reserve never holds back."""
    size = session.request_size(workload)
    refusal = quota_refusal(session, workload, size)
    if refusal is not None:
        return Outcome(refusal, capacity=False, limit_blocked=_limited(session, workload, size))
    keep = 0
    if session.policy.interactive_reserve and not claimed:  # off: not even a call
        keep = reserve.floor(session, workload, size)
    if keep and session.ledger.total_free - size < keep:
        return Outcome(reserve.held_back(session, workload, keep), capacity=False)
    shape = Failures.shape(workload)
    if session.ledger.accounts is not None and workload.request.is_fraction:
        shape = None  # where one account's share fails, another's may fit (one account a GPU)
    if failures is not None and failures.known(shape):
        return _no_room(session, workload)
    mark = session.ledger.mark()
    placement = place(session.ledger, workload.request, session.policy.scorer, None, workload.user)
    if placement is None:
        if failures is not None and shape is not None:
            failures.add(shape)
        return _no_room(session, workload)
    actual = held_milli(placement)
    if actual != size:  # a memory request landed on a smaller GPU: check again, exactly
        refusal = quota_refusal(session, workload, actual)
        if refusal is not None:
            session.ledger.rollback(mark)
            return Outcome(refusal, capacity=False, limit_blocked=_limited(session, workload, size))
    if keep and not reserve.kept(session.ledger, keep):
        session.ledger.rollback(mark)
        return Outcome(reserve.held_back(session, workload, keep), capacity=False)
    session.start(workload, placement)
    return None


def _limited(session: Session, workload: Workload, size: int) -> bool:
    """Whether a limit (rather than only the non-preemptible quota) refuses this size."""
    return any(
        session.queues[name].limit_gpus is not None
        and session.use.allocated[name] + size > session.queues[name].limit_gpus * MILLI + EPS
        for name in session.ancestry[workload.queue]
    ) or bool(session.host and host_limited(session, workload))


def _no_room(session: Session, workload: Workload) -> Outcome:
    """Capacity is missing; evictions can only help if an empty node could hold it."""
    ever = fits_somewhere_ever(session.ledger.shapes_for(workload.request), workload.request)
    return Outcome(reasons.no_room(session, workload), capacity=ever)
