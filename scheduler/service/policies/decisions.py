"""Which of a cycle's decisions still hold when the cycle comes back from its worker thread.

A cycle decides on a snapshot taken when it began; the service keeps answering requests
while the engine works, so by the time the decisions come back a workload may have been
cancelled, may have exited or been stopped, and the fast arrival path may have started new
work on GPUs the cycle also planned to use. The decisions are then applied in slices, with
requests answered between them (``SchedulingLoop._apply``), so the world keeps moving while
they are applied too. Two rules, checked for each decision just before it is applied
(``Reconciler``), keep every decision applied once and only against the state it was made
for:

1. **The workload is as the engine saw it.** A decision about a workload is applied only if
   the workload's view now (``Life.workload()``: state, placement, start order, claimant,
   last checkpoint) equals the one in the snapshot. Anything that happened to it meanwhile
   (cancelled, exited, requeued, stopped at its time limit, started by the fast path,
   checkpointed) makes the decision stale, and it is skipped; the next cycle decides again
   from the new state. A decision is applied at most once because a result is applied
   once, each of its decisions in one slice, and a second one about the same workload was
   made on a view it no longer has. (A cycle's later decision about a workload its earlier
   one changed is checked against the view that decision left.)
2. **A start fits the GPUs as they are now.** Only the fast path takes capacity between a
   snapshot and its decisions (exits and cancels only give it back). Once it has started
   anything since the snapshot (while the cycle decided, or between two of its slices),
   each ``Start`` is checked, in the engine's order, against a ledger of what every holding
   workload holds now, kept up to date with what the fast path starts later, and one that
   no longer fits is skipped. Evictions take no capacity; their claimants are reserved,
   and start in a later cycle from that cycle's own snapshot.

Pure: views, lives and nodes in, the decisions to apply out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace

from scheduler.common.placement import Placement
from scheduler.common.states import WorkloadState
from scheduler.engine import CycleResult, Decision, Start, Workload
from scheduler.engine.ledger import Ledger
from scheduler.engine.lifecycle import Life
from scheduler.engine.model import Node, Request


def current_decisions(
    result: CycleResult,
    seen: Mapping[str, Workload],
    lives: Mapping[str, Life],
    nodes: Sequence[Node],
    *,
    capacity_taken: bool,
) -> tuple[CycleResult, int]:
    """``result`` without the decisions that went stale since its snapshot (``seen``, by
    name), and how many were dropped. ``capacity_taken``: something outside the cycle
    started work since the snapshot, so starts are checked against the GPUs held now."""
    check = Reconciler(seen, lives, nodes)
    if capacity_taken:
        check.capacity_taken(())
    kept = [decision for decision in result.decisions if check.holds(decision)]
    if len(kept) == len(result.decisions):
        return result, 0
    return replace(result, decisions=tuple(kept)), len(result.decisions) - len(kept)


class Reconciler:
    """The two rules, decision by decision, for a cycle applied in slices: the event loop
    answers requests between slices, so each decision is checked just before it is applied,
    against the lives and the GPUs as they are at that moment.

    ``seen`` starts as what the cycle counted; ``applied`` moves a workload's entry on to
    what the cycle's own decision made of it, so a later decision of the same cycle about it
    is checked against that, and anything else that happened to it still makes it stale.
    """

    def __init__(
        self, seen: Mapping[str, Workload], lives: Mapping[str, Life], nodes: Sequence[Node]
    ) -> None:
        self.seen = dict(seen)
        self.lives = lives
        self.nodes = nodes
        self._known = {node.name for node in nodes}
        self._ledger: Ledger | None = None

    def capacity_taken(self, started: Iterable[tuple[Workload, Placement]]) -> None:
        """Work started outside the cycle (the fast path) since the last call, or since the
        snapshot on the first: from then on every start is checked against a ledger of the
        GPUs held. The first call builds it from every holding life, which counts
        ``started`` (and the cycle's starts applied so far) already; later calls take what
        ``started`` names on it."""
        if self._ledger is None:
            self._ledger = _held_now(self.lives, self.nodes)
            return
        for workload, placement in started:
            if all(replica.node in self._known for replica in placement):
                request = workload.request
                self._ledger.take(placement, request.cpu_milli, request.memory_mib)

    def holds(self, decision: Decision) -> bool:
        """Whether ``decision`` may be applied now (rule 1, then rule 2 for a start, whose
        GPUs it then takes on the ledger)."""
        life = self.lives.get(decision.workload)
        view = self.seen.get(decision.workload)
        # a start is of pending work, an eviction (or a move) of running work: so a decision
        # checked again after it was applied does not hold
        wanted = WorkloadState.PENDING if isinstance(decision, Start) else WorkloadState.RUNNING
        if life is None or view is None or life.state is not wanted or life.workload() != view:
            return False
        return (
            self._ledger is None
            or not isinstance(decision, Start)
            or _take(self._ledger, decision.placement, view.request)
        )

    def applied(self, decision: Decision) -> None:
        """``decision`` was applied: its workload is now as the cycle made it."""
        life = self.lives.get(decision.workload)
        if life is not None and life.state.active:
            self.seen[decision.workload] = life.workload()
        else:
            self.seen.pop(decision.workload, None)


def _held_now(lives: Mapping[str, Life], nodes: Sequence[Node]) -> Ledger:
    known = {node.name for node in nodes}
    return Ledger(
        nodes,
        [
            (life.placement, life.ask.request.cpu_milli, life.ask.request.memory_mib)
            for life in lives.values()
            if life.state.holding and all(replica.node in known for replica in life.placement)
        ],
    )


def _take(ledger: Ledger, placement: Placement, request: Request) -> bool:
    """Take ``placement`` on ``ledger`` if every share of it is still free; else change
    nothing and say so."""
    mark = ledger.mark()
    for replica in placement:
        n = ledger.index.get(replica.node)
        if (
            n is None
            or not ledger.host_fits(n, request.cpu_milli, request.memory_mib)
            or any(
                share.index >= len(ledger.free[n]) or ledger.free[n][share.index] < share.milli
                for share in replica.gpus
            )
        ):
            ledger.rollback(mark)
            return False
        ledger.take((replica,), request.cpu_milli, request.memory_mib)
    return True
