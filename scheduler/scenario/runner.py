"""Drive the engine through a scenario's simulated time.

The runner plays the part the service plays in production: it owns the
workloads' lifecycle (submit, finish, cancel, requeue after eviction, grace
periods, lost nodes), builds a snapshot at each instant, calls ``run_cycle``
until a cycle decides nothing, and applies the decisions. Time jumps from one
instant where something can change to the next: a submission, an event, a
workload's end, a grace period's end, or a min_runtime protection ending.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.engine import (
    CycleResult,
    Evict,
    EvictReason,
    Move,
    Node,
    Placement,
    Policy,
    Snapshot,
    Start,
    State,
    Workload,
    run_cycle,
    scorer_named,
)
from scheduler.engine.ledger import Ledger
from scheduler.engine.model import MILLI
from scheduler.engine.placement import place
from scheduler.scenario.spec import Scenario, WorkloadSpec

MAX_CYCLES_PER_INSTANT = 1000
"""Rule 8 says cycles settle; a runaway loop is an engine bug and is reported as one."""


class Unsettled(RuntimeError):
    """The engine kept changing its mind at one instant (a rule 8 violation)."""


@dataclass
class _Life:
    """One workload's life in the scenario."""

    spec: WorkloadSpec
    seq: int
    state: str = "waiting"  # not yet submitted
    placement: Placement = ()
    started_at: float | None = None
    start_seq: int = 0
    ends_at: float | None = None
    released_at: float | None = None
    claimant: str | None = None
    preemptions: int = 0
    reason: str | None = None
    position: int | None = None


@dataclass
class Outcome:
    """What ``run`` returns; ``to_json`` gives the documented output."""

    time: float
    lives: dict[str, _Life]
    result: CycleResult | None
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        workloads: dict[str, Any] = {}
        for name, life in self.lives.items():
            if life.state == "waiting":
                continue
            state = "running" if life.state == "releasing" else life.state
            entry: dict[str, Any] = {
                "state": state,
                "queue": life.spec.queue,
                "preemptions": life.preemptions,
                "placement": _placement_json(life.placement) if state == "running" else [],
            }
            if state == "running":
                entry["started_at"] = life.started_at
            if state == "pending":
                entry["pending_reason"] = life.reason
                entry["queue_position"] = life.position
            workloads[name] = entry
        queues = {}
        if self.result is not None:
            for name, status in self.result.queues.items():
                queues[name] = {
                    "allocated_gpus": status.allocated_gpus,
                    "fair_share_gpus": status.fair_share_gpus,
                    "running": status.running,
                    "pending": status.pending,
                }
        return {"time": self.time, "workloads": workloads, "queues": queues, "events": self.events}


def _placement_json(placement: Placement) -> list[dict[str, Any]]:
    return [
        {
            "node": replica.node,
            "gpus": [
                {"index": share.index, "share": share.milli / MILLI} for share in replica.gpus
            ],
        }
        for replica in placement
    ]


