"""Drive the engine through a scenario's simulated time.

The runner plays the part the service plays in production, through the same lifecycle
(``scheduler.engine.lifecycle``): it submits workloads when their time comes, runs cycles
until one decides nothing, and carries out the lifecycle's effects in simulated time: a
launched process ends after its duration, a stopped one releases its GPUs after the grace
period. Time jumps from one instant where something can change to the next: a submission,
an event, a workload's end, a grace period's end, or a min_runtime protection ending.

Subclasses (the fleet simulator, the property tests' observer) extend it through the public
hooks ``before_instant``, ``after_instant``, ``after_cycle``, ``on_effect``, ``run_time`` and
``next_instant``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.common.limits import MILLI
from scheduler.common.placement import placement_to_api
from scheduler.common.states import WorkloadState
from scheduler.engine import CycleResult, Node, Policy, Session, Snapshot, decide, scorer_named
from scheduler.engine.ledger import Ledger
from scheduler.engine.lifecycle import (
    Effect,
    Ended,
    Evicted,
    Launch,
    Life,
    Lifecycle,
    Milestone,
    Started,
    Stop,
)
from scheduler.engine.placement import place
from scheduler.scenario.spec import EventSpec, Scenario, WorkloadSpec
from scheduler.scenario.usage import UsageAccrual

MAX_CYCLES_PER_INSTANT = 1000
"""Rule 8 says cycles settle; a runaway loop is an engine bug and is reported as one."""


class Unsettled(RuntimeError):
    """The engine kept changing its mind at one instant (a rule 8 violation)."""


@dataclass
class Outcome:
    """What ``run`` returns; ``to_json`` gives the documented output."""

    time: float
    lives: dict[str, Life]
    result: CycleResult | None
    events: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        pending = self.result.pending if self.result is not None else {}
        workloads: dict[str, Any] = {}
        for name, life in self.lives.items():
            # a workload giving its GPUs back still holds them: the scenario shows it running
            state = WorkloadState.RUNNING if life.state.releasing else life.state
            entry: dict[str, Any] = {
                "state": state.value,
                "queue": life.ask.queue,
                "preemptions": life.preemptions,
                "placement": (
                    placement_to_api(life.placement) if state is WorkloadState.RUNNING else []
                ),
            }
            if state is WorkloadState.RUNNING:
                entry["started_at"] = life.started_at
            if state is WorkloadState.PENDING:
                waiting = pending.get(name)
                entry["pending_reason"] = waiting.reason if waiting else None
                entry["queue_position"] = waiting.position if waiting else None
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
                if status.usage is not None:
                    queues[name]["usage"] = status.usage
                    queues[name]["fair_share_without_usage_gpus"] = (
                        status.fair_share_without_usage_gpus
                    )
                for key, standing in status.resources.items():  # counted by quota only
                    unit, suffix = (1000, "cpu") if key == "cpu" else (1024, "memory_gib")
                    queues[name][f"allocated_{suffix}"] = standing.allocated / unit
                    queues[name][f"fair_share_{suffix}"] = round(standing.fair_share / unit, 6)
        return {"time": self.time, "workloads": workloads, "queues": queues, "events": self.events}


class Runner:
    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        immediate = scenario.grace_seconds == 0
        self.policy = Policy(
            scorer=scorer_named(scenario.placement),
            immediate_evictions=immediate,
            aging=scenario.aging,
            interactive_reserve=round(scenario.interactive_reserve_gpus * MILLI),
        )
        self.nodes: list[Node] = list(scenario.nodes)
        self.lifecycle = Lifecycle(grace_seconds=scenario.grace_seconds, immediate=immediate)
        self.specs: dict[str, WorkloadSpec] = {}
        """Every submitted workload's spec (its duration is simulated here)."""
        self.unsubmitted = list(enumerate(scenario.workloads))
        self.ends_at: dict[str, float] = {}
        """Running work whose process ends by itself: when."""
        self.released_at: dict[str, float] = {}
        """Preempting work: when its grace period ends and it gives its GPUs back."""
        self.events: list[dict[str, Any]] = []
        self.result: CycleResult | None = None
        self.usage = (
            UsageAccrual(scenario.usage, scenario.queues, self.nodes) if scenario.usage else None
        )
        """Usage history in simulated time, when the scenario turns usage-decayed fair share on."""

    @property
    def lives(self) -> dict[str, Life]:
        return self.lifecycle.lives

    # -- the timeline ---------------------------------------------------------------------

    def run(self) -> Outcome:
        self.begin_running()
        until = self.scenario.run_until
        now = 0.0
        while True:
            self.instant(now)
            upcoming = self.next_instant(now)
            if upcoming is None or (until is not None and upcoming > until):
                break
            now = upcoming
        final = until if until is not None else now
        lives = {
            s.name: self.lives[s.name] for s in self.scenario.workloads if s.name in self.lives
        }
        return Outcome(final, lives, self.result, self.events)

    def next_instant(self, now: float) -> float | None:
        """The next time something can change after ``now``, if any."""
        times = [spec.at for _, spec in self.unsubmitted if spec.at > now]
        times += [event.at for event in self.scenario.events if event.at > now]
        times += self.ends_at.values()
        times += self.released_at.values()
        if self.result is not None and self.result.next_wakeup is not None:
            times.append(self.result.next_wakeup)
        later = [t for t in times if t > now]
        return min(later, default=None)

    def instant(self, now: float) -> None:
        """Everything that happens at ``now``, then cycles until the engine settles."""
        if self.usage is not None:
            self.usage.accrue(now)
        self.before_instant(now)
        for name in self._due(self.released_at, now):
            self._carry_out(self.lifecycle.exited(name, now), now)
        for name in self._due(self.ends_at, now):
            self._carry_out(self.lifecycle.exited(name, now, exit_code=0), now)
        for event in self.scenario.events:
            if event.at == now:
                self._apply_event(event, now)
        due = [item for item in self.unsubmitted if item[1].at <= now]
        if due:
            self.unsubmitted = [item for item in self.unsubmitted if item[1].at > now]
            for seq, spec in due:
                self.submit(seq, spec, now)
        observed = type(self).after_cycle is not Runner.after_cycle
        for _ in range(MAX_CYCLES_PER_INSTANT):
            snapshot = self.snapshot() if observed else None
            session = self.session(now)
            self.policy = session.policy  # target: the requests so far
            self.result = decide(session)
            if not self.result.decisions:
                break
            self._carry_out(self.lifecycle.apply(self.result, now), now)
            if snapshot is not None:
                self.after_cycle(snapshot, self.result, now)
        else:
            raise Unsettled(f"the engine did not settle at t={now:g}s")
        if self.usage is not None:
            self.usage.settled(now, self.lives, self.nodes)
        self.after_instant(now)

    def session(self, now: float) -> Session:
        """The next cycle's session: the service's path, the lifecycle's standing state
        brought up to date (a subclass may also fork it for a dry run)."""
        return self.lifecycle.session(
            tuple(self.nodes),
            self.scenario.queues,
            now,
            self.policy,
            usage=self.usage.current(now) if self.usage is not None else None,
        )

    def _due(self, times: dict[str, float], now: float) -> list[str]:
        """Names whose time has come (taken out of ``times``), in submission order."""
        due = [name for name, at in times.items() if at <= now]
        for name in due:
            del times[name]
        return sorted(due, key=lambda name: self.lives[name].ask.seq)

    def submit(self, seq: int, spec: WorkloadSpec, now: float) -> None:
        """``spec`` joins the back of its queue; ``seq`` orders it among the others."""
        self.specs[spec.name] = spec
        life = Life(spec.ask.workload(spec.name, seq, spec.at), title=spec.name)
        self._carry_out(self.lifecycle.submit(life, now), now)

    def snapshot(self) -> Snapshot:
        return self.lifecycle.snapshot(tuple(self.nodes), self.scenario.queues)

    def begin_running(self) -> None:
        """Workloads that begin running are started at time 0 in file order."""
        ledger = Ledger(self.nodes)
        scorer = scorer_named(self.scenario.placement)
        for _, spec in self.unsubmitted:
            if spec.running and spec.placement:
                request = spec.ask.request
                ledger.take(spec.placement, request.cpu_milli, request.memory_mib)
        for seq, spec in list(self.unsubmitted):
            if not spec.running:
                continue
            self.unsubmitted.remove((seq, spec))
            self.submit(seq, spec, 0.0)
            placement = spec.placement or place(ledger, spec.ask.request, scorer)
            if placement is not None:  # else it does not fit: it waits like any other
                self._carry_out(self.lifecycle.start(spec.name, placement, 0.0), 0.0, False)

    # -- hooks for subclasses -------------------------------------------------------------

    def before_instant(self, now: float) -> None:
        """Called first at each instant, before anything the scenario itself does."""

    def after_instant(self, now: float) -> None:
        """Called once the engine has settled at ``now``."""

    def after_cycle(self, snapshot: Snapshot, result: CycleResult, now: float) -> None:
        """Called after each cycle that decided something, once its decisions are applied."""

    def on_effect(self, effect: Effect, now: float) -> None:
        """Called for every effect of the lifecycle, after the runner has carried it out."""

    def run_time(self, name: str, now: float) -> float | None:
        """How long a process launched now runs until it ends by itself (None: never)."""
        return self.specs[name].duration

    # -- carrying out ---------------------------------------------------------------------

    def _carry_out(self, effects: list[Effect], now: float, announce: bool = True) -> None:
        for effect in effects:
            name = effect.name
            if isinstance(effect, Started) and announce:
                nodes = list(dict.fromkeys(replica.node for replica in effect.placement))
                event: dict[str, Any] = {
                    "time": now,
                    "type": Milestone.STARTED.value,
                    "workload": name,
                    "node": nodes[0] if nodes else None,
                }
                if len(nodes) > 1:
                    event["nodes"] = nodes
                self.events.append(event)
            elif isinstance(effect, Launch):
                run = self.run_time(name, now)
                if run is None:
                    self.ends_at.pop(name, None)
                else:
                    self.ends_at[name] = now + run
            elif isinstance(effect, Evicted):
                self.ends_at.pop(name, None)
                self.events.append(
                    {
                        "time": now,
                        "type": "evicted",
                        "workload": name,
                        "reason": effect.reason.value,
                        "message": effect.message,
                    }
                )
            elif isinstance(effect, Stop):
                if self.lives[name].state.releasing:
                    self.released_at[name] = now + effect.grace
            elif isinstance(effect, Ended):
                self.ends_at.pop(name, None)
                self.released_at.pop(name, None)
                self.events.append({"time": now, "type": effect.state.value, "workload": name})
            self.on_effect(effect, now)

    def _apply_event(self, event: EventSpec, now: float) -> None:
        if event.action == "add_node":
            assert event.node is not None
            self.nodes.append(event.node)
        elif event.action == "remove_node":
            self.nodes = [node for node in self.nodes if node.name != event.target]
        else:
            if event.target not in self.lives:  # ended before its time came: never submitted
                seq, spec = next(item for item in self.unsubmitted if item[1].name == event.target)
                self.unsubmitted.remove((seq, spec))
                self.submit(seq, spec, now)
            if self.lives[event.target].state.final:
                return
            state = WorkloadState.SUCCEEDED if event.action == "finish" else WorkloadState.CANCELLED
            self._carry_out(self.lifecycle.end(event.target, now, state), now)


def run_scenario(scenario: Scenario) -> Outcome:
    """Replay a validated scenario through the engine."""
    return Runner(scenario).run()
