"""Which of a cycle's decisions still hold when the cycle comes back from its worker thread.

A cycle decides on a snapshot taken when it began; the service keeps answering requests
while the engine works, so by the time the decisions come back a workload may have been
cancelled, may have exited or been stopped, and the fast arrival path may have started new
work on GPUs the cycle also planned to use. Two rules keep every decision applied once and
only against the state it was made for:

1. **The workload is as the engine saw it.** A decision about a workload is applied only if
   the workload's view now (``Life.workload()``: state, placement, start order, claimant,
   last checkpoint) equals the one in the snapshot. Anything that happened to it meanwhile
   (cancelled, exited, requeued, stopped at its time limit, started by the fast path,
   checkpointed) makes the decision stale, and it is skipped; the next cycle decides again
   from the new state. A decision is applied at most once because a result is applied
   once, and a second one about the same workload was made on a view it no longer has.
2. **A start fits the GPUs as they are now.** Only the fast path takes capacity between a
   snapshot and its decisions (exits and cancels only give it back). When it started
   anything during the cycle, each ``Start`` is checked, in the engine's order, against a
   ledger of what every holding workload holds now, and one that no longer fits is
   skipped. Evictions take no capacity; their claimants are reserved, and start in a later
   cycle from that cycle's own snapshot.

Pure: views, lives and nodes in, the decisions to apply out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from scheduler.engine import CycleResult, Start, Workload
from scheduler.engine.ledger import Ledger
from scheduler.engine.lifecycle import Life
from scheduler.engine.model import Node, Placement, Request


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
    ledger = _held_now(lives, nodes) if capacity_taken else None
    kept = []
    for decision in result.decisions:
        life = lives.get(decision.workload)
        view = seen.get(decision.workload)
        if life is None or view is None or not life.state.active or life.workload() != view:
            continue
        if (
            ledger is not None
            and isinstance(decision, Start)
            and not _take(ledger, decision.placement, view.request)
        ):
            continue
        kept.append(decision)
    if len(kept) == len(result.decisions):
        return result, 0
    return replace(result, decisions=tuple(kept)), len(result.decisions) - len(kept)


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