class Runner:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.policy = Policy(
            scorer=scorer_named(scenario.placement), immediate_evictions=scenario.grace_seconds == 0
        )
        self.nodes: list[Node] = list(scenario.nodes)
        self.lives = {spec.name: _Life(spec, seq) for seq, spec in enumerate(scenario.workloads)}
        self.events: list[dict[str, Any]] = []
        self.start_counter = 0
        self.result: CycleResult | None = None

    # -- the timeline ---------------------------------------------------------------------

    def run(self) -> Outcome:
        self._begin_running()
        until = self.scenario.run_until
        now = 0.0
        while True:
            self._instant(now)
            upcoming = self._next_instant(now)
            if upcoming is None or (until is not None and upcoming > until):
                break
            now = upcoming
        final = until if until is not None else now
        return Outcome(final, self.lives, self.result, self.events)

    def _next_instant(self, now: float) -> float | None:
        times = [spec.at for spec in self.scenario.workloads if spec.at > now]
        times += [event.at for event in self.scenario.events if event.at > now]
        for life in self.lives.values():
            if life.state == "running" and life.ends_at is not None:
                times.append(life.ends_at)
            if life.state == "releasing" and life.released_at is not None:
                times.append(life.released_at)
        if self.result is not None and self.result.next_wakeup is not None:
            times.append(self.result.next_wakeup)
        later = [t for t in times if t > now]
        return min(later, default=None)

    def _instant(self, now: float) -> None:
        for life in self.lives.values():
            if (
                life.state == "releasing"
                and life.released_at is not None
                and life.released_at <= now
            ):
                self._requeue(life)
        for name, life in self.lives.items():
            if life.state == "running" and life.ends_at is not None and life.ends_at <= now:
                self._end(name, life, "succeeded", now)
        for event in self.scenario.events:
            if event.at == now:
                self._apply_event(event, now)
        for life in self.lives.values():
            if life.state == "waiting" and life.spec.at <= now:
                life.state = "pending"
        for _ in range(MAX_CYCLES_PER_INSTANT):
            snapshot = self._snapshot()
            self.policy = self.policy.for_snapshot(snapshot)  # target: the requests so far
            self.result = run_cycle(snapshot, now, self.policy)
            if not self.result.decisions:
                break
            self._apply(self.result, now)
        else:
            raise Unsettled(f"the engine did not settle at t={now:g}s")
        for name, life in self.lives.items():
            pending = self.result.pending.get(name)
            life.reason = pending.reason if pending else None
            life.position = pending.position if pending else None

    def _begin_running(self) -> None:
        """Workloads that begin running are started at time 0 in file order."""
        ledger = Ledger(self.nodes)
        scorer = scorer_named(self.scenario.placement)
        for life in self.lives.values():
            if life.spec.running and life.spec.placement:
                ledger.take(
                    life.spec.placement, life.spec.request.cpu_milli, life.spec.request.memory_mib
                )
        for name, life in self.lives.items():
            if not life.spec.running:
                continue
            placement = life.spec.placement or place(ledger, life.spec.request, scorer)
            if placement is None:
                life.state = "pending"  # does not fit: it waits like any other
                continue
            self._started(name, life, placement, 0.0, announce=False)

    # -- applying -------------------------------------------------------------------------

    def _apply(self, result: CycleResult, now: float) -> None:
        for decision in result.decisions:
            life = self.lives[decision.workload]
            if isinstance(decision, Start):
                if life.state == "pending":
                    self._started(decision.workload, life, decision.placement, now)
            elif isinstance(decision, Evict):
                self._evicted(decision.workload, life, decision.reason, now)
                life.claimant = decision.claimant
            elif isinstance(decision, Move):
                self._evicted(decision.workload, life, EvictReason.CONSOLIDATE, now)
                life.claimant = decision.claimant
                if life.state == "pending":
                    self._started(decision.workload, life, decision.placement, now)

    def _started(
        self, name: str, life: _Life, placement: Placement, now: float, announce: bool = True
    ) -> None:
        self.start_counter += 1
        life.state = "running"
        life.claimant = None
        life.placement = placement
        life.started_at = now
        life.start_seq = self.start_counter
        duration = life.spec.duration
        life.ends_at = None if duration is None else now + duration
        if announce:
            nodes = list(dict.fromkeys(replica.node for replica in placement))
            event: dict[str, Any] = {
                "time": now,
                "type": "started",
                "workload": name,
                "node": nodes[0] if nodes else None,
            }
            if len(nodes) > 1:
                event["nodes"] = nodes
            self.events.append(event)

    def _evicted(self, name: str, life: _Life, reason: EvictReason, now: float) -> None:
        life.preemptions += 1
        self.events.append(
            {"time": now, "type": "evicted", "workload": name, "reason": reason.value}
        )
        node_gone = reason is EvictReason.NODE_LOST
        if self.scenario.grace_seconds > 0 and not node_gone:
            life.state = "releasing"
            life.released_at = now + self.scenario.grace_seconds
        else:
            self._requeue(life)

    def _requeue(self, life: _Life) -> None:
        life.state = "pending"
        life.placement = ()
        life.started_at = None
        life.ends_at = None
        life.released_at = None  # the claimant stays: a requeued victim yields to it

    def _end(self, name: str, life: _Life, state: str, now: float) -> None:
        life.state = state
        life.placement = ()
        life.ends_at = None
        self.events.append({"time": now, "type": state, "workload": name})

    def _apply_event(self, event, now: float) -> None:
        if event.action == "add_node":
            self.nodes.append(event.node)
        elif event.action == "remove_node":
            self.nodes = [node for node in self.nodes if node.name != event.target]
        else:
            life = self.lives[event.target]
            if life.state in ("succeeded", "cancelled", "failed"):
                return
            self._end(
                event.target, life, "succeeded" if event.action == "finish" else "cancelled", now
            )

    def _snapshot(self) -> Snapshot:
        workloads = []
        for name, life in self.lives.items():
            state = {
                "pending": State.PENDING,
                "running": State.RUNNING,
                "releasing": State.RELEASING,
            }.get(life.state)
            if state is None:
                continue
            spec = life.spec
            workloads.append(
                Workload(
                    name=name,
                    queue=spec.queue,
                    kind=spec.kind,
                    request=spec.request,
                    priority=spec.priority,
                    preemptible=spec.preemptible,
                    submitted_at=spec.at,
                    seq=life.seq,
                    min_runtime=spec.min_runtime,
                    user=spec.user,
                    state=state,
                    placement=life.placement,
                    started_at=life.started_at,
                    start_seq=life.start_seq,
                    claimant=life.claimant if state in (State.RELEASING, State.PENDING) else None,
                )
            )
        return Snapshot(tuple(self.nodes), self.scenario.queues, tuple(workloads))


def run_scenario(scenario: Scenario) -> Outcome:
    """Replay a validated scenario through the engine."""
    return Runner(scenario).run()
