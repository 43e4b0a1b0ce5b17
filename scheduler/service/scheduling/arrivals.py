"""The fast arrival path: a new workload is decided at once, not at the next cycle.

A new workload is decided with ``decide(settled.fork([arrival], now))`` on ``settled``, a
session that holds at least every GPU share held now (exits and cancels only free capacity,
so it may hold more, never less): if the engine starts it there without touching anyone
else, it starts now and the next full cycle confirms it. Whatever else the fork decides
(evictions, a reservation, a wait) is left to the next cycle. The fork becomes the new
``settled``, so arrivals see each other. ``settled`` is replaced by a cycle's session when
the cycle comes back from its worker, with what the fast path started while that cycle
decided taken in (``FastPath.settle``). docs/service.md, "Cycles and arrivals", has the
whole argument; the scheduling loop (``loop.py``, next door) writes and launches the starts
decided here.
"""

from __future__ import annotations

import logging

from scheduler.common.placement import Placement
from scheduler.engine import CycleResult, Evict, Kind, QueueStatus, Session, Start, Workload, decide
from scheduler.service.persistence.orm import WorkloadRecord
from scheduler.service.runtime.metrics import Metrics


class FastPath:
    """What the fast path knows between cycles, and its decisions."""

    def __init__(self, metrics: Metrics, log: logging.Logger) -> None:
        self.metrics = metrics
        self.log = log
        self.settled: Session | None = None
        """A session holding at least every GPU share held now (it may still count work that
        has exited since), forked to decide arrivals in milliseconds (``decide``, the dry
        run); None while nothing guarantees that (see the module's docstring)."""
        self.started: list[tuple[Workload, Placement]] = []
        """What the fast path started since the running cycle's snapshot (as pending, and
        where): that cycle checks its starts against the GPUs held now, and its session
        takes these in before it becomes ``settled``."""
        self.waiting: set[str] = set()
        """Projects an arrival was left waiting in since the last cycle: later arrivals there
        queue behind it rather than jump it."""
        self.late: list[WorkloadRecord] = []
        """Submitted since the running cycle's snapshot (the loop offers them again on the
        cycle's session)."""
        self.evicting: tuple[CycleResult, Session, Session] | None = None
        """A notebook's fork that evicts for it and does nothing else: (its result, the fork,
        ``settled`` before it), for the loop to apply in the notebook's own request when no
        cycle is under way (``SchedulingLoop._evict_now``), so the eviction does not wait
        for a cycle to decide it again; the loop takes it (None) after each ``decide``."""
        self.urgent = False
        """A notebook did not start at once (it needs room made, or waits behind its
        project's queue): the next cycle should not wait out the spacing that shares the
        process with a burst of submissions (the loop clears it)."""

    def unsettle(self) -> None:
        """Nothing guarantees ``settled`` holds every share held any more."""
        self.settled = None

    def cycle_began(self) -> None:
        """A cycle takes its snapshot: what came before is in it."""
        self.started, self.late = [], []
        self.waiting.clear()

    def settle(self, session: Session) -> None:
        """A cycle's outcome becomes ``settled``, plus what the fast path started while it
        decided, so that it holds every share held now: each one is taken on its ledger
        where it runs and accounted as started. A share the cycle also planned (that start
        was skipped) is then counted twice, which only makes the session hold more than is
        held."""
        for workload, placement in self.started:
            request = workload.request
            session.ledger.take(placement, request.cpu_milli, request.memory_mib)
            session.start(workload, placement)
        self.settled = session

    def decide(
        self,
        arrivals: list[Workload],
        queue_status: dict[str, QueueStatus],
        now: float,
        *,
        again: bool = False,
    ) -> tuple[CycleResult, Session, list[Workload]] | None:
        """Decide pending arrivals on a fork of ``settled``. Returns the result, the fork and
        the arrivals offered when the engine starts some of them there without evicting,
        moving or reserving anything: the caller writes those starts, then calls ``took``.
        The rest wait for the next cycle. ``again``: they were offered before, and are not
        counted again in the metrics."""

        def count(outcome: str, n: int = 1) -> None:
            if not again:
                self.metrics.arrived(outcome, n)

        offered: list[Workload] = []
        for arrival in arrivals:
            if self.settled is None:
                count("unsettled")
            elif not self._may_start_now(self.settled, arrival, queue_status):
                count("deferred")
            else:
                offered.append(arrival)
                continue
            self.waiting.add(arrival.queue)
            self.urgent = self.urgent or arrival.kind is Kind.INTERACTIVE
        if not offered or self.settled is None:
            return None
        names = {arrival.name for arrival in offered}
        try:
            fork = self.settled.fork(offered, now)
            # Only the arrivals are decided. The work already waiting in ``settled`` waited
            # there on the same capacity (or more: it still counts exited work); an arrival
            # adds demand, which raises no other queue's share, so none of it would start
            # now, and deciding it again costs as much as a cycle. (The claims held for
            # reserved claimants stay taken on the fork's ledger.)
            fork.pending = {name: w for name, w in fork.pending.items() if name in names}
            result = decide(fork, report_borrowed=True)
        except Exception:  # the full cycle decides them anyway, and says what went wrong
            self.log.exception("the fast path failed for %d arrivals", len(offered))
            self.settled = None
            return None
        clean = not fork.reserved and all(
            isinstance(d, Start) and d.workload in names for d in result.decisions
        )
        if not clean:  # it needs room made: the next cycle decides that, with evictions
            if _evicts_only_for(offered, fork, result):
                self.evicting = (result, fork, self.settled)
            self.settled = self.settled.fork(offered, now)
            self.urgent = self.urgent or any(a.kind is Kind.INTERACTIVE for a in offered)
            count("waited", len(offered))
            self.waiting.update(arrival.queue for arrival in offered)
            return None
        started = {d.workload for d in result.decisions}
        self.waiting.update(a.queue for a in offered if a.name not in started)
        self.urgent = self.urgent or any(
            a.kind is Kind.INTERACTIVE and a.name not in started for a in offered
        )
        count("started", len(started))
        count("waited", len(offered) - len(started))
        if not started:
            self.settled = fork
            return None
        return result, fork, offered

    def released(self, name: str, now: float) -> None:
        """A notebook's share was released: ``settled`` gives it back (on a fork, since the
        running cycle may share its parts), so the next arrival can start on it at once
        rather than wait for a cycle. Only non-preemptible work: the victim lists a fork
        shares never hold it."""
        settled = self.settled
        if settled is None:
            return
        workload = settled.running.get(name)
        if workload is None or workload.preemptible:
            return
        fork = settled.fork((), now)
        fork.finish(name)
        self.settled = fork

    def took(self, fork: Session, result: CycleResult, offered: list[Workload]) -> None:
        """The starts ``decide`` returned are written: the fork is ``settled`` now, and the
        running cycle hears of them."""
        self.settled = fork
        self.started += [
            (arrival, d.placement)
            for d in result.decisions
            for arrival in offered
            if arrival.name == d.workload
        ]

    def _may_start_now(
        self, settled: Session, arrival: Workload, queue_status: dict[str, QueueStatus]
    ) -> bool:
        """Whether an arrival is worth a fork at all: nothing waits in its project ahead of
        it (it would queue behind that), and there are idle GPUs enough for it, or it is a
        notebook (the fork may find the evictions it needs: ``SchedulingLoop._evict_now``).
        Cheap, so a burst of submissions into full queues costs no engine time on the event
        loop; notebooks are few, and their decision takes milliseconds."""
        if arrival.queue in self.waiting:
            return False
        status = queue_status.get(arrival.queue)
        if status is not None and status.pending:
            return False
        if arrival.kind is Kind.INTERACTIVE and not arrival.preemptible:
            return True
        return settled.ledger.total_free >= settled.request_size(arrival)


def _evicts_only_for(offered: list[Workload], fork: Session, result: CycleResult) -> bool:
    """Whether the fork decided evictions for one notebook, and nothing else: it is then
    reserved on what they free, as a cycle would leave it."""
    if len(offered) != 1 or offered[0].kind is not Kind.INTERACTIVE or offered[0].preemptible:
        return False
    name = offered[0].name
    return (
        bool(result.decisions)
        and set(fork.reserved) == {name}
        and all(isinstance(d, Evict) and d.claimant == name for d in result.decisions)
    )
